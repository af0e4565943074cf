"""Latency backends: where rewards come from.

One small batched interface (:class:`LatencyBackend`), several implementations, made by name with
:func:`make_backend` (``"mock"``) or passed as objects.
"""

from __future__ import annotations

from typing import Any, Callable

from schedule_gym.backends.base import ERROR_KINDS, LatencyBackend, MeasureResult, ResultCallback
from schedule_gym.backends.mock import PROFILES, CacheLevel, CPUProfile, MockBackend
from schedule_gym.backends.replay import MissingRecordError, ReplayBackend

__all__ = [
    "BACKENDS",
    "ERROR_KINDS",
    "CPUProfile",
    "CacheLevel",
    "LatencyBackend",
    "MeasureResult",
    "MissingRecordError",
    "MockBackend",
    "PROFILES",
    "ReplayBackend",
    "ResultCallback",
    "make_backend",
]


def _with_records(backend: LatencyBackend, records: Any) -> LatencyBackend:
    """Consult ``records`` before measuring and append every new measurement to it."""
    return backend if records is None else ReplayBackend(records, delegate=backend)


def _mock(records: Any = None, **options: Any) -> LatencyBackend:
    return _with_records(MockBackend(**options), records)


def _tvm(records: Any = None, **options: Any) -> LatencyBackend:
    from schedule_gym.backends.tvm_backend import TVMBackend  # imports TVM

    return _with_records(TVMBackend(**options), records)


def _rpc(records: Any = None, **options: Any) -> LatencyBackend:
    from schedule_gym.backends.rpc_backend import RPCBackend  # imports TVM

    return _with_records(RPCBackend(**options), records)


def _replay(records: Any = None, delegate: Any = None, delegate_options: dict | None = None, **options: Any) -> LatencyBackend:
    if records is None:
        raise ValueError("the replay backend needs records= (a record file or a list of them)")
    if isinstance(delegate, str):
        delegate = make_backend(delegate, **(delegate_options or {}))
    return ReplayBackend(records, delegate=delegate, **options)


#: Backend constructors by short name; each takes ``records=`` (a JSON-lines file) besides its options.
BACKENDS: dict[str, Callable[..., LatencyBackend]] = {"mock": _mock, "tvm": _tvm, "rpc": _rpc, "replay": _replay}


def make_backend(backend: str | LatencyBackend, **options: Any) -> LatencyBackend:
    """A backend from its short name and options, or ``backend`` itself if it already is one."""
    if isinstance(backend, LatencyBackend):
        if options:
            raise ValueError(f"backend options {sorted(options)} given with a backend object {backend!r}")
        return backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known backends: {', '.join(BACKENDS)}")
    try:
        return BACKENDS[backend](**options)
    except TypeError as exc:  # unexpected keyword: name it
        raise TypeError(f"bad options {options!r} for backend {backend!r}: {exc}") from None
