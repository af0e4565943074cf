"""Write the golden rollouts of every registered id (tests/golden/rollouts-v0.npz) that test_golden_rollouts.py
replays: observations, rewards, episode ends and the numbers of each step's info, for seeded random-action
rollouts of the single and the vector environments, on the noise-free mock with a named profile and on the
shipped tables.

The file was written once, from the code before the episode core was rewritten (issue 23), so that the
rewritten environments are checked against what the old ones did, to the bit. Run it again only when an
environment's dynamics change on purpose (and then bump the id's version):

    python tests/golden/make_rollouts.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import schedule_gym  # noqa: F401  (registers the ids)

OUT = Path(__file__).with_name("rollouts-v0.npz")
PROFILE = {"profile": "znver5-2core-fitted"}
STEPS = 120
INFO_NUMBERS = ("latency_s", "best_latency_s", "num_measurements", "legal", "new_measurement")

#: (case name, env id, kwargs): small tasks, every reward, observation and start, budgets, noise
CASES: list[tuple[str, str, dict]] = [
    ("gemm", "schedule_gym/Gemm-v0", {"m": 64, "k": 32, "n": 64, "backend_options": PROFILE}),
    ("gemm-1024", "schedule_gym/Gemm-v0", {"backend_options": PROFILE, "start": "random"}),
    ("gemm-log2-shape-prev", "schedule_gym/Gemm-v0", {"m": 128, "k": 64, "n": 256, "backend_options": PROFILE,
                                                      "observation": "log2", "include_shape": True,
                                                      "reward": "log_speedup_prev"}),
    ("gemm-s0-budget", "schedule_gym/Gemm-v0", {"m": 64, "k": 64, "n": 64, "backend_options": PROFILE,
                                                "reward": "log_speedup_s0", "budget_measurements": 12,
                                                "illegal_action_penalty": -0.5}),
    ("gemm-fraction-ref", "schedule_gym/Gemm-v0", {"m": 32, "k": 32, "n": 32, "backend_options": PROFILE,
                                                   "budget_fraction": 0.05, "reward_ref_latency_s": 1e-3}),
    ("noisy", "schedule_gym/GemmNoisy-v0", {"m": 64, "k": 32, "n": 64,
                                            "backend_options": {**PROFILE, "noise": 0.05}}),
    ("tiling-conv", "schedule_gym/Tiling-v0", {"task": "resnet50/conv6", "backend_options": PROFILE, "start": "random"}),
    ("tiling-bmm", "schedule_gym/Tiling-v0", {"task": "bert-base/attn-qk", "backend_options": PROFILE}),
    ("conv2d", "schedule_gym/Conv2d-v0", {"h": 14, "w": 14, "ci": 16, "co": 32, "stride": 2, "backend_options": PROFILE}),
    ("conv2d-dw", "schedule_gym/Conv2d-v0", {"h": 28, "w": 28, "ci": 32, "co": 32, "groups": 32,
                                             "backend_options": PROFILE, "start": "random"}),
    ("bmm", "schedule_gym/BatchMatmul-v0", {"b": 4, "m": 32, "k": 16, "n": 32, "backend_options": PROFILE}),
    ("dense", "schedule_gym/Dense-v0", {"m": 16, "k": 64, "n": 48, "backend_options": PROFILE,
                                        "reward": "log_speedup_prev"}),
    ("gemm-table", "schedule_gym/GemmTable-v0", {"start": "random"}),
    ("conv2d-table", "schedule_gym/Conv2dTable-v0", {"reward": "log_speedup_s0"}),
    ("schedule", "schedule_gym/Schedule-v0", {"task": "gemm-64", "backend_options": PROFILE}),
    ("schedule-random", "schedule_gym/Schedule-v0", {"task": "resnet50/conv6", "backend_options": PROFILE,
                                                     "start": "random", "reward": "log_speedup_prev"}),
    ("multitask", "schedule_gym/MultiTask-v0", {"tasks": "resnet50/fc,bert-base/attn-pv,resnet18/conv3",
                                                "backend_options": PROFILE}),
    ("multitask-budget", "schedule_gym/MultiTask-v0", {"tasks": "bert-base", "backend_options": PROFILE,
                                                       "start": "random", "budget_measurements": 10}),
    ("model", "schedule_gym/Model-v0", {"model": "resnet18", "steps_per_task": 5, "backend_options": PROFILE}),
]
#: (case name, env id, num_envs, kwargs) of the native vector environments
VECTOR_CASES: list[tuple[str, str, int, dict]] = [
    ("vec-gemm", "schedule_gym/Gemm-v0", 4, {"m": 64, "k": 32, "n": 64, "backend_options": PROFILE}),
    ("vec-gemm-random-prev", "schedule_gym/Gemm-v0", 5, {"m": 128, "k": 64, "n": 64, "backend_options": PROFILE,
                                                         "start": "random", "reward": "log_speedup_prev",
                                                         "max_episode_steps": 17}),
    ("vec-conv2d-budget", "schedule_gym/Conv2d-v0", 3, {"h": 14, "w": 14, "ci": 16, "co": 32,
                                                        "backend_options": PROFILE, "budget_measurements": 9,
                                                        "reward": "log_speedup_s0"}),
    ("vec-table", "schedule_gym/GemmTable-v0", 6, {"start": "random", "max_episode_steps": 23}),
    ("vec-tiling-log2", "schedule_gym/Tiling-v0", 4, {"task": "bert-base/ffn-up", "backend_options": PROFILE,
                                                      "observation": "log2", "include_shape": True}),
]


def _number(value: object) -> float:
    return np.nan if value is None else float(value)


def single_rollout(env_id: str, kwargs: dict, seed: int = 3) -> dict[str, np.ndarray]:
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    rows: dict[str, list] = {"obs": [obs], "reward": [np.nan], "terminated": [False], "truncated": [False],
                             "mask": [info["action_mask"]], "config": [repr(info["config"])]}
    for key in INFO_NUMBERS:
        rows[key] = [_number(info[key])]
    for step in range(STEPS):
        mask = info["action_mask"]
        # mostly legal moves, sometimes any action (illegal ones included)
        if rng.random() < 0.85 and mask.any():
            action = int(rng.choice(np.flatnonzero(mask)))
        else:
            action = int(rng.integers(env.action_space.n))
        obs, reward, terminated, truncated, info = env.step(action)
        rows["obs"].append(obs)
        rows["reward"].append(float(reward))
        rows["terminated"].append(bool(terminated))
        rows["truncated"].append(bool(truncated))
        rows["mask"].append(info["action_mask"])
        rows["config"].append(repr(info["config"]))
        for key in INFO_NUMBERS:
            rows[key].append(_number(info[key]))
        if terminated or truncated:
            obs, info = env.reset()
            rows["obs"].append(obs)
            rows["reward"].append(np.nan)
            rows["terminated"].append(False)
            rows["truncated"].append(False)
            rows["mask"].append(info["action_mask"])
            rows["config"].append(repr(info["config"]))
            for key in INFO_NUMBERS:
                rows[key].append(_number(info[key]))
    env.close()
    return {k: np.array(v) for k, v in rows.items()}


def vector_rollout(env_id: str, num_envs: int, kwargs: dict, seed: int = 5) -> dict[str, np.ndarray]:
    envs = gym.make_vec(env_id, num_envs=num_envs, **kwargs)
    rng = np.random.default_rng(seed)
    obs, info = envs.reset(seed=seed)
    rows: dict[str, list] = {"obs": [obs], "reward": [np.zeros(num_envs)], "terminated": [np.zeros(num_envs, bool)],
                             "truncated": [np.zeros(num_envs, bool)], "mask": [info["action_mask"]]}
    for key in ("latency_s", "best_latency_s", "num_measurements", "legal", "new_measurement", "index", "best_index"):
        rows[key] = [np.asarray(info[key], dtype=np.float64)]
    for _ in range(STEPS):
        mask = info["action_mask"]
        actions = np.array([int(rng.choice(np.flatnonzero(m))) if rng.random() < 0.85 and m.any()
                            else int(rng.integers(mask.shape[1])) for m in mask])
        obs, reward, terminated, truncated, info = envs.step(actions)
        rows["obs"].append(obs)
        rows["reward"].append(reward)
        rows["terminated"].append(terminated)
        rows["truncated"].append(truncated)
        rows["mask"].append(info["action_mask"])
        for key in ("latency_s", "best_latency_s", "num_measurements", "legal", "new_measurement", "index", "best_index"):
            rows[key].append(np.asarray(info[key], dtype=np.float64))
    envs.close()
    return {k: np.array(v) for k, v in rows.items()}


def all_rollouts() -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, env_id, kwargs in CASES:
        for key, value in single_rollout(env_id, kwargs).items():
            out[f"{name}/{key}"] = value
    for name, env_id, num_envs, kwargs in VECTOR_CASES:
        for key, value in vector_rollout(env_id, num_envs, kwargs).items():
            out[f"{name}/{key}"] = value
    return out


if __name__ == "__main__":
    arrays = all_rollouts()
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {len(arrays)} arrays to {OUT} ({OUT.stat().st_size / 1024:.0f} KiB)", file=sys.stderr)
