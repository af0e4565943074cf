"""The real TVM backend: target detection, correct kernels, failures as results, records, CUDA builds."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from schedule_gym import TilingEnv, gemm
from schedule_gym.records import RecordStore

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")

from schedule_gym.backends.tvm.backend import TVMBackend  # noqa: E402
from schedule_gym.backends.tvm.builder import link_shared  # noqa: E402
from schedule_gym.backends.tvm.protocol import MeasureProtocol  # noqa: E402
from schedule_gym.backends.tvm.targets import resolve_target  # noqa: E402

TASK = gemm(128, 64, 96)  # small, not all powers of two


@pytest.fixture(scope="module")
def backend():
    b = TVMBackend(protocol={"run_timeout_s": 5.0, "min_repeat_ms": 5})
    yield b
    b.close()


def test_host_target_is_detected_never_generic():
    target = resolve_target("llvm", 2)
    assert target["kind"] == "llvm" and target["mcpu"] not in ("", "generic")
    assert target["mcpu"] == tvm.target.codegen.llvm_get_system_cpu()
    assert target["num-cores"] == 2


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin a process to one"
)
def test_default_threads_are_the_cpus_this_process_may_run_on():
    # a process pinned to one CPU (taskset, a cluster scheduler) times on one thread and builds in one process
    cpu = min(os.sched_getaffinity(0))
    child = (
        f"import os; os.sched_setaffinity(0, {{{cpu}}}); from schedule_gym.backends.tvm.backend import TVMBackend; "
        "b = TVMBackend(); print(b.num_threads, b.build_workers, b.target['num-cores'], b.target_key.split(';')[-1]); b.close()"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "1", "threads=1"]
    assert os.cpu_count() > 1  # so the default did not come from the machine's core count


@pytest.mark.parametrize(
    "target, text",
    [
        ("llvm -mcpu=native", "unknown target 'llvm -mcpu=native'"),
        ({"kind": "llvm", "mcpu": "pentium9"}, "LLVM does not know the CPU 'pentium9'"),
        ({"kind": "opencl"}, "unknown target kind 'opencl'"),
        ("tpu", "unknown target 'tpu'"),
    ],
)
def test_bad_targets_are_precise_errors(target, text):
    with pytest.raises(ValueError, match=text.replace("(", r"\(").replace(")", r"\)")):
        TVMBackend(target=target)


def test_bad_protocol_and_template_are_precise_errors():
    with pytest.raises(ValueError, match=r"unknown measurement protocol fields \['repeats'\]"):
        TVMBackend(protocol={"repeats": 3})
    with pytest.raises(ValueError, match="MeasureProtocol.statistic must be one of"):
        MeasureProtocol(statistic="p90")
    with pytest.raises(ValueError, match="unknown template 'gemm-gpu'"):
        TVMBackend(template="gemm-gpu")
    with pytest.raises(ValueError, match="template 'gemm-cuda' is for 'cuda' targets, not 'llvm'"):
        TVMBackend(template="gemm-cuda")


def test_the_backend_describes_itself_and_how_it_builds(backend, tmp_path):
    from schedule_gym.backends import ReplayBackend
    from schedule_gym.backends.tvm.export import KernelTarget

    assert backend.measures_hardware and backend.needs_tvm and not backend.scores_in_bulk
    assert backend.kernel_target == KernelTarget(backend.target, "auto", backend.num_threads, remote=False)
    recorded = ReplayBackend(tmp_path / "r.jsonl", delegate=backend)  # not closed: it would close the fixture's
    assert recorded.measuring_backend is backend and recorded.kernel_target == backend.kernel_target
    named = TVMBackend(template="gemm-cpu", build_workers=1)
    try:
        assert named.kernel_target.template == "gemm-cpu"
    finally:
        named.close()


def test_kernels_are_correct_and_timed(backend):
    space = TilingEnv(TASK).space
    rng = np.random.default_rng(0)
    configs = [space.initial_config()] + [space.config(int(i)) for i in rng.integers(0, space.size, 5)]
    results = backend.measure(TASK, configs)
    for r in results:
        assert r.ok, r.error
        assert r.latency_s > 0 and r.build_s > 0 and r.run_s > 0
        assert r.coarse or len(r.costs_s) == backend.protocol.repeat
    # the hand-picked register tile beats the untiled s0 (by 10x or more on an idle machine; a machine loaded by
    # other jobs shrinks the gap, 1.5x seen with three jobs on 2 cores, so the bound is 1.4x, not a speed target)
    fast = backend.measure(TASK, [((2, 2, 4, 8), (8, 8), (1, 2, 3, 16))])[0]
    assert fast.ok and fast.latency_s * 1.4 < results[0].latency_s


def test_slow_configs_after_a_fast_one_are_timed_once():
    # The rule under test: a first run more than early_stop_ratio x the best precise latency is
    # reported alone. The untiled 256^3 kernel is ~10x slower than the register tile on every CPU we
    # have met, but a loaded CI machine can shrink that gap, so the ratio here is 1.5, not the default 3.
    task = gemm(256, 256, 256)  # s0 runs for ms: past the early-stop floor of 2 ms
    # never censored: the slow kernel must run to its first-run figure, however loaded the machine
    backend = TVMBackend(protocol={"run_timeout_s": 5.0, "min_repeat_ms": 5, "early_stop_ratio": 1.5, "censor_ratio": None})
    try:
        (fast,) = backend.measure(task, [((2, 2, 8, 8), (16, 16), (1, 4, 2, 32))])
        (slow,) = backend.measure(task, [((256, 1, 1, 1), (256, 1), (256, 1, 1, 1))])
    finally:
        backend.close()
    assert fast.ok and not fast.coarse and len(fast.costs_s) == backend.protocol.repeat
    assert slow.ok and slow.coarse and len(slow.costs_s) == 1 and slow.latency_s > 1.5 * fast.latency_s


class _SlowOnceKernel:
    """A stand-in kernel whose calls sleep for the given seconds in turn (the last one repeats), and
    a module whose timer reports ``timed_s`` (see :meth:`timings`): the early-stop rule without a real kernel's
    noise."""

    def __init__(self, sleeps_s, timed_s):
        self.sleeps_s, self.timed_s, self.calls = list(sleeps_s), timed_s, 0

    def __call__(self, *args):
        import time

        time.sleep(self.sleeps_s[min(self.calls, len(self.sleeps_s) - 1)])
        self.calls += 1

    def __getitem__(self, name):
        return self

    def timings(self, module, dev, args, protocol, hold):
        """Stands in for the runner's timer (``runner._time``)."""
        return [self.timed_s] * 3


