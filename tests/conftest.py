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


@pytest.fixture(scope="module")
def tvm_backend():
    """A TVM backend on this CPU with a short timing protocol (its kernels' outputs are checked all the same)."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    backend = TVMBackend(protocol={"run_timeout_s": 10.0, "min_repeat_ms": 2, "repeat": 1})
    yield backend
    backend.close()


# Hypothesis (tests/test_fuzz.py): no example database in the repository, bounded run time.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the dev extra is not installed: test_fuzz.py skips itself
    pass
else:
    import os

    # SCHEDULE_GYM_FUZZ_EXAMPLES=2000 hunts longer, with fresh random examples each run
    _hunt = os.environ.get("SCHEDULE_GYM_FUZZ_EXAMPLES")
    settings.register_profile(
        "schedule-gym",
        database=None,
        max_examples=int(_hunt) if _hunt else 100,
        deadline=2000,  # ms per example: a hang is a failure, not a stall
        suppress_health_check=[HealthCheck.too_slow],
        derandomize=not _hunt,  # the same examples on every run: a failure reproduces
    )
    settings.load_profile("schedule-gym")
