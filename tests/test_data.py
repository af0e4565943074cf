"""The shipped real-hardware data: the exhaustive table and the mock's calibration sample."""

import gymnasium
import numpy as np
import pytest

import schedule_gym  # noqa: F401
from schedule_gym import MockBackend, TileSpace
from schedule_gym.backends import PROFILES
from schedule_gym.calibration import CalibrationSample, spearman
from schedule_gym.data import CALIBRATION, CALIBRATION_SAPPHIRERAPIDS, CALIBRATION_ZNVER3, CALIBRATION_ZNVER4, TABLES, get_table
from schedule_gym.records import RecordStore
from schedule_gym.tables import summarize
from schedule_gym.tasks import get_task


@pytest.mark.parametrize("key", list(TABLES))
def test_table_holds_every_config_of_its_task(key):
    table = get_table(key)
    store = RecordStore(table.path)
    space = TileSpace(table.task)
    assert len(store.records_of(table.task)) == space.size
    assert all(store.get(table.task, r.target, r.template, c) is not None for r in [next(iter(store))] for c in space)
    summary = summarize(table.path, table.task)
    assert summary.best_gflops > 4 * summary.median_gflops  # a space worth searching


def test_table_environment_serves_real_latencies_at_mock_speed():
    env = gymnasium.make("schedule_gym/GemmTable-v0")
    base = env.unwrapped
    table = get_table("gemm-128-323-znver5-1t")
    summary = summarize(table.path, table.task)
    obs, info = env.reset(seed=0, options={"config": summary.best_config})
    assert info["latency_s"] == summary.best_latency_s
    rng = np.random.default_rng(0)
    for _ in range(500):
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert info["latency_s"] is None or info["latency_s"] >= summary.best_latency_s
        if truncated:
            obs, info = env.reset()
    assert base.task == table.task
    with pytest.raises(ValueError, match="unknown table 'gemm-9'"):
        gymnasium.make("schedule_gym/GemmTable-v0", table="gemm-9")


def test_zen5_profile_ranks_the_calibration_sample():
    store = RecordStore(CALIBRATION)
    (task,) = store.tasks().values()
    ok = [r.result for r in store.records_of(task) if r.result.ok]
    assert len(ok) >= 500
    mock = MockBackend("znver5-2core-fitted")  # the profile fitted to this (Zen 5) sample
    space = mock.space(task)
    predicted = mock.model_latency_s(task, [space.index(r.config) for r in ok])
    assert spearman(predicted, [r.latency_s for r in ok]) >= 0.8


@pytest.mark.parametrize("name, held_out_rho", [("resnet50/conv6", 0.77), ("bert-base/attn-pv", 0.73), ("gemm-1024", 0.76)])
def test_zen3_profile_ranks_the_held_out_halves_of_its_samples(name, held_out_rho):
    """The figures the README reports for the Zen 3 profile, from the shipped sample (fit on first halves)."""
    task = get_task(name)
    ok = [r.result for r in RecordStore(CALIBRATION_ZNVER3).records_of(task) if r.result.ok]
    sample = CalibrationSample(task, tuple(r.config for r in ok), tuple(r.latency_s for r in ok))
    assert len(ok) == 300
    assert sample.split()[1].spearman(PROFILES["znver3-2core-fitted"]) >= held_out_rho
    assert sample.split()[1].spearman(PROFILES["znver3-2core-fitted"]) > sample.split()[1].spearman(PROFILES["avx2-2core-nominal"])


@pytest.mark.parametrize(
    "sample_path, profile, name, held_out_rho",
    [(CALIBRATION_ZNVER4, "znver4-2core-fitted", "gemm-256", 0.79),
     (CALIBRATION_ZNVER4, "znver4-2core-fitted", "resnet50/conv6", 0.87),
     (CALIBRATION_ZNVER4, "znver4-2core-fitted", "bert-base/attn-pv", 0.74),
     (CALIBRATION_SAPPHIRERAPIDS, "sapphirerapids-2core-fitted", "gemm-256", 0.789),
     (CALIBRATION_SAPPHIRERAPIDS, "sapphirerapids-2core-fitted", "resnet50/conv6", 0.853),
     (CALIBRATION_SAPPHIRERAPIDS, "sapphirerapids-2core-fitted", "bert-base/attn-pv", 0.726)],
)
def test_avx512_profiles_rank_the_held_out_halves_of_their_samples(sample_path, profile, name, held_out_rho):
    """The figures of the Zen 4 and Intel Xeon profiles (examples/results/calibration/profiles.md), from the
    shipped samples (fit on first halves), and better than the nominal AVX-512 profile those CPUs got before."""
    task = get_task(name)
    ok = [r.result for r in RecordStore(sample_path).records_of(task) if r.result.ok]
    sample = CalibrationSample(task, tuple(r.config for r in ok), tuple(r.latency_s for r in ok))
    assert len(ok) >= 299
    held_out = sample.split()[1]
    assert held_out.spearman(PROFILES[profile]) >= held_out_rho
    assert held_out.spearman(PROFILES[profile]) > held_out.spearman(PROFILES["avx512-2core-nominal"])
