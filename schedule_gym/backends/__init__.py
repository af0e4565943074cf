"""Latency backends: where rewards come from.

One small batched interface (:class:`LatencyBackend`), several implementations, made by name with
:func:`make_backend` (``"mock"``) or passed as objects.
"""

from __future__ import annotations

from typing import Any, Callable

from schedule_gym.backends.base import ERROR_KINDS, LatencyBackend, MeasureResult
from schedule_gym.backends.mock import PROFILES, CacheLevel, CPUProfile, MockBackend

__all__ = [
    "BACKENDS",
    "ERROR_KINDS",
    "CPUProfile",
    "CacheLevel",
    "LatencyBackend",
    "MeasureResult",
    "MockBackend",
    "PROFILES",
    "make_backend",
]

#: Backend constructors by short name. Later backends register themselves here.
BACKENDS: dict[str, Callable[..., LatencyBackend]] = {"mock": MockBackend}


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
