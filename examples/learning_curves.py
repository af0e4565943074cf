"""Learning curves of PPO on the native vector environment: episode return and held-out regret against
training steps, for several training seeds.

One file, top to bottom (CleanRL style): arguments, per training seed the training run, per kept checkpoint
the held-out score, saving. Training is ``python -m schedule_gym.benchmark.ppo_tuner``'s (the protocol's
training split, layout and mock profile) with the settings of the shipped ``ppo-vec-7m`` checkpoint —
feature observations, session episodes of the budget track's measurements from ``s0``, reward
``best_improvement:0.005`` — keeping a checkpoint every ``--checkpoint-every`` updates
(``keep_checkpoints``). Each kept checkpoint plays the protocol's held-out split at the budget track, as
``schedule-gym benchmark --policy`` does (:func:`schedule_gym.benchmark.run_protocol` with
:func:`~schedule_gym.benchmark.ppo_tuner.ppo_tuner`), for ``--eval-seeds``: IQM and median regret with their
stratified-bootstrap intervals. Random search's score at the same track is run once as the reference line.

    nice .venv/bin/python examples/learning_curves.py --protocol v1 --budget-track 64 --train-seeds 1 2 3 \\
        --total-timesteps 2000000 --num-envs 1024 --checkpoint-every 6 --eval-seeds 0 1 2

writes ``examples/results/learning-curves/<protocol>-b<track>.json`` (per training seed: the progress rows
``[global step, mean episode return]`` and per checkpoint its global step and held-out statistics; random
search's row; the command, date and CPU). Regrets are mock figures of the protocol's profile and do not depend
on the CPU; the figure is drawn by ``examples/plot_results.py``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import shlex
import sys
from pathlib import Path

from schedule_gym.baselines.ppo_vec import parse_args, train
from schedule_gym.benchmark import agent_tuner, get_protocol, run_protocol
from schedule_gym.benchmark.ppo_tuner import ppo_tuner, protocol_env_kwargs
from schedule_gym.hardware import cpu_name

#: the shipped ppo-vec-7m's environment settings but its budget (leaderboard/v0-ppo-vec-7m.json)
ENV_SETTINGS = {"observation": "features", "reward": "best_improvement:0.005", "episode": "session",
                "start": "s0"}
STATISTICS = ("iqm_regret", "iqm_regret_interval", "median_regret", "median_regret_interval")


def progress_rows(run_dir: Path) -> list[list[float]]:
    """``[global step, mean return of the episodes ended in that update]`` of every update that ended one."""
    with open(run_dir / "progress.csv") as f:
        rows = [(int(r["global_step"]), float(r["episodic_return"])) for r in csv.DictReader(f)]
    return [[step, value] for step, value in rows if math.isfinite(value)]


def held_out(tuner, protocol, name: str, track: int, seeds: list[int]) -> dict:
    row = run_protocol(tuner, protocol, name, seeds=seeds, budget_track=track)
    return {key: row[key] for key in STATISTICS}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--budget-track", type=int, default=64)
    parser.add_argument("--train-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-timesteps", type=int, default=2_000_000)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--checkpoint-every", type=int, default=6, help="updates between kept checkpoints")
    parser.add_argument("--runs", default="runs/learning-curves", help="the training runs' folder")
    parser.add_argument("--out", default="examples/results/learning-curves")
    args = parser.parse_args()
    protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    track = protocol.budget
    env_kwargs = {**ENV_SETTINGS, "budget_measurements": track, "max_episode_steps": 4 * track,
                  **protocol_env_kwargs(protocol)}
    result = {"protocol": protocol.to_dict(), "budget_track": track, "env_kwargs": {**env_kwargs, "layout": "protocol"},
              "eval_seeds": args.eval_seeds, "command": shlex.join(["python", *sys.argv]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_name(),
              "seeds": []}
    result["random"] = held_out(agent_tuner("random"), protocol, "random", track, args.eval_seeds)
    print(f"random search: IQM regret {result['random']['iqm_regret']:.3f}", flush=True)
    for seed in args.train_seeds:
        train_args, _ = parse_args([
            "--env-kwargs", json.dumps(env_kwargs), "--total-timesteps", str(args.total_timesteps),
            "--num-envs", str(args.num_envs), "--seed", str(seed), "--exp-name", f"curve_{protocol.name}_b{track}",
            "--checkpoint-every", str(args.checkpoint_every), "--keep-checkpoints", "--no-tensorboard",
            "--out", args.runs])
        final = train(train_args)
        checkpoints = sorted((int(p.stem.split("-")[1]), p) for p in final.parent.glob("model-*.safetensors"))
        points = []
        for step, path in checkpoints:
            stats = held_out(ppo_tuner(path, protocol), protocol, f"ppo-vec@{step}", track, args.eval_seeds)
            points.append({"global_step": step, **stats})
            print(f"seed {seed}, {step:,} steps: held-out IQM regret {stats['iqm_regret']:.3f}", flush=True)
        result["seeds"].append({"seed": seed, "run": final.parent.name, "progress": progress_rows(final.parent),
                                "checkpoints": points})
    out = Path(args.out) / f"{protocol.name}-b{track}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
