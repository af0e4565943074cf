"""MultiTaskEnv: a task per episode, one padded layout, masks padded, checkers and seeded reruns."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.envs import MultiTaskEnv, TaskLayout, TilingEnv
from schedule_gym.tasks import get_task

#: a dense, a batch matmul and a conv2d: three operators, 3, 4 and 7 dimensions, small spaces
TASKS = "resnet50/fc,bert-base/attn-pv,resnet18/conv10"


def make(**kwargs):
    return gym.make("schedule_gym/MultiTask-v0", tasks=TASKS, backend_options={"profile": "znver5-2core-fitted"},
                    **kwargs)


def test_checkers_pass():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make()
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(make(), warn=True)


def rollout(seed: int, steps: int = 120):
    env = make(max_episode_steps=30)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [(info["task"], obs.tolist())]
    for _ in range(steps):
        action = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((info["task"], obs.tolist(), reward, info["latency_s"]))
        if terminated or truncated:
            obs, info = env.reset()
            out.append((info["task"], obs.tolist()))
    return out


def test_seeded_rerun_is_equal_and_tasks_vary():
    first = rollout(3)
    assert first == rollout(3)
    assert len({row[0] for row in first}) > 1  # episodes drew different tasks


def test_layout_one_hot_shape_and_factors():
    env = MultiTaskEnv(tasks=TASKS, backend_options={"profile": "znver5-2core-fitted"})
    layout = env.layout
    assert layout.operators == ("batch_matmul", "conv2d", "dense")
    assert (layout.max_dims, layout.max_splits) == (7, 4)
    assert env.observation_space.shape == (3 + 7 * 6,)
    obs, info = env.reset(seed=0, options={"task": "bert-base/attn-pv"})
    task = get_task("bert-base/attn-pv")
    assert obs[:3].tolist() == [1.0, 0.0, 0.0]
    inner = TilingEnv(task, backend_options={"profile": "znver5-2core-fitted"})
    inner_obs, _ = inner.reset(seed=0)
    offset = 0
    for x, d in enumerate(task.dims):
        base = 3 + x * 6
        assert obs[base:base + d.splits].tolist() == inner_obs[offset:offset + d.splits].tolist()
        assert obs[base + d.splits:base + 4].tolist() == [0.0] * (4 - d.splits)
        assert obs[base + 4] == pytest.approx(np.log2(d.extent) / 24)
        assert obs[base + 5] == float(d.reduction)
        offset += d.splits
    assert not obs[3 + len(task.dims) * 6:].any()  # padded dimension slots


def test_padded_actions_are_masked_and_illegal():
    env = MultiTaskEnv(tasks=TASKS, backend_options={"profile": "znver5-2core-fitted"})
    assert env.action_space.n == max(env.task_env(t).space.n_actions for t in env.tasks)
    obs, info = env.reset(seed=0, options={"task": "resnet50/fc"})
    n = env.env.space.n_actions
    assert n < env.action_space.n
    mask = env.action_masks()
    assert mask.shape == (env.action_space.n,) and not mask[n:].any() and mask[:n].any()
    assert (info["action_mask"] == mask).all()
    count = env.env.session.num_measurements
    obs2, reward, terminated, truncated, info = env.step(n)  # the first padding action
    assert (reward, terminated, info["legal"]) == (-1.0, False, False)
    assert obs2.tolist() == obs.tolist() and env.env.session.num_measurements == count


def test_reset_options_and_bad_input():
    env = MultiTaskEnv(tasks=TASKS, backend_options={"profile": "znver5-2core-fitted"}, budget_measurements=3)
    _, info = env.reset(seed=1, options={"task": "resnet18/conv10", "start": "random"})
    assert info["task"] == "resnet18/conv10"
    with pytest.raises(ValueError, match="must be one of this environment's tasks"):
        env.reset(options={"task": "resnet50/conv2"})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"bogus": 1})
    with pytest.raises(ValueError, match="layout's operators"):
        MultiTaskEnv(tasks="bert-base/attn-pv", layout=TaskLayout(["dense"], 7, 4, 100))
    # keep_session continues the budget; a plain reset starts a new session
    env.reset(seed=0, options={"task": "resnet50/fc"})
    session = env.env.session
    for action in np.flatnonzero(env.action_masks())[:2]:
        env.step(int(action))
    spent = session.num_measurements
    env.reset(options={"task": "resnet50/fc", "keep_session": True})
    assert session.num_measurements == spent
    env.reset(options={"task": "resnet50/fc"})
    assert session.num_measurements == 1


def test_shared_layers_appear_once():
    env = MultiTaskEnv(tasks="resnet50/conv0,resnet18/conv0")  # the same stem convolution
    assert len(env.tasks) == 1


def test_maskable_ppo_trains_and_takes_legal_actions():
    from sb3_contrib import MaskablePPO

    env = make(max_episode_steps=20)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=64)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks())
        obs, _, _, _, info = env.step(int(action))
        assert info["legal"]
