"""Measuring schedules (tile config, loop order) on any backend.

A backend measures tile configs of a task, whose loop order is part of the task
(:attr:`Task.loop_order <schedule_gym.tasks.Task.loop_order>`). :class:`ScheduleBackend` takes schedules
(:class:`~schedule_gym.spaces.Schedule`), measures each group of one order as configs of
``task.with_order(order)`` on the backend it wraps, and hands back results whose ``config`` is the schedule.
The order travels inside the task, so records written by the wrapped backend store it with the task
(``loop_order`` in the record's task and its key), a replay of them finds it, and records written before
orders were searched load as the default order they were measured in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from schedule_gym.backends.base import LatencyBackend
from schedule_gym.tasks.task import Task
from schedule_gym.types import MeasureResult, ResultCallback

if TYPE_CHECKING:
    from schedule_gym.records import RecordStore

__all__ = ["ScheduleBackend"]


class ScheduleBackend(LatencyBackend):
    """Measures schedules ``(tiles, order)`` of a task through ``inner`` (see the module docstring).

    ``close`` closes ``inner`` only if ``owns_inner``.
    """

    def __init__(self, inner: LatencyBackend, owns_inner: bool = False) -> None:
        if not isinstance(inner, LatencyBackend):
            raise TypeError(f"inner must be a LatencyBackend, got {inner!r}")
        self.inner = inner
        self.owns_inner = owns_inner
        self.name = inner.name
        self.deterministic = inner.deterministic

    @property
    def measures_hardware(self) -> bool:  # type: ignore[override]
        return self.inner.measures_hardware

    @property
    def needs_tvm(self) -> bool:  # type: ignore[override]
        return self.inner.needs_tvm

    @property
    def measuring_backend(self) -> LatencyBackend:
        return self.inner.measuring_backend

    @property
    def record_store(self) -> RecordStore | None:
        return self.inner.record_store

    def measure(
        self, task: Task, configs: Sequence[object], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        return self._measure(task, configs, on_result, exact=False)

    def measure_exact(
        self, task: Task, configs: Sequence[object], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        return self._measure(task, configs, on_result, exact=True)

    def _measure(
        self, task: Task, configs: Sequence[object], on_result: ResultCallback | None, exact: bool
    ) -> list[MeasureResult]:
        measure = self.inner.measure_exact if exact else self.inner.measure
        groups: dict[tuple, list[int]] = {}
        for position, (_, order) in enumerate(configs):
            groups.setdefault(tuple(order), []).append(position)
        out: list[MeasureResult | None] = [None] * len(configs)
        for order, positions in groups.items():

            def report(local: int, result: MeasureResult, positions: list[int] = positions) -> None:
                position = positions[local]
                out[position] = dataclasses.replace(result, config=configs[position])
                if on_result is not None:
                    on_result(position, out[position])

            results = measure(task.with_order(order), [configs[p][0] for p in positions], on_result=report)
            for local, result in enumerate(results):
                if out[positions[local]] is None:
                    report(local, result)
        return out  # type: ignore[return-value]

    def check_task(self, task: Task) -> None:
        self.inner.check_task(task)

    def record_context(self, task: Task) -> tuple[str, str]:
        return self.inner.record_context(task)

    def protocol_dict(self) -> dict:
        return self.inner.protocol_dict()

    def cpu_profile(self) -> object | None:
        return self.inner.cpu_profile()

    def reseed(self, seed: int | np.random.Generator | None) -> None:
        self.inner.reseed(seed)

    def close(self) -> None:
        if self.owns_inner:
            self.inner.close()
