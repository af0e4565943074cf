"""Environment steps per second of PPO training (schedule_gym.baselines.ppo_vec: environment and learner
together) at several numbers of sub-environments N, next to the environment's own steps per second.

* the environment: ``MultiTask-v0`` on protocol v0's training split in its layout (what
  ``python -m schedule_gym.benchmark.ppo_tuner --protocol v0`` trains on), or ``--env-id`` / ``--env-kwargs``;
* PPO: ``ppo_vec``'s defaults (64x64 tanh actor and critic, 2 epochs, 4 minibatches; ``--architecture``: the
  networks, each on the observation it reads) with a fixed batch of ``--batch`` steps, so
  ``num_steps = batch / N``; its steps/s are counted from the end of the first update
  (torch's and the allocator's warm-up left out) to the end of the run, from the run's ``progress.csv``;
* the environment alone: the same vector environment stepped ``--env-steps`` times with legal actions (the
  argmax over the action mask of noise drawn beforehand: the cheapest masked choice), no learner;
* both on warm latency tables: the mock scores a chunk of a task's space the first time an episode reaches
  it, and random walks reach nearly every chunk of protocol v0's spaces in the first few hundred thousand
  steps; the script scores every table first and prints how long that took (once per environment it makes).

    taskset -c 0,1 python examples/benchmarks/ppo_throughput.py --steps 2000000 --threads 1 2
    python examples/benchmarks/ppo_throughput.py --sizes 1024 --threads 2 --architecture Agent MoveScorer \
        --env-kwargs '<session_env_kwargs("v1", 64) as JSON>'   # the feature policy and the move scorer

The goal it measures is 50,000 steps/s of training on two cores (20 million steps in under 7 minutes).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from schedule_gym.baselines.imitation import OBSERVATION_OF
from schedule_gym.baselines.ppo_vec import Args, make_envs, train
from schedule_gym.benchmark.oracle import all_latencies
from schedule_gym.benchmark.ppo_tuner import protocol_env_kwargs
from schedule_gym.envs.options import EnvOptions
from schedule_gym.hardware import cpu_identity


def score_tables(envs) -> float:
    """Score every latency table of ``envs`` whole (the mock scores a chunk the first time an episode reaches it;
    large tables come from its disk cache after the first run: ``schedule_gym.backends.mock.table_cache``);
    returns the seconds it took."""
    t0 = time.perf_counter()
    for table, space in zip(envs.core.tables, envs.core.spaces):
        all_latencies(table, space.size)
    return time.perf_counter() - t0


def env_steps_per_s(envs, vector_steps: int, seed: int = 0) -> float:
    """Environment steps per second of ``vector_steps`` steps of the vector environment alone (after 10 more)."""
    n = envs.num_envs
    noise = np.random.default_rng(seed).random((64, n, envs.single_action_space.n), dtype=np.float32)
    _, info = envs.reset(seed=seed)
    for i in range(10 + vector_steps):
        if i == 10:
            t0 = time.perf_counter()
        _, _, _, _, info = envs.step((noise[i % 64] * info["action_mask"]).argmax(axis=1))
    return n * vector_steps / (time.perf_counter() - t0)


def training_steps_per_s(run_dir: Path) -> float:
    """Steps per second from the end of a run's first update to its end (its ``progress.csv``)."""
    with open(run_dir / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        raise ValueError(f"{run_dir} ran one update only: give more --steps than --batch")
    first, last = rows[0], rows[-1]
    return (int(last["global_step"]) - int(first["global_step"])) / (float(last["wall_time_s"]) - float(first["wall_time_s"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="numbers of sub-environments N")
    parser.add_argument("--threads", type=int, nargs="+", default=[Args.torch_threads], help="torch.set_num_threads values")
    parser.add_argument("--steps", type=int, default=1_000_000, help="environment steps of each training run")
    parser.add_argument("--batch", type=int, default=16384, help="steps per update (num_envs * num_steps)")
    parser.add_argument("--env-steps", type=int, default=200, help="vector steps of the environment-alone measurement")
    parser.add_argument("--env-id", default="schedule_gym/MultiTask-v0")
    parser.add_argument("--env-kwargs", default=None, help="JSON (default: protocol v0's training split)")
    parser.add_argument("--architecture", nargs="+", choices=sorted(OBSERVATION_OF), default=None,
                        help="train each of these policy networks in turn, each on the observation it reads "
                             "(imitation.OBSERVATION_OF: Agent features, MoveScorer move_features); default: "
                             "ppo_vec's Agent on --env-kwargs' own observation")
    parser.add_argument("--out", help="also append the rows to this JSON-lines file")
    args = parser.parse_args()
    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else protocol_env_kwargs("v0")
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    print(f"CPU: {cpu_identity().describe()}; torch {torch.__version__}; {date}", flush=True)
    print(f"{args.env_id} {json.dumps(env_kwargs)[:120]}...; {args.steps:,} steps per run, batch {args.batch}")
    print("scoring s: scoring every latency table once, before the runs (a run pays it in its first steps)")
    print(f"{'N':>6} {'steps':>6} {'threads':>7} {'network':>12} {'PPO steps/s':>12} {'env steps/s':>12} "
          f"{'env share':>9} {'scoring s':>9}")
    rows = []
    games = ([(Args.architecture, env_kwargs)] if args.architecture is None else
             [(name, {**env_kwargs, "observation": OBSERVATION_OF[name]}) for name in args.architecture])
    for n in args.sizes:
        for architecture, kwargs in games:
            envs = make_envs(args.env_id, n, kwargs)
            scoring_s = score_tables(envs)
            env_rate = env_steps_per_s(envs, args.env_steps)
            for threads in args.threads:
                with tempfile.TemporaryDirectory() as out:
                    run = Args(env_id=args.env_id, env_kwargs=json.dumps(kwargs), num_envs=n,
                               num_steps=max(1, args.batch // n), total_timesteps=args.steps, torch_threads=threads,
                               architecture=architecture, tensorboard=False, out=out)
                    rate = training_steps_per_s(train(run, envs).parent)
                row = {"num_envs": n, "num_steps": run.num_steps, "torch_threads": threads,
                       "ppo_steps_per_s": round(rate), "env_steps_per_s": round(env_rate),
                       "scoring_s": round(scoring_s, 1), "cpu": cpu_identity().describe(), "date": date,
                       "total_timesteps": args.steps, "hidden_size": run.hidden_size, "architecture": architecture,
                       "observation": kwargs.get("observation", EnvOptions.observation), "update_epochs": run.update_epochs,
                       "num_minibatches": run.num_minibatches, "env_id": args.env_id}
                rows.append(row)
                print(f"{n:>6} {run.num_steps:>6} {threads:>7} {architecture:>12} {rate:>12,.0f} {env_rate:>12,.0f} "
                      f"{rate / env_rate:>9.1%} {scoring_s:>9.1f}", flush=True)
            envs.close()
    if args.out:
        with open(args.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
