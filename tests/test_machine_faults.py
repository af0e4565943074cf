"""Failures of the machine are not failures of the config: a build stopped by a file-size limit or a full disk,
a machine without a linker, a builder out of memory. Such a build is never recorded (a resumed run measures
the config), and a batch whose every build fails the same machine way stops the run with one line naming
the cause. The faults are injected: a child process with a small RLIMIT_FSIZE, a PATH without ``ld``, a build
function raising MemoryError."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from schedule_gym import MockBackend, TileSpace, gemm
from schedule_gym.backends import LatencyBackend, ReplayBackend
from schedule_gym.backends.machine import DISK_FULL, machine_cause, machine_failure
from schedule_gym.errors import USER_ERRORS, MachineError
from schedule_gym.records import RecordStore
from schedule_gym.types import MeasureResult

TASK = gemm(64, 32, 64)
CONFIGS = [TileSpace(TASK).config(i) for i in range(6)]
FSIZE = "a file-size limit (ulimit -f, RLIMIT_FSIZE) stops the compiler or linker writing the kernel"


@pytest.mark.parametrize(
    "error, cause",
    [
        ("the build process crashed: LLVM ERROR: IO failure on output stream: File too large", FSIZE),
        ("linking k0.so failed (ld -shared ...): ld was killed by signal 25 (File size limit exceeded)", FSIZE),
        ("build failed: OSError: [Errno 28] No space left on device", DISK_FULL),
        ("build failed: OSError: [Errno 122] Disk quota exceeded", "the disk quota is used up"),
        ("collect2: fatal error: cannot find 'ld'", "no linker: ld (binutils) is not installed or not on PATH"),
        ("build failed: FileNotFoundError: [Errno 2] No such file or directory: 'g++'", "g++ is not installed or not on PATH"),
        ("build failed: MemoryError", "the build process ran out of memory"),
        ("LLVM ERROR: out of memory", "the build process ran out of memory"),
        # failures of the config
        ("build failed: TVMError: Check failed: (extent > 0) is false", None),
        ("build failed: FileNotFoundError: [Errno 2] No such file or directory: '/tmp/x/k0.so'", None),
        ("the build process crashed", None),
        (None, None),
    ],
)
def test_machine_causes_are_told_from_the_error_text(error, cause):
    assert machine_cause(error) == cause


def test_only_a_batch_failed_all_the_same_machine_way_stops():
    same = [(FSIZE, "LLVM ERROR: File too large")] * 3
    error = machine_failure(same, "gemm-64")
    assert isinstance(error, MachineError) and isinstance(error, RuntimeError) and MachineError in USER_ERRORS
    assert str(error).startswith(f"every build of the 3 configs of task 'gemm-64' failed because of this machine, not "
                                 f"the configs: {FSIZE} (LLVM ERROR: File too large); nothing of it was recorded")
    assert str(machine_failure(same[:1], "gemm-64")).startswith("the build of the config of task 'gemm-64' failed")
    assert machine_failure(same + [(None, "build failed: TVMError")], "t") is None  # one failed because of its config
    assert machine_failure(same + [(DISK_FULL, "No space left on device")], "t") is None  # two causes: not one fault
    assert machine_failure([], "t") is None


def test_the_record_store_refuses_a_failure_of_the_machine(tmp_path):
    store = RecordStore(tmp_path / "r.jsonl")
    failure = MeasureResult.failure(CONFIGS[0], f"{FSIZE}; not a failure of the config (LLVM ERROR)", "machine")
    assert failure.machine_failure and not MeasureResult.failure(CONFIGS[0], "x", "build").machine_failure
    with pytest.raises(ValueError, match=r"a failure of the machine is never recorded as config"):
        store.append(TASK, "tvm", "llvm", "gemm-cpu-v1", failure)
    assert len(store) == 0 and not (tmp_path / "r.jsonl").exists()  # refused before the file is opened


class MachineFails(LatencyBackend):
    """The mock, except that the configs in ``failing`` fail as a machine out of disk space would build them."""

    name = "faulty"
    deterministic = True

    def __init__(self, failing=()):
        self.inner, self.failing, self.asked = MockBackend("znver5-2core-fitted"), set(failing), []

    def record_context(self, task):
        return self.inner.record_context(task)

    def measure(self, task, configs, on_result=None):
        self.asked.extend(configs)
        results = []
        for position, config in enumerate(configs):
            result = (MeasureResult.failure(config, f"{DISK_FULL}; not a failure of the config", "machine")
                      if config in self.failing else self.inner.measure(task, [config])[0])
            results.append(result)
            if on_result is not None:
                on_result(position, result)
        return results


def test_a_failure_of_the_machine_is_passed_on_never_recorded_and_measured_again_on_resume(tmp_path):
    path = tmp_path / "r.jsonl"
    first = ReplayBackend(path, delegate=MachineFails(failing=CONFIGS[:2]))
    results = first.measure(TASK, CONFIGS)
    first.close()
    assert [r.machine_failure for r in results] == [True, True, False, False, False, False]
    assert {r.result.config for r in RecordStore(path)} == set(CONFIGS[2:])  # the machine's failures are not there
    delegate = MachineFails()
    again = ReplayBackend(path, delegate=delegate)
    assert all(r.ok for r in again.measure(TASK, CONFIGS))
    again.close()
    assert delegate.asked == CONFIGS[:2] and len(RecordStore(path)) == 6


def test_old_records_of_build_failures_naming_a_machine_cause_are_measured_again(tmp_path):
    # written before the "machine" kind existed: the run that wrote them reused them, never measured them
    path = tmp_path / "old.jsonl"
    store = RecordStore(path)
    target, template = MockBackend("znver5-2core-fitted").record_context(TASK)
    store.append(TASK, "tvm", target, template,
                 MeasureResult.failure(CONFIGS[0], "the build process crashed: LLVM ERROR: IO failure on output stream: "
                                                   "File too large", "build"))
    store.append(TASK, "tvm", target, template, MeasureResult.failure(CONFIGS[1], "build failed: TVMError: bad split", "build"))
    store.close()
    served = ReplayBackend(path).measure(TASK, CONFIGS[:2])  # without a delegate: served as recorded
    assert [r.error_kind for r in served] == ["build", "build"]
    delegate = MachineFails()
    replay = ReplayBackend(path, delegate=delegate)
    results = replay.measure(TASK, CONFIGS[:2])
    replay.close()
    assert delegate.asked == [CONFIGS[0]]  # the config's own failure stays a result
    assert results[0].ok and results[1].error == "build failed: TVMError: bad split"
    assert RecordStore(path).get(TASK, target, template, CONFIGS[0]).result.ok  # the new result replaces the old one


# ------------------------------------------------------------------------------------------- the TVM backend
def needs_tvm(test):
    return pytest.mark.tvm(pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs TVM")(test))


BUILD_TWO = textwrap.dedent(
    """
    import os, resource, sys
    limit = int(sys.argv[1])
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    from schedule_gym import TileSpace, gemm
    from schedule_gym.backends.tvm.builder import LocalBuilder
    from schedule_gym.errors import MachineError
    task = gemm(64, 64, 64)
    builder = LocalBuilder({"kind": "llvm"}, 2)
    try:
        built = builder.build(task, "gemm-cpu", [TileSpace(task).config(0), TileSpace(task).config(1)], 120)
        print("BUILT", [(b.error_kind, b.path is not None) for b in built])
    except MachineError as exc:
        print("MACHINE", exc)
    finally:
        builder.close()
    """
)


def _build_two(limit: int = 0, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", BUILD_TWO, str(limit)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    assert "LLVM ERROR" not in out.stderr  # what a build process says is kept in its error, not shown
    return out.stdout.strip().splitlines()[-1]


@needs_tvm
def test_builds_stopped_by_a_file_size_limit_stop_the_batch_naming_the_limit():
    said = _build_two(limit=8192)
    assert said.startswith(f"MACHINE every build of the 2 configs of task 'gemm-64x64x64' failed because of this "
                           f"machine, not the configs: {FSIZE} (")
    assert "File too large" in said
    assert _build_two() == "BUILT [(None, True), (None, True)]"  # the same builds, without the limit


@needs_tvm
def test_builds_on_a_machine_without_a_linker_stop_the_batch_naming_it(tmp_path):
    said = _build_two(PATH=str(tmp_path), CC="", CXX="")  # an empty folder: no ld, no compiler
    assert said.startswith("MACHINE every build of the 2 configs of task 'gemm-64x64x64' failed because of this "
                           "machine, not the configs: no linker: ld (binutils) is not installed or not on PATH")
    assert "neither ld nor a C/C++ compiler" in said and repr(str(tmp_path)) in said


@needs_tvm
def test_a_builder_out_of_memory_is_a_failure_of_the_machine(monkeypatch):
    from schedule_gym.backends.tvm import builder as builder_module
    from schedule_gym.backends.tvm.backend import TVMBackend

    real = builder_module.build_artifact
    bad = CONFIGS[1]
    # sent by value to the build process (a lambda): the config ``bad`` runs it out of memory
    monkeypatch.setattr(builder_module, "build_artifact", lambda task, config, *rest: (
        real(task, config, *rest) if config != bad else bytearray(1 << 62)))
    backend = TVMBackend(build_workers=2, num_threads=1, protocol={"min_repeat_ms": 1, "repeat": 1})
    try:
        good, failed = backend.measure(TASK, [CONFIGS[0], bad])
        assert good.ok and failed.machine_failure
        assert failed.error.startswith("the build process ran out of memory; not a failure of the config (build failed: ")
        with pytest.raises(MachineError, match="the build of the config of task 'gemm-64x32x64' failed because of this "
                                               "machine, not the config: the build process ran out of memory"):
            backend.measure(TASK, [bad])
    finally:
        backend.close()


LIMITED = textwrap.dedent(
    """
    import resource, subprocess, sys
    limit = int(sys.argv[1])
    set_limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    done = subprocess.run(sys.argv[2:], preexec_fn=set_limit if limit else None)
    sys.exit(done.returncode)
    """
)


@needs_tvm
def test_the_command_line_stops_at_a_file_size_limit_records_nothing_and_measures_on_resume(tmp_path):
    records = tmp_path / "r.jsonl"
    command = [sys.executable, "-m", "schedule_gym.cli", "tune", "--task", "gemm-64", "--backend", "tvm", "--budget", "2",
               "--records", str(records), "--quiet", "--no-numpy", "--backend-param", "num_threads=1",
               "--backend-param", "build_workers=1", "--backend-param", "protocol.min_repeat_ms=1"]
    limited = subprocess.run([sys.executable, "-c", LIMITED, "8192", *command], capture_output=True, text=True, timeout=600)
    assert limited.returncode == 2, limited.stderr
    assert limited.stderr.startswith(f"schedule-gym: error: the build of the config of task 'gemm-64' failed because "
                                     f"of this machine, not the config: {FSIZE} (")
    assert limited.stderr.count("\n") == 1 and limited.stdout == ""
    assert len(RecordStore(records)) == 0  # the config's "failure" was not recorded
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"records   {records}: 0 reused, 2 measured now" in resumed.stdout
    assert all(r.result.ok for r in RecordStore(records))
