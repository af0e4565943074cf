"""Does PPO overfit less when it trains on more tasks? v1's training split plus synthetic layers.

The learning curves (``examples/learning_curves.py``) show the vector-environment PPO learning v1's 26
training tasks and losing on the validation and held-out splits after 0.2-0.3 million steps. This trial adds
``--synthetic`` layers of random shapes to the training tasks: convolutions (3x3 or 1x1, stride 1 or 2,
groups 1: no depthwise layer, which v1's training split does not have either), dense layers and attention
score batch matmuls, drawn with a fixed seed, each one whose computation is in neither v1's held-out nor its
validation split nor already drawn, and that fits v1's layout. It trains as the learning curves do (seed
``--seed``, undiscounted, entropy bonus 0.05, sessions of 64 measurements), then plays every kept checkpoint
on the validation and held-out splits at 64 measurements, seeds 0-2, and prints their IQM regrets.

    nice .venv/bin/python examples/benchmarks/ppo_synthetic_tasks.py --synthetic 200 --seed 1

A policy trained on these tasks is not a v1 leaderboard entry as it stands: the protocol's training split is
ResNet-50 and BERT-base, and the other rows learnt from those alone.
"""

from __future__ import annotations

import argparse
import json

from schedule_gym.baselines.ppo_vec import parse_args, train
from schedule_gym.benchmark import get_protocol, run_protocol
from schedule_gym.benchmark.ppo_tuner import ppo_tuner, session_env_kwargs
from schedule_gym.benchmark.synthetic import synthetic_layers
from schedule_gym.hardware import cpu_name

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=200, help="synthetic layers added to the training split")
    parser.add_argument("--seed", type=int, default=1, help="the training seed")
    parser.add_argument("--total-timesteps", type=int, default=589_824)
    parser.add_argument("--out", default="runs/ppo-synthetic")
    args = parser.parse_args()
    protocol = get_protocol("v1").at_budget(64)
    env = session_env_kwargs(protocol)
    env["tasks"] = [t.name for t in protocol.train_tasks()] + synthetic_layers(protocol, args.synthetic)
    print(f"{len(env['tasks'])} training tasks; CPU {cpu_name()}; mock {protocol.profile}", flush=True)
    train_args, _ = parse_args([
        "--env-kwargs", json.dumps(env), "--total-timesteps", str(args.total_timesteps), "--num-envs", "1024",
        "--gamma", "1.0", "--ent-coef", "0.05", "--seed", str(args.seed), "--exp-name", f"synthetic{args.synthetic}",
        "--checkpoint-every", "6", "--keep-checkpoints", "--no-tensorboard", "--out", args.out])
    final = train(train_args)
    for step, path in sorted((int(p.stem.split("-")[1]), p) for p in final.parent.glob("model-*.safetensors")):
        line = [f"{step:,} steps:"]
        for split in ("validation", "held_out"):
            row = run_protocol(ppo_tuner(path, protocol), protocol, f"synthetic@{step}", seeds=[0, 1, 2],
                               budget_track=64, split=split)
            low, high = row["iqm_regret_interval"]
            line.append(f"{split} IQM {row['iqm_regret']:.3f} [{low:.3f}, {high:.3f}]")
        print(*line, flush=True)
