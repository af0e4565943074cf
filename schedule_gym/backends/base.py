"""The latency backend interface: measure a batch of configs of a task, get a result for each.

Errors are values (as in TVM MetaSchedule): a :class:`MeasureResult` carries either timings or an
error message, and a config whose kernel fails to build, crashes, hangs or computes a wrong answer is a
result with ``error`` set, never an exception out of :meth:`LatencyBackend.measure`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from schedule_gym.tasks import Task
from schedule_gym.types import ERROR_KINDS, Config, MeasureResult, ResultCallback

__all__ = ["ERROR_KINDS", "LatencyBackend", "MeasureResult", "ResultCallback"]


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
        in flight. The contract: it is called at most once per position, **on the thread that called
        ``measure``** (a backend that measures on several threads hands results back to that thread),
        and before ``measure`` returns; a callback that raises aborts the batch.
        """

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """:meth:`measure`, with no censored result: every kernel runs until it is timed (or fails).

        Callers use it for a config whose censored result is not enough (its exact latency is asked
        for). A backend that never censors measures as usual (this default).
        """
        return self.measure(task, configs, on_result)

    def check_task(self, task: Task) -> None:
        """Raise :class:`~schedule_gym.errors.TaskError` (or ValueError) if this backend cannot measure
        ``task`` at all (rather than failing every config). Environments call it when they are made."""

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
