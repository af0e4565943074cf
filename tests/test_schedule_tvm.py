"""Every legal loop order builds with the CPU template and computes the right answer (real TVM kernels)."""

import numpy as np
import pytest

from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.spaces import OrderSpace, Schedule, ScheduleSpace
from schedule_gym.tasks import batch_matmul, conv2d, dense, gemm

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

from schedule_gym.backends.tvm.backend import TVMBackend  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    b = TVMBackend(protocol={"run_timeout_s": 5.0, "min_repeat_ms": 1, "repeat": 1})
    yield ScheduleBackend(b)
    b.close()


def test_every_order_of_a_small_gemm_builds_and_is_correct(backend):
    # all 90 orders of a 2/2/2 GEMM (reduction outermost included), each with a tile config of its own
    task = gemm(16, 12, 20, d_m=2, d_k=2, d_n=2)
    space = ScheduleSpace(task)
    rng = np.random.default_rng(0)
    schedules = [Schedule(space.tiles.sample(rng), order) for order in OrderSpace(task)]
    results = backend.measure(task, schedules)
    failed = [(r.config, r.error) for r in results if not r.ok]
    assert not failed and len(results) == 90


@pytest.mark.parametrize(
    "task",
    [
        gemm(64, 48, 40),
        conv2d(1, 9, 9, 8, 12, kernel=3, stride=2, padding=1),
        conv2d(1, 8, 8, 8, 8, kernel=3, padding=1, groups=8),
        dense(16, 24, 20, bias=True, activation="gelu"),
        batch_matmul(2, 16, 8, 12, transpose_b=True),
    ],
    ids=lambda t: t.name,
)
def test_random_schedules_are_correct_against_the_reference(backend, task):
    space = ScheduleSpace(task)
    rng = np.random.default_rng(1)
    schedules = [space.sample(rng) for _ in range(6)]
    for s, r in zip(schedules, backend.measure(task, schedules)):
        assert r.ok, (s, r.error)  # the backend checks every kernel's output against NumPy's float64 reference
        assert r.config == s
