"""Model-v0: an episode visits every task of a model; rewards follow the model's estimated latency."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.envs import ModelEnv
from schedule_gym.tasks import conv2d, dense, get_suite


def _rollout(env: ModelEnv, seed: int) -> tuple[list[int], list[float], list[dict]]:
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    tasks, rewards, infos = [info["task_index"]], [], [info]
    while True:
        action = int(rng.choice(np.flatnonzero(env.action_masks())))
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs) and not terminated
        tasks.append(info["task_index"])
        rewards.append(reward)
        infos.append(info)
        if truncated:
            return tasks, rewards, infos


def test_an_episode_visits_each_task_in_turn_and_rewards_sum_to_the_relative_gain() -> None:
    env = ModelEnv("resnet18", steps_per_task=5)
    tasks, rewards, infos = _rollout(env, 0)
    n = len(get_suite("resnet18"))
    assert len(rewards) == 5 * n
    # the agent stays 5 steps on each task, in order (the info after the 5th step names the next task)
    assert tasks == [0] + [min(i // 5, n - 1) for i in range(1, 5 * n)] + [n - 1]
    start, end = infos[0]["start_latency_s"], infos[-1]["estimated_latency_s"]
    # every legal step's reward is the drop of sum(weight x best) over the start: they sum to the gain
    assert sum(rewards) == pytest.approx(1.0 - end / start, rel=1e-9, abs=1e-12)
    assert end <= start and all(r >= 0 for r in rewards)
    # the estimate is the weighted sum of the tasks' bests
    weights = np.array([s.weight for s in get_suite("resnet18")])
    assert env.estimated_latency_s == pytest.approx(float(np.dot(weights, env._best)))


def test_same_seed_same_episode_and_check_env() -> None:
    a = _rollout(ModelEnv("resnet18", steps_per_task=3), 7)
    b = _rollout(ModelEnv("resnet18", steps_per_task=3), 7)
    assert a[0] == b[0] and a[1] == b[1]
    check_env(ModelEnv("resnet18", steps_per_task=2), skip_render_check=True)


def test_registered_and_built_from_task_pairs() -> None:
    env = gymnasium.make("schedule_gym/Model-v0", model="resnet18", steps_per_task=2)
    obs, info = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape and info["task_index"] == 0
    pairs = [(conv2d(1, 8, 8, 4, 8, 3, padding=1), 3), (dense(4, 16, 8), 1)]
    env = ModelEnv(pairs, steps_per_task=2)
    _, info = env.reset(seed=0)
    assert info["estimated_latency_s"] == pytest.approx(3 * env._best[0] + env._best[1])
    # a heavier task's share of the estimate is observed
    obs, _ = env.reset(seed=0)
    assert obs[-1] == pytest.approx(3 * env._best[0] / env.estimated_latency_s, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
        ({"model": "resnet18", "steps_per_task": 0}, "steps_per_task must be a positive int"),
        ({"model": [(dense(4, 4, 4), 0)]}, "positive weight"),
        ({"model": []}, "at least one task"),
    ],
)
def test_bad_arguments_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        ModelEnv(**kwargs)
