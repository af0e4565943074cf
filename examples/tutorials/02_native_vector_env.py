"""Train on the native vector environment

`gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=N)` returns `TilingVectorEnv`, which steps all N
environments with NumPy array operations instead of N Python environments; its trajectories equal N
independent `TilingEnv`s given the same seeds and actions. `SB3VecEnv` hands it to Stable-Baselines3.

    python examples/tutorials/02_native_vector_env.py
"""

# %% [markdown]
# ## Stepping N environments at once
# The vector environment follows Gymnasium's `VectorEnv` API: batched observations, rewards and flags,
# and `action_masks()` for all environments at once (one row of legal moves each).

import gymnasium
import numpy as np
import torch
from sb3_contrib import MaskablePPO

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.envs.sb3_vec import SB3VecEnv

NUM_ENVS = 64
SEED = 0
torch.set_num_threads(1)

envs = gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=NUM_ENVS, m=256, k=256, n=256, start="random")
print(type(envs).__name__, envs.num_envs, "environments,", envs.single_action_space)
obs, info = envs.reset(seed=SEED)
rng = np.random.default_rng(SEED)
for _ in range(100):
    masks = envs.action_masks()                     # (NUM_ENVS, n_actions) booleans
    actions = np.array([rng.choice(np.flatnonzero(row)) for row in masks])  # a random legal move each
    obs, rewards, terminated, truncated, info = envs.step(actions)
print(f"after 100 steps: mean reward {rewards.mean():.2f}, observations {obs.shape}")
envs.close()

# %% [markdown]
# ## Training with Stable-Baselines3
# SB3 does not take a Gymnasium `VectorEnv`; `SB3VecEnv.make` builds the native vector environment in
# the autoreset mode SB3 expects and wraps it. `MaskablePPO` reads the masks through it.

venv = SB3VecEnv.make("schedule_gym/Gemm-v0", num_envs=NUM_ENVS, m=256, k=256, n=256,
                      reward="log_speedup_prev", max_episode_steps=50)
model = MaskablePPO("MlpPolicy", venv, n_steps=16, batch_size=256, n_epochs=2, seed=SEED, device="cpu")
model.learn(total_timesteps=4 * 16 * NUM_ENVS)
print(f"trained {model.num_timesteps} timesteps over {NUM_ENVS} environments")

# %% [markdown]
# Noisy or real backends (`GemmNoisy-v0`, `GemmTVM-v0`) have no native vector environment: use
# `gymnasium.make_vec(..., vectorization_mode="sync")` or `"async"` for them.
