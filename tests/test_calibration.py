import re
from dataclasses import replace

import numpy as np
import pytest

from schedule_gym import TileSpace, cache, gemm, hardware
from schedule_gym.backends import PROFILES, MockBackend
from schedule_gym.backends.mock.model import mock_latency_s
from schedule_gym.backends.mock.profile import read_profile
from schedule_gym.cache import CACHE_ENV
from schedule_gym.calibration import CalibrationSample, fit_profile, spearman
from schedule_gym.cli import main


def test_spearman_matches_its_definition():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233)  # scipy's value, ties averaged
    rng = np.random.default_rng(0)
    x = rng.standard_normal(2000)
    assert abs(spearman(x, rng.standard_normal(2000))) < 0.06
    assert spearman(x, np.exp(x)) == pytest.approx(1.0)  # ranks only


def test_fit_recovers_a_perturbed_profile():
    task = gemm(256, 256, 256)
    space = TileSpace(task)
    base = PROFILES["avx512-2core-nominal"]
    truth = replace(base, spill_cost=base.spill_cost * 3, loop_overhead_cycles=base.loop_overhead_cycles * 4, overlap=0.6)
    idx = np.random.default_rng(1).choice(space.size, 400, replace=False)
    configs = [space.config(int(i)) for i in idx]
    real = mock_latency_s(task, space, idx, truth) * np.exp(np.random.default_rng(2).normal(0, 0.05, len(idx)))
    report = fit_profile([CalibrationSample(task, tuple(configs), tuple(real))], base)
    assert report.loss_after < 0.25 * report.loss_before
    assert report.spearman_after > 0.95
    # parameters need not be identifiable one by one; predictions for configs it never saw must improve
    unseen = np.setdiff1d(np.random.default_rng(3).choice(space.size, 500, replace=False), idx)
    real_unseen = np.log(mock_latency_s(task, space, unseen, truth))

    def rmse(profile):
        return np.sqrt(np.mean((np.log(mock_latency_s(task, space, unseen, profile)) - real_unseen) ** 2))

    assert rmse(report.profile) < 0.5 * rmse(base)


