"""Record files under faults: a write that fails part-way (a full disk, a file-size limit, a failed fsync), a
place that cannot be written, records of unknown template versions. Nothing measured is lost (everything
measured before the failure is on disk and a resumed run measures only the rest) and nothing is poisoned
(the file still loads)."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from schedule_gym import MockBackend, TileSpace, gemm, make_backend
from schedule_gym import records as records_module
from schedule_gym.backends import LatencyBackend, ReplayBackend
from schedule_gym.backends.replay import known_template_versions
from schedule_gym.cli import main
from schedule_gym.records import RecordFileError, RecordStore

TASK = gemm(64, 32, 64)
CONFIGS = [TileSpace(TASK).config(i) for i in range(12)]


class Counting(LatencyBackend):
    """The mock, remembering every config it is asked to measure."""

    name = "counting"
    deterministic = True

    def __init__(self):
        self.inner, self.asked = MockBackend("znver5-2core-fitted"), []

    def record_context(self, task):
        return self.inner.record_context(task)

    def measure(self, task, configs, on_result=None):
        self.asked.extend(configs)
        return self.inner.measure(task, configs, on_result)


class FaultyOS:
    """``os`` for the records module, except that after ``budget`` more bytes a write stores only what fits
    and the next one fails as a full disk does; ``fsync`` and ``ftruncate`` fail where told to."""

    def __init__(self, budget, fail_fsync=False, fail_truncate=False, fail_open=None):
        self.budget, self.fail_fsync, self.fail_truncate, self.fail_open = budget, fail_fsync, fail_truncate, fail_open

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = os.write(fd, bytes(data[: self.budget]))
        self.budget -= written
        return written

    def fsync(self, fd):
        if self.fail_fsync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)

    def ftruncate(self, fd, size):
        if self.fail_truncate:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.ftruncate(fd, size)

    def open(self, path, flags, mode=0o777):
        if self.fail_open is not None:
            raise OSError(self.fail_open, os.strerror(self.fail_open), str(path))
        return os.open(path, flags, mode)


def configs_on_disk(path):
    return [r.result.config for r in RecordStore(path)]


def line_bytes(tmp_path):
    """The length of one record line of TASK (they differ by a few bytes)."""
    path = tmp_path / "probe.jsonl"
    backend = ReplayBackend(path, delegate=Counting())
    backend.measure(TASK, CONFIGS[:1])
    backend.close()
    return path.stat().st_size


@pytest.mark.parametrize("fault, cause", [("write", "No space left on device"), ("fsync", "Input/output error")])
def test_a_write_that_fails_part_way_loses_nothing_measured_before_it(tmp_path, monkeypatch, fault, cause):
    size = line_bytes(tmp_path)
    path = tmp_path / "r.jsonl"
    backend = ReplayBackend(path, delegate=Counting())
    faulty = FaultyOS(int(3.5 * size)) if fault == "write" else FaultyOS(10**9)
    monkeypatch.setattr(records_module, "os", faulty)
    if fault == "fsync":
        backend.measure(TASK, CONFIGS[:3])
        faulty.fail_fsync = True
    with pytest.raises(RecordFileError, match=rf"^{path}: could not write a record \({cause}\); the records written before it are intact$"):
        backend.measure(TASK, CONFIGS)  # one batch: the failure comes in the middle of it
    assert configs_on_disk(path) == CONFIGS[:3]  # the 4th was cut back off, whole
    assert path.read_bytes().endswith(b"\n")

    faulty.budget, faulty.fail_fsync = 10**9, False  # the disk has room again: the same backend goes on
    (result,) = backend.measure(TASK, [CONFIGS[3]])
    assert result.ok and configs_on_disk(path) == CONFIGS[:4]
    backend.close()

    delegate = Counting()  # the run resumed measures only what is not on disk
    resumed = ReplayBackend(path, delegate=delegate)
    results = resumed.measure(TASK, CONFIGS)
    assert delegate.asked == CONFIGS[4:] and all(r.ok for r in results)
    assert configs_on_disk(path) == CONFIGS
    resumed.close()


def test_a_torn_line_that_cannot_be_cut_back_is_cut_before_the_next_append(tmp_path, monkeypatch):
    size = line_bytes(tmp_path)
    path = tmp_path / "r.jsonl"
    backend = ReplayBackend(path, delegate=Counting())
    faulty = FaultyOS(int(2.5 * size), fail_truncate=True)
    monkeypatch.setattr(records_module, "os", faulty)
    with pytest.raises(RecordFileError, match="No space left on device"):
        backend.measure(TASK, CONFIGS)
    assert not path.read_bytes().endswith(b"\n")  # the torn third line is still there...
    assert configs_on_disk(path) == CONFIGS[:2]  # ...and a reader skips it
    faulty.budget, faulty.fail_truncate = 10**9, False
    backend.measure(TASK, CONFIGS[2:4])  # the next append reopens the file and cuts the torn line first
    assert configs_on_disk(path) == CONFIGS[:4]
    assert all(json.loads(line) for line in path.read_text().splitlines())
    backend.close()


LIMITED_TUNE = textwrap.dedent(
    """
    import resource, sys
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
    from schedule_gym.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def test_the_command_line_stops_at_a_file_size_limit_with_one_line_and_resumes(tmp_path, capsys):
    size = line_bytes(tmp_path)
    path = tmp_path / "runs" / "r.jsonl"  # its folder is made
    args = ["tune", "--backend", "mock", "--no-numpy", "--quiet", "--task", "gemm-128", "--agent", "random",
            "--budget", "12", "--seed", "3", "--records", str(path)]
    child = subprocess.run([sys.executable, "-c", LIMITED_TUNE, str(int(4.5 * size)), *args],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 2, child.stderr
    assert child.stderr.startswith(f"schedule-gym: error: {path}: could not write a record (File too large)")
    assert child.stderr.count("\n") == 1
    before = path.read_text()
    kept = len(RecordStore(path))
    assert before.endswith("\n") and 1 <= kept < 12

    assert main(args) == 0  # the same command, without the limit
    assert f"records   {path}: {kept} reused, {12 - kept} measured now" in capsys.readouterr().out
    assert path.read_text().startswith(before) and len(RecordStore(path)) == 12


@pytest.mark.parametrize("where", ["folder is a file", "permission", "read-only filesystem"])
def test_a_place_that_cannot_be_written_is_refused_before_anything_is_measured(tmp_path, monkeypatch, capsys, where):
    path = tmp_path / "r.jsonl"
    if where == "folder is a file":
        (tmp_path / "file").write_text("x")
        path, cause = tmp_path / "file" / "r.jsonl", r"cannot be written: its folder cannot be made \(File exists: "
    else:
        code = errno.EACCES if where == "permission" else errno.EROFS
        monkeypatch.setattr(records_module, "os", FaultyOS(10**9, fail_open=code))
        cause = rf"cannot be written \({os.strerror(code)}\)$"
    delegate = Counting()
    with pytest.raises(RecordFileError, match=rf"^{path}: {cause}"):
        ReplayBackend(path, delegate=delegate)
    assert delegate.asked == []
    with pytest.raises(RecordFileError, match=rf"^{path}: {cause}"):
        make_backend("mock", records=str(path))
    assert main(["tune", "--backend", "mock", "--no-numpy", "--quiet", "--task", "gemm-128", "--budget", "5",
                 "--records", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedule-gym: error: {path}: cannot be written") and err.count("\n") == 1


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(RecordFileError, match=rf"^{folder / 'r.jsonl'}: cannot be written \(Permission denied\)$"):
            make_backend("mock", records=str(folder / "r.jsonl"))
    finally:
        folder.chmod(0o755)


def write_records(path, templates):
    """One record of TASK per template version, the mock's numbers under each."""
    store = RecordStore(path)
    (result,) = MockBackend("znver5-2core-fitted").measure(TASK, CONFIGS[:1])
    for template in templates:
        store.append(TASK, "mock", "mock:test", template, result)
    store.close()


def test_records_of_a_template_version_this_code_does_not_know_name_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    write_records(path, ["mock-cpu-v2", "gemm-cpu-v7", "gemm-cpu-v1"])
    message = rf"^{path}:2: template version 'gemm-cpu-v7' is not one this schedule-gym knows \(.*gemm-cpu-v1, .*mock-cpu-v2"
    with pytest.raises(RecordFileError, match=message):
        ReplayBackend(path)  # never served
    delegate = Counting()
    with pytest.raises(RecordFileError, match=message):
        ReplayBackend(path, delegate=delegate)  # never skipped and measured again
    assert delegate.asked == []
    assert main(["tune", "--backend", "mock", "--no-numpy", "--quiet", "--task", "gemm-128", "--budget", "5",
                 "--records", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedule-gym: error: {path}:2: template version 'gemm-cpu-v7'") and err.count("\n") == 1


def test_known_template_versions_load(tmp_path):
    known = known_template_versions()
    assert {"gemm-cpu-v1", "conv2d-cpu-v2", "gemm-cuda-v1", "fault-crash-v1", "mock-cpu-v2", "none"} <= known
    path = tmp_path / "r.jsonl"
    write_records(path, ["gemm-cpu-v1", "fault-crash-v1", "none", "mock-cpu-v2"])
    assert ReplayBackend(path, template="gemm-cpu-v1").measure(TASK, CONFIGS[:1])[0].ok


class OwnVersion(Counting):
    """A backend of one's own that records a template version of its own."""

    def record_context(self, task):
        return ("mine", "mine-v1")


class DeclaredVersion(OwnVersion):
    template_versions = ("mine-v1",)


def test_a_backend_of_ones_own_declares_its_template_versions(tmp_path):
    path = tmp_path / "r.jsonl"
    undeclared = OwnVersion()
    with pytest.raises(ValueError, match=r"records template version 'mine-v1'.*declare it in OwnVersion.template_versions"):
        ReplayBackend(path, delegate=undeclared).measure(TASK, CONFIGS[:2])
    assert undeclared.asked == [] and configs_on_disk(path) == []  # refused before measuring, nothing written
    ReplayBackend(path, delegate=DeclaredVersion()).measure(TASK, CONFIGS[:2])
    delegate = DeclaredVersion()
    ReplayBackend(path, delegate=delegate).measure(TASK, CONFIGS[:3])
    assert delegate.asked == CONFIGS[2:3]
    with pytest.raises(RecordFileError, match=r":1: template version 'mine-v1' is not one"):
        ReplayBackend(path)
    assert ReplayBackend(path, template="mine-v1").measure(TASK, CONFIGS[:3])[2].ok  # named: served


@pytest.mark.tvm
def test_the_tvm_backend_refuses_a_place_that_cannot_be_written_before_building_anything(tmp_path):
    pytest.importorskip("tvm")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordFileError, match=r"cannot be written: its folder cannot be made"):
        make_backend("tvm", records=str(tmp_path / "file" / "r.jsonl"))