class _Dev:
    def sync(self):
        pass


@pytest.mark.parametrize("sleeps_s, coarse", [((0.2, 0.0), False), ((0.2, 0.15), True)])
def test_a_coarse_verdict_is_confirmed_by_a_second_run(sleeps_s, coarse, monkeypatch):
    # the CI failure this guards against: a fast kernel's cold first run, 3x the best on a loaded
    # machine, reported the kernel as slow; a second run now has to agree before it is. The best so far
    # (40 ms) puts the slow verdict at 120 ms, so a second run that sleeps 0 s is fast even on a loaded
    # machine (at a best of 1 ms, a 3 ms bound, CI once took longer than that for a call that sleeps 0 s)
    from dataclasses import asdict

    from schedule_gym.backends.tvm import runner

    protocol = asdict(MeasureProtocol(check_correctness=False, censor_ratio=None))
    assert protocol["early_stop_ratio"] * 0.04 == pytest.approx(0.12) and protocol["coarse_above_s"] > 0.2
    kernel = _SlowOnceKernel(sleeps_s, timed_s=1e-4)
    monkeypatch.setattr(runner, "_time", kernel.timings)
    first_s = 0.2
    kernel.calls = 1  # the first run was made by the caller, as the backend does
    out = runner.check_and_time(kernel, _Dev(), [None], (None, None), TASK, protocol, best_s=0.04, first_s=first_s)
    assert out["coarse"] is coarse
    if coarse:
        assert len(out["costs"]) == 1 and out["costs"][0] >= 0.15 and kernel.calls == 2
    else:
        assert out["costs"] == [1e-4] * 3


