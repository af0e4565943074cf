"""The network that reads the "move_features" observation (schedule_gym.baselines.networks.MoveScorer); the observation
itself is tested beside the other observations of the multi-task environments (test_multitask_vector.py)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.envs.features import N_NEST, N_PARAMS

torch = pytest.importorskip("torch")

PROFILE = {"profile": "znver5-2core-fitted"}
TASKS = "resnet50/fc,bert-base/attn-pv,resnet18/conv3,mobilenetv2/conv2"


def test_schedule_environments_refuse_feature_observations_by_name():
    from schedule_gym.envs import ScheduleEnv

    with pytest.raises(ValueError, match="got 'move_features'"):
        ScheduleEnv("gemm-64", observation="move_features")


def _scorer_and_obs():
    from schedule_gym.baselines.networks import MoveScorer

    envs = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=8, observation="move_features", tasks=TASKS,
                        backend_options=PROFILE, start="random")
    obs, info = envs.reset(seed=1)
    A = int(envs.single_action_space.n)
    torch.manual_seed(0)
    scorer = MoveScorer(obs.shape[1], A, hidden_size=16)
    for p in scorer.scorer.parameters():  # away from the near-zero initial logits
        torch.nn.init.normal_(p, std=0.5)
    envs.close()
    return scorer, torch.from_numpy(obs), torch.from_numpy(info["action_mask"]), A


def test_a_move_scorer_scores_a_move_by_its_own_features_whatever_its_slot():
    """Swapping two actions' destination and measured entries swaps their logits and leaves every other logit as it was:
    one scorer serves every action; and the factor layout (each operator's own slots) does not reach the scores."""
    scorer, obs, mask, A = _scorer_and_obs()
    with torch.no_grad():
        logits = scorer.logits(obs)
        a, b = 3, 11
        swapped = obs.clone()
        dest = swapped[:, scorer.search_end + A:].view(-1, A, N_NEST)
        dest[:, [a, b]] = dest[:, [b, a]].clone()
        measured = swapped[:, scorer.search_end: scorer.search_end + A]
        measured[:, [a, b]] = measured[:, [b, a]].clone()
        again = scorer.logits(swapped)
        expected = logits.clone()
        expected[:, [a, b]] = logits[:, [b, a]]
        torch.testing.assert_close(again, expected, rtol=0, atol=1e-6)
        layout = obs.clone()
        layout[:, : scorer.params_start] = torch.rand(layout.shape[0], scorer.params_start)
        torch.testing.assert_close(scorer.logits(layout), logits, rtol=0, atol=0)
        # and the current config's nest features do reach them
        nest = obs.clone()
        nest[:, scorer.params_start + N_PARAMS] += 0.5
        assert not torch.allclose(scorer.logits(nest), logits)
        assert (scorer.masked_logits(obs, mask)[~mask] < -1e7).all()


def test_a_move_scorer_refuses_an_observation_too_small_for_it():
    from schedule_gym.baselines.networks import MoveScorer, network

    with pytest.raises(ValueError, match="observation='move_features'"):
        MoveScorer(100, 76)
    with pytest.raises(ValueError, match="architecture must be one of"):
        network("Transformer", 100, 4, 8, 1)


def test_ppo_trains_a_move_scorer_and_its_checkpoint_plays_again(tmp_path):
    from schedule_gym.baselines.ppo_vec import Args, load_checkpoint, make_envs, train

    kwargs = {"tasks": TASKS, "backend_options": PROFILE, "observation": "move_features", "episode": "session",
              "budget_measurements": 6, "reward": "best_improvement"}
    path = train(Args(env_kwargs=json.dumps(kwargs), num_envs=16, num_steps=8, total_timesteps=256,
                      architecture="MoveScorer", hidden_size=16, tensorboard=False, out=str(tmp_path)))
    policy = load_checkpoint(path)
    assert type(policy.agent).__name__ == "MoveScorer" and policy.meta["architecture"]["class"] == "MoveScorer"
    envs = make_envs("schedule_gym/MultiTask-v0", 16, kwargs)
    obs, info = envs.reset(seed=0)
    actions = policy.act(obs, info["action_mask"])
    assert info["action_mask"][np.arange(16), actions].all()
    envs.close()
    with pytest.raises(ValueError, match="architecture must be one of"):
        train(Args(architecture="Transformer"))
    meta = json.loads(path.with_suffix(".json").read_text())
    meta["architecture"]["class"] = "Transformer"
    with pytest.raises(ValueError, match="names the architecture 'Transformer'"):
        load_checkpoint(path, meta=meta)
