"""Baselines that search like agents: the AutoTVM-style XGBoost tuner."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schedule_gym.agents import make_agent
from schedule_gym.envs import gemm_env

#: the mock profile these learning curves were checked on (the default, "auto", depends on the machine)
MOCK = {"backend_options": {"profile": "znver5-2core-fitted"}}


def test_xgb_model_guided_batches_beat_its_random_first_plan() -> None:
    """After the first (random) plan the ranking model + annealing pick far faster configs."""
    result = make_agent("xgb", seed=0).run(gemm_env(1024, 1024, 1024, **MOCK), 256)
    latencies = np.array([r.latency_s for r in result.history])
    random_part, guided_part = latencies[1:64], latencies[64:]
    assert np.median(guided_part) < 0.5 * np.median(random_part)


def test_xgb_features_are_factor_and_tile_logs() -> None:
    agent = make_agent("xgb", seed=0)
    env = gemm_env(1024, 1024, 1024)
    agent.space = env.space
    config = ((2, 4, 8, 16), (256, 4), (1, 2, 4, 128))
    (row,) = agent.features(np.array([env.space.index(config)]))
    # m: log2 factors 1 2 3 4, tiles inside levels 1..3: 4*8*16, 8*16, 16
    assert list(row[:7]) == [1, 2, 3, 4, 9, 7, 4]
    assert len(row) == (4 + 3) + (2 + 1) + (4 + 3)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"plan_size": 0}, "plan_size must be a positive integer, got 0"),
     ({"eps_greedy": -0.1}, "eps_greedy must be a number in [0.0, 1.0], got -0.1"),
     ({"n_iter": 2.5}, "n_iter must be a positive integer, got 2.5")],
)
def test_bad_xgb_parameters_are_named(params, message) -> None:
    with pytest.raises(ValueError) as info:
        make_agent("xgb", **params)
    assert message in str(info.value)


def test_rnn_controller_learns_to_emit_faster_configs() -> None:
    result = make_agent("rnn", seed=0).run(gemm_env(1024, 1024, 1024, **MOCK), 600)
    latencies = np.array([r.latency_s for r in result.history])
    assert np.median(latencies[-200:]) < 0.5 * np.median(latencies[1:65])


def test_grid_search_finds_the_shipped_tables_optimum() -> None:
    import gymnasium

    env = gymnasium.make("schedule_gym/GemmTable-v0")
    base = env.unwrapped
    optimum = min(r.result.latency_s for r in base.backend.stores[0] if r.result.ok)
    result = make_agent("grid").run(env, "100%")
    assert result.num_measurements == base.space.size == 10368
    assert result.best_latency_s == optimum
    assert result.stop_reason == "space_exhausted"
    env.close()


@pytest.fixture(scope="module")
def trained_policy(tmp_path_factory):
    from schedule_gym.baselines.sb3_tuner import TrainArgs, train

    out = tmp_path_factory.mktemp("sb3")
    return train(TrainArgs(algo="maskable_ppo", task="gemm-512x512x512", timesteps=1024, out=str(out)))


def test_sb3_training_writes_a_model_and_tensorboard_logs(trained_policy) -> None:
    run = trained_policy.parent
    assert trained_policy.is_file() and (run / "algo.txt").read_text().strip() == "maskable_ppo"
    assert any((run / "tb").rglob("events.out.tfevents.*"))


def test_policy_tuner_spends_its_budget_and_repeats_with_its_seed(trained_policy) -> None:
    runs = [make_agent("policy", seed=s, model=str(trained_policy)).run(gemm_env(512, 512, 512), 80) for s in (3, 3)]
    assert runs[0].num_measurements == 80
    assert [r.index for r in runs[0].history] == [r.index for r in runs[1].history]
    assert runs[0].best_latency_s < runs[0].s0_latency_s / 10


def test_policy_tuner_through_the_tune_command(trained_policy, tmp_path, capsys) -> None:
    from schedule_gym.cli import main

    code = main(["tune", "--task", "gemm-512x512x512", "--agent", "policy", "--agent-param", f"model={trained_policy}",
                 "--budget", "30", "--no-numpy", "--quiet", "--result", str(tmp_path / "r.json")])
    assert code == 0
    assert "30 measurements" in capsys.readouterr().out


def test_policy_tuner_in_the_compare_harness(trained_policy, tmp_path, capsys) -> None:
    from schedule_gym.cli import main

    args = ["compare", "--task", "gemm-512x512x512", "--agents", "random", "policy", "--agent-param",
            f"policy.model={trained_policy}", "--seeds", "2", "--budgets", "30", "--no-plots", "--out", str(tmp_path)]
    assert main(args) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    runs = [r for r in data["runs"] if r["agent"] == "policy"]
    assert [r["num_measurements"] for r in runs] == [30, 30]
    saved = json.loads((tmp_path / "policy__seed0__30.json").read_text())
    assert saved["params"]["model"] == str(trained_policy)


@pytest.mark.parametrize(
    ("params", "message"),
    [({}, "the policy tuner needs model= the path of a saved SB3 model, got None"),
     ({"model": "nowhere.zip"}, "nowhere.zip is not a saved Stable-Baselines3 model (a .zip file)")],
)
def test_policy_tuner_bad_model_is_named(params, message) -> None:
    with pytest.raises(ValueError) as info:
        make_agent("policy", **params)
    assert message in str(info.value)


def test_policy_tuner_refuses_a_policy_for_another_observation_shape(trained_policy) -> None:
    from schedule_gym.envs import TilingEnv
    from schedule_gym.tasks import gemm

    agent = make_agent("policy", model=str(trained_policy))
    with pytest.raises(ValueError, match=r"expects observations of shape \(10,\), the environment gives \(8,\)"):
        agent.run(TilingEnv(task=gemm(64, 64, 64, d_m=3, d_k=2, d_n=3)), 10)