@pytest.mark.parametrize(
    "template, kind, text",
    [
        ("fault-build", "build", "build failed"),
        ("fault-crash", "crash", "crashed the runner process"),
        ("fault-hang", "timeout", "run timed out after 2 s"),
        ("fault-wrong", "wrong_result", "differ from the float64 reference"),
    ],
)
def test_faulty_kernels_become_error_results_and_the_session_lives(template, kind, text):
    faulty = TVMBackend(template=template, protocol={"run_timeout_s": 2.0})
    try:
        env = TilingEnv(TASK, backend=faulty, failure_penalty=-5.0)
        obs, info = env.reset(seed=0)
        assert info["error"] and text in info["error"]
        assert info["latency_s"] is None
        _, reward, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        assert reward == -5.0 and text in info["error"] and not terminated
        assert faulty.measure(TASK, [env.space.initial_config()])[0].error_kind == kind
    finally:
        faulty.close()


def test_env_on_tvm_records_and_resumes(tmp_path, backend):
    path = tmp_path / "tvm.jsonl"
    env = TilingEnv(TASK, backend="tvm", backend_options={"records": str(path), "protocol": {"min_repeat_ms": 5}})
    obs, info = env.reset(seed=0)
    for action in np.flatnonzero(info["action_mask"])[:3]:
        env.step(int(action))
    first = RecordStore(path)
    assert len(first) == 4
    record = next(iter(first))
    assert record.backend == "tvm" and record.template == "gemm-cpu-v1" and '"mcpu"' in record.target
    assert record.protocol["min_repeat_ms"] == 5 and record.protocol["statistic"] == "median"
    env.close()
    again = TilingEnv(TASK, backend="tvm", backend_options={"records": str(path), "protocol": {"min_repeat_ms": 5}})
    measured = []
    again.backend.delegate.measure = lambda task, configs, on_result=None: measured.extend(configs) or []
    again.reset(seed=0)
    for action in np.flatnonzero(info["action_mask"])[:3]:
        again.step(int(action))
    assert measured == []  # everything came from the records
    again.close()


# GEMM 1024^3 configs of the CUDA template (splits 4/2/4)
CUDA_GOOD = ((16, 2, 8, 4), (128, 8), (16, 2, 8, 4))  # 64 threads a block, an 8x4 register tile each
CUDA_TOO_BIG = ((32, 4, 4, 2), (8, 128), (1, 2, 128, 4))  # 512 threads, but 128-deep k tiles overflow shared memory
CUDA_TOO_MANY = ((8, 2, 64, 1), (512, 2), (1, 8, 32, 4))  # 64 x 32 threads a block: its launch failed on an H100


@pytest.mark.skipif(shutil.which("ld") is None, reason="no system linker")
def test_kernels_linked_with_ld_alone_load_and_call_the_math_library(tmp_path):
    # exp is a call into libm: the library links without the compiler driver and resolves it
    from tvm import te

    a = te.placeholder((1000,), "float32", name="a")
    b = te.compute((1000,), lambda i: te.exp(a[i]) + te.log(a[i] + 2.0), name="b")
    executable = tvm.compile(te.create_prim_func([a, b]), target=resolve_target("llvm"))
    path = str(tmp_path / "k.so")
    executable.export_library(path, fcompile=link_shared)
    module = tvm.runtime.load_module(path)
    x = np.linspace(-1, 1, 1000, dtype="float32")
    out = tvm.runtime.empty((1000,), "float32")
    module["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), np.exp(x) + np.log(x + 2.0), rtol=1e-5)
    with pytest.raises(RuntimeError, match="linking .*missing.o"):
        link_shared(str(tmp_path / "bad.so"), [str(tmp_path / "missing.o")])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_template_builds_with_nvcc():
    cuda = TVMBackend(target={"kind": "cuda", "arch": "sm_90"})
    try:
        task = gemm(1024, 1024, 1024)
        good, too_big, too_many = cuda.build(task, [CUDA_GOOD, CUDA_TOO_BIG, CUDA_TOO_MANY])
        assert good.error is None and good.path.endswith(".so")
        assert too_many.error_kind == "build" and "needs 2048 threads a block (m2 x n2 = 64 x 32); CUDA allows 1024" in too_many.error
        assert "too much shared data" in too_big.error and "\x00" not in too_big.error  # nvcc writes NULs
    finally:
        cuda.close()


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="no CUDA GPU here (the lent GPU machines run this)")
def test_cuda_kernels_are_measured_and_checked_where_a_gpu_is_present():
    cuda = TVMBackend(target="cuda")
    try:
        assert cuda.target["arch"] == "sm_" + str(tvm.cuda(0).compute_version).replace(".", "")
        task = gemm(1024, 1024, 1024)
        results = cuda.measure(task, [CUDA_GOOD, CUDA_TOO_BIG, CUDA_TOO_MANY])
        assert results[0].ok and 0 < results[0].latency_s < 0.05, results[0]
        assert not results[1].ok and "too much shared data" in results[1].error
        assert results[2].error_kind == "build" and "CUDA allows 1024" in results[2].error
    finally:
        cuda.close()


