"""The measurement protocol: how a kernel is checked, timed and censored.

The protocol is an explicit object (:class:`MeasureProtocol`), as MetaSchedule's runner configuration is;
its plain dict (:meth:`MeasureProtocol.to_dict`) is what crosses into runner processes and what every
record stores, and :func:`censor_bound_s` reads the censor bound from either.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

__all__ = ["CENSOR_SLACK", "STATISTICS", "MeasureProtocol", "censor_bound_s", "censor_kill_s"]

#: How the latency is taken from the timed repeats, by :attr:`MeasureProtocol.statistic`.
STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
}


@dataclass(frozen=True)
class MeasureProtocol:
    """How a kernel is timed; stored with every record.

    Attributes:
        warmup: untimed runs before timing; the first is also the correctness check.
        number: runs per timed repeat (TVM raises it until a repeat lasts ``min_repeat_ms``).
        repeat: timed repeats; the latency is ``statistic`` over their per-run means.
        min_repeat_ms: minimum duration of one repeat.
        statistic: ``"median"``, ``"mean"`` or ``"min"``.
        cache_flush: flush the CPU caches before each repeat (TVM's ``cache_flush_cpu_non_first_arg``).
        early_stop_ratio: a config whose first run is this many times slower than the best precise
            latency so far, and longer than ``early_stop_floor_s``, is reported from that run alone
            (``coarse``) if a second run confirms it (the faster of the two is reported, so a cold or
            disturbed first run does not pass a fast kernel off as slow); None: never. The floor keeps
            the call overhead in the first run of a tiny kernel from passing for slowness (such kernels
            are cheap to time anyway).
        coarse_above_s: a first run longer than this is reported alone, whatever the best so far.
        check_correctness: compare the first run's output with NumPy.
        build_timeout_s, run_timeout_s: per candidate; past them the worker is killed (a timeout error).
        censor_ratio: a kernel whose first run lasts longer than the **censor bound**,
            ``max(censor_ratio x best, censor_floor_s)`` with ``best`` the best exact (not censored;
            coarse ones included) latency of the task measured by this backend so far, is stopped and
            reported **censored** ("slower than the bound", :class:`~schedule_gym.types.MeasureResult`):
            no timing, no correctness check, never a best-so-far. Before the first exact latency of a
            task nothing is censored; an environment measures ``s0`` first, so until something faster
            is found the bound is a multiple of ``s0``'s latency. The local runner is killed at
            :func:`censor_kill_s` and replaced by a process forked from a pre-loaded one, so the stop
            costs a fork, not TVM's import; over RPC the run cannot be stopped and is censored once it
            returns. None: never censor. Default 5: a kernel five times slower than the best is of no
            use to a search beyond "much slower", and the coarse rule between ``early_stop_ratio`` and
            ``censor_ratio`` still gives a figure to kernels a few times slower.
        censor_floor_s: the bound is never below this. Default 0.05 s: a stop costs a fork (the
            replacement inherits the task's inputs and reference from the zygote and needs no
            warm-up), made ready while the next config builds.
        warmup_s: seconds of busy work (NumPy matmuls) a new runner process does before its first
            kernel run, because a first run after idle time is slow. 0: no warm-up.
    """

    warmup: int = 1
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    statistic: str = "median"
    cache_flush: bool = False
    early_stop_ratio: float | None = 3.0
    early_stop_floor_s: float = 0.002
    coarse_above_s: float | None = 0.25
    check_correctness: bool = True
    build_timeout_s: float = 60.0
    run_timeout_s: float = 10.0
    censor_ratio: float | None = 5.0
    censor_floor_s: float = 0.05
    warmup_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("warmup", "number", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"MeasureProtocol.{name} must be a {'non-negative' if name == 'warmup' else 'positive'} integer, got {value!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"MeasureProtocol.statistic must be one of {list(STATISTICS)}, got {self.statistic!r}")
        for name in ("min_repeat_ms", "early_stop_floor_s", "build_timeout_s", "run_timeout_s", "censor_floor_s", "warmup_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
                raise ValueError(f"MeasureProtocol.{name} must be a non-negative number, got {value!r}")
        for name in ("early_stop_ratio", "coarse_above_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"MeasureProtocol.{name} must be a positive number or None, got {value!r}")
        ratio = self.censor_ratio
        if ratio is not None and (
            isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1 < ratio < math.inf
        ):
            raise ValueError(
                f"MeasureProtocol.censor_ratio must be a finite number above 1 (the bound is that many times the "
                f"best latency) or None (never censor), got {ratio!r}"
            )
        if self.warmup_s > 10:
            raise ValueError(f"MeasureProtocol.warmup_s must be at most 10 s, got {self.warmup_s!r}")

    def censor_bound_s(self, best_s: float | None) -> float | None:
        """The censor bound for a task whose best exact latency so far is ``best_s`` (None: no bound)."""
        return censor_bound_s(self.to_dict(), best_s)

    @classmethod
    def from_value(cls, value: MeasureProtocol | dict | None) -> MeasureProtocol:
        """A protocol from itself, a dict of its fields (unknown ones raise ``ValueError``), or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown measurement protocol fields {unknown}; known: {sorted(known)}")
            return cls(**value)
        raise TypeError(f"protocol must be a MeasureProtocol or a dict, got {value!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def censor_bound_s(protocol: dict, best_s: float | None) -> float | None:
    """The censor bound (see :class:`MeasureProtocol`) of a protocol dict, or None: nothing is censored."""
    ratio = protocol.get("censor_ratio")
    if ratio is None or best_s is None:
        return None
    return max(ratio * best_s, protocol.get("censor_floor_s", 0.0))


#: Seconds added to a censor bound before the local runner is killed (see :func:`censor_kill_s`).
CENSOR_SLACK = 0.005


def censor_kill_s(bound_s: float) -> float:
    """When the local runner is killed in a first run censored at ``bound_s``: the bound plus 5% plus
    :data:`CENSOR_SLACK`, so that only a kernel surely past the bound is stopped (the first-run call
    starts the kernel at once: the load call before it filled the output with NaN)."""
    return bound_s * 1.05 + CENSOR_SLACK
