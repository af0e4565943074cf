"""Ray for the commands that fan runs out over a cluster (``compare --ray``, ``benchmark --ray``): a session
connected to an address, and the tasks submitted in it gathered as they finish, with a deadline.

An address is ``"local"`` (a Ray instance started on this machine for the command), ``"auto"`` (the
cluster this machine joined with ``ray start``), ``HOST:PORT`` (a cluster's head node) or
``ray://HOST[:PORT]`` (Ray Client, port 10001 by default). A malformed address is a ``ValueError`` naming
it; a head node that does not answer is a ``ConnectionError`` naming it, within :data:`CONNECT_TIMEOUT_S`
(``ray.init`` itself waits minutes on an address where nothing listens).

Ray is imported here only, when a command fans out: ``import schedule_gym`` never needs it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

__all__ = ["CONNECT_TIMEOUT_S", "LOCAL", "as_finished", "cancelling", "check_address", "import_ray", "ray_session",
           "task_error"]

#: The address that starts a Ray instance on this machine (``ray.init()`` with no address).
LOCAL = "local"
#: The address of the cluster this machine joined (``ray start``).
AUTO = "auto"
#: The port of a Ray Client server (``ray://HOST`` without a port).
RAY_CLIENT_PORT = 10001
#: How long a head node's port has to accept a connection before the session gives up on it.
CONNECT_TIMEOUT_S = 10.0

ADDRESS_FORMS = "a Ray address is 'local', 'auto', HOST:PORT or ray://HOST[:PORT]"

K = TypeVar("K")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("--ray needs Ray: pip install 'schedule-gym[ray]' (see docs/cluster.md)") from None
    return ray


def check_address(address: str) -> tuple[str, int] | None:
    """The host and port ``address`` names (None for ``"local"`` and ``"auto"``); a ``ValueError`` naming a
    malformed one."""
    if not isinstance(address, str) or not address:
        raise ValueError(f"{ADDRESS_FORMS}, got {address!r}")
    if address in (LOCAL, AUTO):
        return None
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    try:
        parts = urlsplit("//" + rest)
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number, or out of range
        host = port = None
    if not host or parts.path or parts.query or parts.fragment or (port is None and not client):
        raise ValueError(f"{ADDRESS_FORMS}, got {address!r}")
    return host, RAY_CLIENT_PORT if port is None else port


@contextmanager
def ray_session(address: str, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Any]:
    """Ray, connected to ``address`` (see the module's documentation). A Ray the caller already initialised
    is used as it is and left running; one started here is shut down."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    where = check_address(address)
    if where is not None:
        try:
            with socket.create_connection(where, timeout=connect_timeout_s):
                pass
        except OSError as exc:
            raise ConnectionError(f"no Ray cluster answers at {address} ({exc}); start one "
                                  "with 'ray start --head' (docs/cluster.md)") from None
    try:
        ray.init(address=None if address == LOCAL else address, include_dashboard=False if address == LOCAL else None,
                 log_to_driver=False)
    except ConnectionError as exc:
        raise ConnectionError(f"cannot connect to Ray at {address}: {exc}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def as_finished(
    ray: Any, pending: dict[Any, K], timeout_s: float | None = None, describe: Callable[[K], str] = str,
) -> Iterator[tuple[K, Any, BaseException | None]]:
    """The tasks of ``pending`` (object ref -> key) as they finish: ``(key, value, None)``, or ``(key, None,
    error)`` for a task that failed; each is taken out of ``pending`` first.

    ``timeout_s`` is the longest wait for the next task to finish (None: no limit); past it, a
    ``ConnectionError`` naming the tasks still pending (``describe(key)``) and the deadline. Whatever is left
    in ``pending`` (a deadline, a caller that stops early) is the caller's to cancel (:func:`cancelling`)."""
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=timeout_s)
        if not done:
            names = [describe(key) for key in pending.values()]
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            raise ConnectionError(f"no Ray task finished within the deadline of {timeout_s:g} s; "
                                  f"still running or queued: {shown}")
        key = pending.pop(done[0])
        try:
            value = ray.get(done[0], timeout=timeout_s)  # finished: this does not wait
        except ray.exceptions.RayError as exc:
            yield key, None, exc
            continue
        yield key, value, None


@contextmanager
def cancelling(ray: Any, pending: dict[Any, Any]) -> Iterator[dict[Any, Any]]:
    """``pending``, whose tasks still in it are cancelled (forcibly: their workers are killed) on leaving
    the block, however it is left (an error, a deadline, Ctrl-C, a generator closed early)."""
    try:
        yield pending
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def task_error(exc: BaseException) -> str:
    """``"Type: message"`` of what made a task fail: its own exception where Ray has it."""
    cause = getattr(exc, "cause", None) or exc  # a task's own exception (its traceback: __cause__)
    return f"{type(cause).__name__}: {cause}"
