"""Shared fixtures: small tasks and a backend whose failures are scripted (errors are values)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from schedule_gym import LatencyBackend, MeasureResult, MockBackend, Task, gemm
from schedule_gym.spaces import Config


class ScriptedFailureBackend(LatencyBackend):
    """The mock model, except that configs matching ``fails(config)`` come back as errors."""

    name = "scripted"
    deterministic = True

    def __init__(self, fails, kind: str = "build") -> None:
        self.inner = MockBackend()
        self.fails = fails
        self.kind = kind
        self.calls: list[int] = []  # batch sizes the environment asked for

    def measure(self, task: Task, configs: Sequence[Config], on_result=None) -> list[MeasureResult]:
        self.calls.append(len(configs))
        out = []
        for config, result in zip(configs, self.inner.measure(task, configs)):
            if self.fails(config):
                out.append(MeasureResult.failure(config, f"scripted {self.kind} failure", self.kind))
            else:
                out.append(result)
        return out


@pytest.fixture
def small_task() -> Task:
    return gemm(64, 64, 64)


@pytest.fixture
def scripted_backend():
    return ScriptedFailureBackend
