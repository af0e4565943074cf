"""Train MaskablePPO on a suite

Train sb3-contrib's `MaskablePPO` on every layer of a network at once (`schedule_gym/MultiTask-v0`),
then let the trained policy tune a layer with a small measurement budget, next to random search at the
same budget. Everything runs on the mock backend (an analytic CPU model), so it runs quickly; the
budgets here are far too small to learn much: raise `TIMESTEPS` for a real run.

    python examples/tutorials/01_maskable_ppo_on_a_suite.py
"""

# %% [markdown]
# ## The environment
# `MultiTask-v0` draws one task of its list at every `reset`. Its observation describes the operator and
# every dimension in fixed slots, and its action list is padded to the largest task's (padded actions are
# always masked), so one policy serves every layer. `tasks` takes suite names (`schedule-gym tasks`
# lists them); BERT-base has five distinct layers.

import gymnasium
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks

import schedule_gym  # noqa: F401  (registers the environments)

TIMESTEPS = 1024  # environment steps of training
BUDGET = 50       # new measurements per tuning run
SEED = 0

torch.set_num_threads(1)  # small networks: one thread is fastest
env = gymnasium.make("schedule_gym/MultiTask-v0", tasks="bert-base", max_episode_steps=50)
obs, info = env.reset(seed=SEED)
print(f"observation {env.observation_space.shape}, {env.action_space.n} actions, first task {info['task']}")

# %% [markdown]
# ## Training
# `MaskablePPO` asks the environment for `action_masks()` at every step, so it never picks a move that
# would halve a factor that is not divisible. The default reward, `log_speedup_prev`, is the log of the
# speed-up over the previous state: of order one on every layer.

model = MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, seed=SEED, device="cpu", verbose=0)
model.learn(total_timesteps=TIMESTEPS)
print(f"trained {TIMESTEPS} steps")

# %% [markdown]
# ## Tuning a layer with the policy
# A tuning run is a measurement session with a budget: `budget_measurements` counts the distinct configs
# measured, and `reset(options={"task": ..., "keep_session": True})` starts a new episode on the same
# task without forgetting what was measured. The info dict carries the best config found so far.

task = "bert-base/ffn-up"
tuner = gymnasium.make("schedule_gym/MultiTask-v0", tasks="bert-base", budget_measurements=BUDGET,
                       max_episode_steps=50)
obs, info = tuner.reset(seed=SEED, options={"task": task})
for episode in range(20):  # episodes of up to 50 moves, until the budget is spent
    truncated = False
    while not truncated:
        action, _ = model.predict(obs, action_masks=get_action_masks(tuner), deterministic=False)
        obs, reward, terminated, truncated, info = tuner.step(int(action))
    if info["budget_exhausted"]:
        break
    obs, info = tuner.reset(options={"task": task, "keep_session": True})
policy_best = info["best_gflops"]
print(f"policy: best {policy_best:.1f} GFLOP/s after {info['num_measurements']} measurements on {task}")

# %% [markdown]
# ## Random search at the same budget
# The agents in `schedule_gym.agents` tune through the same measurement session; random search is the
# baseline every learned tuner has to beat.

from schedule_gym.agents import make_agent  # noqa: E402
from schedule_gym.envs import TilingEnv  # noqa: E402

random_result = make_agent("random", seed=SEED).run(TilingEnv(task), BUDGET)
print(f"random search: best {random_result.best_gflops:.1f} GFLOP/s after {random_result.num_measurements} measurements")
assert np.isfinite(policy_best) and policy_best > 0
