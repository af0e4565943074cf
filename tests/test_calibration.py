from dataclasses import replace

import numpy as np
import pytest

from schedule_gym import TileSpace, gemm
from schedule_gym.backends import PROFILES
from schedule_gym.backends.mock import mock_latency_s
from schedule_gym.calibration import CalibrationSample, fit_profile, spearman


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
