"""Latency backends: where rewards come from.

One small batched interface (:class:`LatencyBackend`), several implementations, made by name with
:func:`make_backend` (``"mock"``) or passed as objects.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schedule_gym.backends.base import ERROR_KINDS, LatencyBackend, LatencyTable, MeasureResult, ResultCallback
from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.backends.mock.profile import CacheLevel, CPUProfile
from schedule_gym.backends.mock.selection import PROFILES
from schedule_gym.backends.replay import MissingRecordError, ReplayBackend

__all__ = [
    "BACKENDS",
    "BackendSpec",
    "ERROR_KINDS",
    "CPUProfile",
    "CacheLevel",
    "LatencyBackend",
    "LatencyTable",
    "MeasureResult",
    "MissingRecordError",
    "MockBackend",
    "PROFILES",
    "ReplayBackend",
    "ResultCallback",
    "check_backend_options",
    "make_backend",
]


def _with_records(backend: LatencyBackend, records: Any, **options: Any) -> LatencyBackend:
    """Consult ``records`` before measuring and append every new measurement to it (``backend`` is closed
    if the records cannot be used: a bad line, a place that cannot be written)."""
    if records is None:
        return backend
    try:
        return ReplayBackend(records, delegate=backend, **options)
    except BaseException:
        backend.close()
        raise


def _mock(records: Any = None, **options: Any) -> LatencyBackend:
    return _with_records(MockBackend(**options), records)


def _tvm(records: Any = None, **options: Any) -> LatencyBackend:
    from schedule_gym.backends.tvm.backend import TVMBackend  # resolving its target imports TVM

    return _with_records(TVMBackend(**options), records)


def _rpc(records: Any = None, **options: Any) -> LatencyBackend:
    from schedule_gym.backends.tvm.rpc import RPCBackend  # resolving its target imports TVM

    return _with_records(RPCBackend(**options), records)


def _replay(records: Any = None, delegate: Any = None, delegate_options: dict | None = None, **options: Any) -> LatencyBackend:
    if records is None:
        raise ValueError("the replay backend needs records= (a record file or a list of them)")
    if isinstance(delegate, str):
        return _with_records(make_backend(delegate, **(delegate_options or {})), records, **options)
    return ReplayBackend(records, delegate=delegate, **options)


@dataclass(frozen=True)
class BackendSpec:
    """A backend by short name: how to make it, and what it is, known before it is made (so callers such as
    the command line decide on records or TVM without switching on names)."""

    name: str
    make: Callable[..., LatencyBackend]
    #: the class it makes, as ``module:Class`` (importing the module imports no optional dependency)
    implementation: str
    #: its measurements time real kernels (noisy, seconds each, worth a record file)
    measures_hardware: bool = False
    #: it needs TVM installed
    needs_tvm: bool = False
    #: it serves a record file (``records=`` is required)
    serves_records: bool = False
    #: it measures on other machines (an RPC device farm), not on the one it runs on
    remote: bool = False

    def option_names(self) -> list[str]:
        """The options ``make`` takes: its own (``records``...) and those of the class it makes (the keyword
        arguments of its ``__init__``, and of its base classes' where it passes ``**options`` on)."""
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names = [p.name for p in inspect.signature(self.make).parameters.values() if p.kind in named]
        module, cls = self.implementation.split(":")
        for klass in getattr(importlib.import_module(module), cls).__mro__:
            if "__init__" not in vars(klass):
                continue
            params = list(inspect.signature(klass.__init__).parameters.values())[1:]  # self
            names += [p.name for p in params if p.kind in named]
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return list(dict.fromkeys(names))


#: Backends by short name; each takes ``records=`` (a JSON-lines file) besides its options.
BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("mock", _mock, "schedule_gym.backends.mock.backend:MockBackend"),
        BackendSpec("tvm", _tvm, "schedule_gym.backends.tvm.backend:TVMBackend", measures_hardware=True, needs_tvm=True),
        BackendSpec("rpc", _rpc, "schedule_gym.backends.tvm.rpc:RPCBackend", measures_hardware=True, needs_tvm=True,
                    remote=True),
        BackendSpec("replay", _replay, "schedule_gym.backends.replay:ReplayBackend", serves_records=True),
    )
}


def make_backend(backend: str | LatencyBackend, **options: Any) -> LatencyBackend:
    """A backend from its short name and options, or ``backend`` itself if it already is one."""
    if isinstance(backend, LatencyBackend):
        if options:
            raise ValueError(f"backend options {sorted(options)} given with a backend object {backend!r}")
        return backend
    check_backend_options(backend, options)
    return BACKENDS[backend].make(**options)


def check_backend_options(backend: str, options: dict[str, Any]) -> None:
    """Raise ``ValueError`` for an unknown backend name, ``TypeError`` naming an option the backend does not take
    and listing those it takes (what :func:`make_backend` checks first; a caller may check before other work)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known backends: {', '.join(BACKENDS)}")
    known = BACKENDS[backend].option_names()
    unknown = [name for name in options if name not in known]
    if unknown:
        raise TypeError(f"unknown option{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} for backend "
                        f"{backend!r}; its options: {', '.join(known)}")
