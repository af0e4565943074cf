"""Neutral shared types: what a measurement is, and what a config is.

Every layer imports these (tile spaces, backends, records, the measurement session, agents) and this
module imports nothing of the package, so no import cycle is possible (as SB3's
``common/type_aliases.py``). Errors are values (as in TVM MetaSchedule): a :class:`MeasureResult`
carries either timings or an error message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Config", "ERROR_KINDS", "MeasureResult", "ResultCallback"]

#: A tile configuration: one tuple of loop factors per dimension of the task, in the task's order.
Config = tuple[tuple[int, ...], ...]

#: What ``MeasureResult.error_kind`` may say.
ERROR_KINDS = ("build", "run", "timeout", "wrong_result", "crash", "other")


@dataclass(frozen=True, slots=True)
class MeasureResult:
    """The outcome of measuring one config: timings, or an error.

    ``latency_s`` is the statistic the backend reports (e.g. the mean of ``costs_s``); it is ``None``
    exactly when ``error`` is set.
    """

    config: Config
    latency_s: float | None
    costs_s: tuple[float, ...] = ()
    error: str | None = None
    error_kind: str | None = None
    build_s: float = 0.0
    run_s: float = 0.0
    #: the latency is one unrepeated run: the config was far slower than the best so far, or slow in
    #: absolute terms, and timing it precisely would only cost time (see ``MeasureProtocol``)
    coarse: bool = False

    def __post_init__(self) -> None:
        if (self.latency_s is None) == (self.error is None):
            raise ValueError(
                f"a MeasureResult has either a latency or an error, got latency_s={self.latency_s!r}, "
                f"error={self.error!r}"
            )
        if self.latency_s is not None and not (math.isfinite(self.latency_s) and self.latency_s > 0):
            raise ValueError(f"latency_s must be a positive finite number, got {self.latency_s!r}")
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be one of {ERROR_KINDS}, got {self.error_kind!r}")

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, config: Config, error: str, kind: str = "other", **timing: float) -> MeasureResult:
        return cls(config=config, latency_s=None, error=error, error_kind=kind, **timing)


#: ``on_result(position in the batch, result)``. Backends call it on the thread that called
#: ``measure`` (see :meth:`schedule_gym.backends.LatencyBackend.measure`).
ResultCallback = Callable[[int, MeasureResult], None]