# ------------------------------------------------------------------------------- schedule-gym calibrate
def test_split_holds_out_the_last_share():
    task = gemm(64, 64, 64)
    space = TileSpace(task)
    sample = CalibrationSample(task, tuple(space.config(i) for i in range(10)), tuple(float(i + 1) for i in range(10)))
    fit, rest = sample.split()
    assert (len(fit.configs), len(rest.configs)) == (5, 5) and fit.configs + rest.configs == sample.configs
    fit, rest = sample.split(0.3)
    assert (len(fit.configs), len(rest.configs)) == (7, 3) and rest.latencies_s == (8.0, 9.0, 10.0)
    with pytest.raises(ValueError, match="held_out must be a share strictly between 0 and 1, got 1.0"):
        sample.split(1.0)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "gemm-3"], "unknown task 'gemm-3'"),
        (["--tasks", "gemm-64", "gemm-64"], "--tasks names a task twice"),
        (["--configs", "3"], "--configs must be at least 4"),
        (["--held-out", "1"], "--held-out must be a share strictly between 0 and 1, got 1.0"),
        (["--threads", "0"], "--threads must be a positive integer, got 0"),
        (["--configs", "many"], "argument --configs: invalid int value: 'many'"),
    ],
)
def test_calibrate_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert main(["calibrate", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "cache").exists()  # nothing measured, nothing written


def test_calibrate_refuses_a_directory_and_a_malformed_cached_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(hardware, "cpu_name", lambda: "znver3")
    assert main(["calibrate", "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a directory" in capsys.readouterr().err
    path = cache.profile_path("znver3")
    path.parent.mkdir(parents=True)
    path.write_text('{"name": "x"}')
    assert main(["calibrate"]) == 2
    err = capsys.readouterr().err
    assert f"mock profile file {path}: field 'cores' is missing" in err and err.count("\n") == 1


@pytest.mark.tvm
def test_calibrate_command_measures_fits_and_stores_the_profile(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tvm")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    cpu = hardware.cpu_name()
    records = tmp_path / "r.jsonl"
    tasks = ["gemm-32x32x32", "gemm-16x64x32"]
    args = ["calibrate", "--tasks", *tasks, "--configs", "12", "--threads", "1", "--batch", "6",
            "--records", str(records)]
    assert main(args) == 0
    out = capsys.readouterr().out
    path = cache.profile_path(cpu)
    assert f"wrote profile {cpu}-1core-calibrated to {path}: the mock's profile='auto' uses it" in out
    assert re.search(r"held-out Spearman -?\d\.\d{3} \(mean over 2 tasks; starting profile \S+: -?\d\.\d{3}\)", out)
    for task in tasks:
        assert f"  {task}: measured 6/12" in out and f"  {task}: measured 12/12" in out  # progress per batch
        assert re.search(rf"^{task} +12 +6 +6 +-?\d\.\d{{3}} -> +-?\d\.\d{{3}}", out, re.M)
    assert re.search(r"^overall \(mean over tasks\) +-?\d\.\d{3} -> +-?\d\.\d{3}", out, re.M)
    profile = read_profile(path)
    assert profile.name == f"{cpu}-1core-calibrated" and profile.cores == 1
    assert MockBackend().profile == profile  # profile="auto" now picks it on this CPU
    # the same records again: nothing measured twice, the same fit; --out writes elsewhere and says so
    lines = len(records.read_text().splitlines())
    assert lines == 24
    other = tmp_path / "other.json"
    assert main([*args, "--out", str(other)]) == 0
    out = capsys.readouterr().out
    assert len(records.read_text().splitlines()) == lines
    assert f"wrote profile {cpu}-1core-calibrated to {other}: profile='auto' does not read it" in out
    assert read_profile(path) == profile  # the cached profile untouched


def test_mock_fidelity_scores_each_profile_against_real_records(tmp_path, capsys, monkeypatch):
    import sys
    from pathlib import Path

    from schedule_gym.records import RecordStore
    from schedule_gym.types import MeasureResult

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "benchmarks"))
    from mock_fidelity import fidelity
    from mock_fidelity import main as fidelity_main

    real = np.array([3.0, 1.0, 2.0, 4.0])
    assert fidelity(real, real * 7) == {"rho": pytest.approx(1.0), "pick": 1.0, "top10": 1.0}
    # the mock's favourite is the slowest config
    assert fidelity(real, -real) == {"rho": pytest.approx(-1.0), "pick": 4.0, "top10": 1.0}
    # records whose "real" latencies are one profile's mock latencies: that profile ranks them perfectly
    task = gemm(64, 64, 64)
    space = TileSpace(task)
    indices = np.random.default_rng(0).choice(space.size, 40, replace=False)
    truth = MockBackend(profile="znver3-2core-fitted").model_latency_s(task, indices)
    store = RecordStore(tmp_path / "r.jsonl", fsync=False)
    for index, latency in zip(indices, truth):
        result = MeasureResult(config=space.config(int(index)), latency_s=latency)
        store.append(task, "tvm", "llvm", "gemm-cpu-v1", result)
    store.append(task, "tvm", "llvm", "gemm-cpu-v1",
                 MeasureResult.censored_at(space.config(int(np.setdiff1d(np.arange(space.size), indices)[0])), 1e-9))
    store.close()
    monkeypatch.setattr(sys, "argv", ["mock_fidelity.py", str(tmp_path), "--profiles",  # a folder: its *.jsonl
                                      "znver3-2core-fitted", "avx2-2core-nominal", "--out", str(tmp_path / "t.md")])
    fidelity_main()
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {task.name} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "40"  # the censored record is left out
    assert cells[2] == "1.000 / 1.00 / 1.00"
    assert cells[3] != cells[2]
    assert (tmp_path / "t.md").read_text().count(row) == 1
