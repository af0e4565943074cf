"""The latency backend interface: measure a batch of configs of a task, get a result for each.

Errors are values (as in TVM MetaSchedule): a :class:`MeasureResult` carries either timings or an
error message, and a config whose kernel fails to build, crashes, hangs or computes a wrong answer is a
result with ``error`` set, never an exception out of :meth:`LatencyBackend.measure`.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

__all__ = ["ERROR_KINDS", "LatencyBackend", "MeasureResult", "ResultCallback"]

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


#: ``on_result(position in the batch, result)``
ResultCallback = Callable[[int, "MeasureResult"], None]


class LatencyBackend(abc.ABC):
    """Measures configs of tasks. Subclasses implement :meth:`measure`.

    Attributes:
        name: the short name the backend is made by (``"mock"``).
        deterministic: whether measuring the same config twice gives the same latency. Environments on
            a nondeterministic backend are registered with ``nondeterministic=True``.
    """

    name: str = "backend"
    deterministic: bool = False

    @abc.abstractmethod
    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """Measure every config (valid factorisations of ``task``); one result per config, same order.

        ``on_result(position, result)`` is called as soon as each result is known (before the whole
        batch is done), so that a caller can record it: a crash mid-batch then loses only the config
        in flight.
        """

    def record_context(self, task: Task) -> tuple[str, str]:
        """``(target, template version)`` under which this backend's measurements of ``task`` are recorded."""
        return (self.name, "none")

    def protocol_dict(self) -> dict:
        """The measurement protocol, stored with every record."""
        return {}

    def close(self) -> None:
        """Release workers, files and connections. Safe to call more than once."""

    def __enter__(self) -> LatencyBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
