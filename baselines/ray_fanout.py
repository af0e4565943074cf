"""The comparison harness's runs as Ray tasks (``schedule-gym compare --ray ADDRESS``).

:func:`~schedule_gym.baselines.compare.run_comparison` hands the runs that are not saved yet to
:func:`fan_out`, which makes each (agent, seed, budget) run one Ray task and yields the runs as they
finish; the driver saves each one the moment it arrives, exactly as on one machine, so an interrupted
comparison resumes and the tables and plots are made from the same files.

Records. A task never writes into the driver's output folder (on a cluster it is on another machine): it
measures into a record file of its own in a temporary folder of the worker, seeded with the bytes of the
run's record file if the driver already had one (a run cut short earlier re-measures nothing), and returns
the file's bytes with the run's result. The driver then writes ``<run>.jsonl`` (first) and ``<run>.json``
beside each other, as the single-machine harness does. One run, one record file, one writer at a time.

Measurement. With the mock backend or a replayed table the tasks compute; with ``--backend rpc`` they
request sessions from the TVM RPC tracker as a single machine does, so real-hardware timing stays on the
device farm. Each task asks Ray for ``cpus_per_run`` CPUs (default 1).

Ray is imported here only, when a comparison fans out: ``import schedule_gym`` never needs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schedule_gym.baselines.compare import CompareSpec

__all__ = ["LOCAL", "RunKey", "fan_out", "ray_session"]

#: The address that starts a Ray instance on this machine (``ray.init()`` with no address).
LOCAL = "local"

RunKey = tuple[str, int, str]  # agent, seed, budget


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("--ray needs Ray: pip install 'schedule-gym[ray]' (see docs/cluster.md)") from None
    return ray


@contextmanager
def ray_session(address: str) -> Iterator[Any]:
    """Ray, connected to ``address``: ``"local"`` (a new instance on this machine), ``"auto"`` (the
    cluster this machine belongs to, as ``ray start`` left it) or ``"ray://host:port"`` (Ray Client). A
    Ray the caller already initialised is used as it is and left running; one started here is shut down."""
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    if not isinstance(address, str) or not address:
        raise ValueError(f"a Ray address is 'local', 'auto' or ray://host:port, got {address!r}")
    ray.init(address=None if address == LOCAL else address, include_dashboard=False if address == LOCAL else None,
             log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _run_task(spec: CompareSpec, agent: str, seed: int, budget: str, records: bytes | None) -> tuple[dict[str, Any], bytes | None]:
    """One run on a Ray worker: its ``TuneResult.to_dict()`` and the bytes of its record file (or None)."""
    from schedule_gym.baselines.compare import run_one

    with tempfile.TemporaryDirectory(prefix="schedule-gym-run-") as tmp:
        record_file = None
        if spec.records:
            record_file = Path(tmp) / "records.jsonl"
            if records is not None:
                record_file.write_bytes(records)
        saved = run_one(spec, agent, seed, budget, None if record_file is None else str(record_file))
        written = record_file.read_bytes() if record_file is not None and record_file.exists() else None
    return saved, written


def fan_out(
    spec: CompareSpec, runs: Sequence[RunKey], address: str, records: dict[RunKey, bytes] | None = None,
    cpus_per_run: float = 1, while_running: Callable[[], object] | None = None,
) -> Iterator[tuple[RunKey, dict[str, Any], bytes | None]]:
    """Run ``runs`` as Ray tasks at ``address``; yield ``(key, result dict, record bytes or None)`` in the
    order they finish. ``while_running()`` is called once the tasks are submitted (the harness runs its
    external runs there, on this machine). ``records`` holds record files the driver already has, by run.
    A task that fails raises here once every other task has finished (those are yielded, so the driver
    saves them); closing the generator early (Ctrl-C in the driver) cancels the tasks still running."""
    if not runs:
        if while_running is not None:
            while_running()
        return
    records = records or {}
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=cpus_per_run, max_retries=0)(_run_task)
        spec_ref = ray.put(spec)
        pending = {task.remote(spec_ref, agent, seed, budget, records.get((agent, seed, budget))): (agent, seed, budget)
                   for agent, seed, budget in runs}
        failure: tuple[RunKey, BaseException] | None = None
        try:
            if while_running is not None:
                while_running()
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                key = pending.pop(done[0])
                try:
                    saved, written = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    failure = failure or (key, exc)
                    continue
                yield key, saved, written
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        if failure is not None:
            (agent, seed, budget), exc = failure
            cause = getattr(exc, "cause", None) or exc  # a task's own exception (its traceback: __cause__)
            raise RuntimeError(f"run {agent} seed {seed} budget {budget} failed on Ray: "
                               f"{type(cause).__name__}: {cause}") from exc
