"""Backends describe themselves: traits and answers that callers read instead of switching on names or classes."""

import pytest

from schedule_gym import MockBackend, TilingEnv, gemm
from schedule_gym.agents import make_agent
from schedule_gym.backends import BACKENDS, LatencyBackend, ReplayBackend, make_backend
from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.backends.tvm.export import KernelTarget
from schedule_gym.envs import ScheduleEnv

TASK = gemm(64, 32, 64)
PROFILE = "znver5-2core-fitted"


class FakeHardware(LatencyBackend):
    """Stands for a backend that times real kernels (without TVM)."""

    name = "fake-hardware"
    measures_hardware = True
    needs_tvm = True

    def __init__(self):
        self.inner = MockBackend(PROFILE)

    @property
    def kernel_target(self):
        return KernelTarget({"kind": "llvm", "mcpu": "x"}, "gemm-cpu", 3)

    def record_context(self, task):
        return ("fake", "v1")

    def measure(self, task, configs, on_result=None):
        return self.inner.measure(task, configs, on_result)


def test_the_mock_and_a_record_table_describe_themselves(tmp_path):
    mock = MockBackend(PROFILE)
    assert not mock.measures_hardware and not mock.needs_tvm and mock.scores_in_bulk
    assert mock.measuring_backend is mock and mock.kernel_target is None and mock.record_store is None
    assert not MockBackend(PROFILE, noise=0.1).scores_in_bulk
    path = tmp_path / "r.jsonl"
    ReplayBackend(path, delegate=MockBackend(PROFILE)).measure(TASK, [TilingEnv(TASK).space.initial_config()])
    table = ReplayBackend(path)
    assert table.scores_in_bulk and not table.measures_hardware and not table.needs_tvm
    assert table.measuring_backend is table and table.kernel_target is None and table.record_store is table.stores[0]
    # what BACKENDS says before a backend is made is what the made one says
    for name, made in (("mock", make_backend("mock", profile=PROFILE)), ("replay", make_backend("replay", records=str(path)))):
        spec = BACKENDS[name]
        assert (spec.measures_hardware, spec.needs_tvm) == (made.measures_hardware, made.needs_tvm)
        assert not spec.remote
    assert BACKENDS["tvm"].measures_hardware and BACKENDS["tvm"].needs_tvm and not BACKENDS["tvm"].remote
    assert BACKENDS["rpc"].measures_hardware and BACKENDS["rpc"].needs_tvm and BACKENDS["rpc"].remote
    assert BACKENDS["replay"].serves_records and not BACKENDS["mock"].serves_records


@pytest.mark.parametrize("wrap", ["replay", "schedule", "schedule of replay"])
def test_wrappers_answer_for_the_backend_they_wrap(tmp_path, wrap):
    inner = FakeHardware()
    replay = ReplayBackend(tmp_path / "r.jsonl", delegate=inner)
    wrapped = {"replay": replay, "schedule": ScheduleBackend(inner), "schedule of replay": ScheduleBackend(replay)}[wrap]
    assert wrapped.measures_hardware and wrapped.needs_tvm and not wrapped.scores_in_bulk
    assert wrapped.measuring_backend is inner
    assert wrapped.kernel_target == KernelTarget({"kind": "llvm", "mcpu": "x"}, "gemm-cpu", 3, remote=False)
    assert wrapped.record_store is (None if wrap == "schedule" else replay.stores[0])
    with pytest.raises(TypeError, match="the vector environment needs a vectorisable backend"):
        wrapped.latency_table(TASK, TilingEnv(TASK).space)


def test_a_result_names_the_backend_that_measured_it_through_records(tmp_path):
    records = {"records": str(tmp_path / "r.jsonl"), "profile": PROFILE}
    tiling = make_agent("random", seed=0).run(TilingEnv(TASK, backend="mock", backend_options=records), 4)
    schedule = make_agent("random", seed=0).run(ScheduleEnv(TASK, backend="mock", backend_options=records), 4)
    assert tiling.backend == schedule.backend == "mock"
    table = make_agent("random", seed=0).run(TilingEnv(TASK, backend="replay", backend_options={"records": records["records"]}), 2)
    assert table.backend == "replay"