@pytest.mark.skipif(tvm.cuda(0).exist, reason="a CUDA GPU is here")
def test_a_cuda_target_without_a_gpu_stops_before_building_naming_the_missing_device(tmp_path):
    from schedule_gym.errors import MachineError

    # every run failed "Device API cuda is not enabled", recorded as a failure of each config
    env = TilingEnv(gemm(64, 64, 64), backend="tvm", backend_options={"target": "cuda", "records": str(tmp_path / "r.jsonl")})
    try:
        with pytest.raises(MachineError, match=r"^target 'cuda' runs kernels on a cuda device, and this machine has none"):
            env.reset(seed=0)
        assert env.unwrapped.backend.delegate.builder._pool == []  # nothing was built
    finally:
        env.close()
    assert not (tmp_path / "r.jsonl").read_text()


def test_tasks_the_backend_cannot_measure_are_refused_when_the_env_is_made():
    from schedule_gym.errors import TaskError
    from schedule_gym.hardware import available_memory_bytes

    with pytest.raises(TaskError, match=r"task 'gemm-64x1024x64': a float16 kernel summing 1024 products cannot be checked soundly"):
        TilingEnv(gemm(64, 1024, 64, dtype="float16"), backend="tvm", backend_options={"build_workers": 1})
    huge = gemm(65536, 65536, 65536)
    with pytest.raises(TaskError, match=r"task 'gemm-65536x65536x65536' needs about \d+\.\d GiB .* GiB available"):
        TilingEnv(huge, backend="tvm", backend_options={"build_workers": 1})
    # 2**32 cubed: its element counts wrapped round to 0 in a NumPy product, and the task passed
    with pytest.raises(TaskError, match=r"task 'gemm-4294967296x4294967296x4294967296' needs about 1374389534720\.0 GiB"):
        TilingEnv(gemm(2**32, 2**32, 2**32), backend="tvm", backend_options={"build_workers": 1})
    backend = TVMBackend(build_workers=1)
    try:
        assert "probably out of memory allocating the task's buffers" in backend._death_cause(huge)
        assert available_memory_bytes() is None or "crashed the runner" in backend._death_cause(gemm(8, 8, 8))
    finally:
        backend.close()


def test_build_directories_are_removed_at_exit_and_after_a_killed_owner(tmp_path):
    import signal

    from schedule_gym.backends.tvm.builder import remove_orphan_build_dirs

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    child = "from schedule_gym.backends.tvm.backend import TVMBackend; import sys, time; b = TVMBackend(build_workers=1); print(b.builder.build_dir, flush=True); time.sleep(float(sys.argv[1]))"
    # left open at exit: removed by the finalizer
    out = subprocess.run([sys.executable, "-c", child, "0"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(out.stdout.strip()) and out.stdout.strip().startswith(f"{tmp_path}/schedule-gym-")
    # killed: left behind, then removed by the next start (a live owner's directory stays)
    with subprocess.Popen([sys.executable, "-c", child, "60"], env=env, stdout=subprocess.PIPE, text=True) as proc:
        killed_dir = proc.stdout.readline().strip()
        live = tmp_path / f"schedule-gym-{os.getpid()}-live"
        live.mkdir()
        assert remove_orphan_build_dirs(str(tmp_path)) == []  # its owner is alive
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.isdir(killed_dir)
    legacy = tmp_path / "schedule-gym-abc123"
    legacy.mkdir()
    assert remove_orphan_build_dirs(str(tmp_path)) == [killed_dir]
    assert live.is_dir() and legacy.is_dir()

