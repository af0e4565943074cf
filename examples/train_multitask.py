"""Train MaskablePPO (or plain PPO) on a protocol's training tasks, then evaluate it on the held-out tasks.

One file, top to bottom (CleanRL style): arguments, environment, agent, training, saving. The environment
is ``MultiTaskEnv`` on the protocol's training split (ResNet-50 + BERT-base layers for ``v0``), each
episode a task drawn at random, in the protocol's fixed layout so the policy also runs on held-out tasks.

    taskset -c 1 nice -n 19 .venv/bin/python examples/train_multitask.py --protocol v0 --timesteps 8192
    taskset -c 1 nice -n 19 .venv/bin/schedule-gym benchmark --protocol v0 \\
        --policy runs/multitask/v0__maskable_ppo__0/model.zip --leaderboard leaderboard/v0.jsonl

``leaderboard/v0-maskable_ppo-8k.zip`` is this script's model with its defaults (protocol v0, 8,192 steps,
seed 0); ``leaderboard/v0-maskable_ppo-1m.zip`` is ``--timesteps 1048576 --num-envs 64 --n-steps 64
--batch-size 512``: a million steps through the native vector environment (:class:`SB3VecEnv`);
``leaderboard/v0-ppo-8k.zip`` is the 8,192-step one with ``--algo ppo``: SB3's PPO, which never sees the
action mask, so it learns to avoid illegal moves (a no-op with a penalty) from the reward alone. The model
is written with SB3's ``save`` (a zip of JSON, PyTorch weights and SB3's cloudpickled entries);
``schedule-gym benchmark --policy`` loads it with :func:`schedule_gym.benchmark.load_policy`, which unpickles
nothing (see its docstring).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.pretrained import write_sidecar
from schedule_gym.envs.sb3_vec import SB3VecEnv

ALGOS = {"maskable_ppo": MaskablePPO, "ppo": PPO}


@dataclass
class Args:
    protocol: str = "v0"
    """the protocol whose training split is trained on"""
    timesteps: int = 8192
    """environment steps in total"""
    seed: int = 0
    algo: str = "maskable_ppo"
    """maskable_ppo (sb3-contrib, illegal moves masked) or ppo (SB3, no masks)"""
    episode_steps: int = 50
    """moves per episode (the TimeLimit)"""
    num_envs: int = 0
    """0: one MultiTaskEnv; N: N sub-environments of the native vector environment through SB3VecEnv"""
    n_steps: int = 512
    """PPO rollout length"""
    batch_size: int = 128
    learning_rate: float = 3e-4
    ent_coef: float = 0.01
    out: str = "runs/multitask"
    """the run folder is <out>/<protocol>__<algo>__<seed>"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = Args(**vars(parser.parse_args()))
    if args.algo not in ALGOS:
        parser.error(f"--algo must be one of {', '.join(ALGOS)}, got {args.algo!r}")
    if args.num_envs < 0:
        parser.error(f"--num-envs must be 0 (one environment) or positive, got {args.num_envs}")
    return args


if __name__ == "__main__":
    args = parse_args()
    run_name = f"{args.protocol}__{args.algo}__{args.seed}"
    run_dir = Path(args.out) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # small networks on shared cores: one thread is fastest

    # ---- environment: the training split, in the protocol's layout (shared with the held-out split); one
    # environment, or the native vector environment (its sub-environments seeded seed + i) through the adapter
    protocol = get_protocol(args.protocol)
    if args.num_envs:
        env = SB3VecEnv.make("schedule_gym/MultiTask-v0", args.num_envs, max_episode_steps=args.episode_steps,
                             **protocol.env_kwargs("train"))
        env.seed(args.seed)
    else:
        env = gym.make("schedule_gym/MultiTask-v0", max_episode_steps=args.episode_steps,
                       **protocol.env_kwargs("train"))
        env.reset(seed=args.seed)
    print(f"{run_name}: {len(protocol.train_tasks())} training tasks, {args.num_envs or 1} environment(s), "
          f"observation {env.observation_space.shape}, "
          f"{env.action_space.n} actions")

    # ---- agent
    model = ALGOS[args.algo]("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.batch_size,
                             learning_rate=args.learning_rate, ent_coef=args.ent_coef, seed=args.seed,
                             device="cpu", verbose=0)

    # ---- training
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    wall_s = time.perf_counter() - t0
    rewards = [ep["r"] for ep in model.ep_info_buffer]
    print(f"trained {args.timesteps} steps in {wall_s:.0f} s ({args.timesteps / max(wall_s, 1e-9):.0f} steps/s)"
          + (f"; mean episode return of the last {len(rewards)}: {np.mean(rewards):.3f}" if rewards else ""))

    # ---- saving
    model.save(run_dir / "model.zip")
    (run_dir / "algo.txt").write_text(f"{args.algo}\n")
    # the sidecar model.meta.json: the training tasks' keys, which the benchmark checks against held-out ones
    write_sidecar(run_dir / "model.zip", protocol, protocol.train_tasks(), artefact=f"{args.algo} policy",
                  command=shlex.join(["python", *sys.argv]), timesteps=args.timesteps, seed=args.seed)
    print(f"saved {run_dir / 'model.zip'}; evaluate on the held-out tasks with\n"
          f"  schedule-gym benchmark --protocol {args.protocol} --policy {run_dir / 'model.zip'}")
    env.close()
