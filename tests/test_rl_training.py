"""SB3 and sb3-contrib train on the environment without adapters; seeded runs repeat exactly."""

import gymnasium
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import A2C, DQN, PPO

import schedule_gym  # noqa: F401

pytestmark = pytest.mark.slow

ALGOS = {
    "PPO": (PPO, {"n_steps": 64, "batch_size": 32, "n_epochs": 2}),
    "A2C": (A2C, {"n_steps": 8}),
    "DQN": (DQN, {"learning_starts": 64, "buffer_size": 1000, "train_freq": 4}),
    "MaskablePPO": (MaskablePPO, {"n_steps": 64, "batch_size": 32, "n_epochs": 2}),
}


def train_and_roll_out(name, seed, timesteps=256):
    torch.set_num_threads(1)
    algo, kwargs = ALGOS[name]
    env = gymnasium.make("schedule_gym/Gemm-v0", m=64, k=32, n=64, reward="log_speedup_prev", max_episode_steps=32)
    model = algo("MlpPolicy", env, seed=seed, device="cpu", **kwargs)
    model.learn(total_timesteps=timesteps)
    obs, info = env.reset(seed=seed)
    rewards, configs = [], []
    for _ in range(32):
        if name == "MaskablePPO":
            action, _ = model.predict(obs, deterministic=True, action_masks=get_action_masks(env))
        else:
            action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, info = env.step(int(action))
        rewards.append(reward)
        configs.append(info["config"])
        if terminated or truncated:
            break
    params = np.concatenate([p.detach().numpy().ravel() for p in model.policy.parameters()])
    return rewards, configs, params, info


@pytest.mark.parametrize("name", list(ALGOS))
def test_trains_and_repeats_with_the_same_seed(name):
    rewards, configs, params, info = train_and_roll_out(name, seed=0)
    assert len(rewards) == 32 and all(np.isfinite(rewards))
    assert info["best_latency_s"] is not None
    again = train_and_roll_out(name, seed=0)
    assert rewards == again[0] and configs == again[1]
    np.testing.assert_array_equal(params, again[2])


def test_maskable_ppo_never_takes_an_illegal_action():
    env = gymnasium.make("schedule_gym/Gemm-v0", m=64, k=32, n=64, max_episode_steps=32)
    model = MaskablePPO("MlpPolicy", env, seed=1, n_steps=64, batch_size=32, n_epochs=1, device="cpu")
    model.learn(total_timesteps=128)
    obs, info = env.reset(seed=1)
    for _ in range(64):
        action, _ = model.predict(obs, action_masks=get_action_masks(env))
        obs, reward, terminated, truncated, info = env.step(int(action))
        assert info["legal"]
        if truncated:
            obs, info = env.reset()


def test_maskable_ppo_trains_on_the_schedule_env_and_respects_swap_masks():
    env = gymnasium.make("schedule_gym/Schedule-v0", task="gemm-64x32x64", max_episode_steps=32)
    model = MaskablePPO("MlpPolicy", env, seed=1, n_steps=64, batch_size=32, n_epochs=1, device="cpu")
    model.learn(total_timesteps=128)
    obs, info = env.reset(seed=1)
    swaps = 0
    for _ in range(64):
        action, _ = model.predict(obs, action_masks=get_action_masks(env))
        obs, reward, terminated, truncated, info = env.step(int(action))
        assert info["legal"]
        swaps += int(action) >= env.unwrapped.space.n_tile_actions
        if truncated:
            obs, info = env.reset()
    assert swaps > 0  # the policy uses the loop moves too
