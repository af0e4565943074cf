"""Learning curves of PPO on the native vector environment: episode return, validation and held-out regret
against training steps, for several training seeds, and the checkpoint chosen on the validation split.

One file, top to bottom (CleanRL style): arguments, per training seed the training run, per kept checkpoint
the validation and held-out scores, the choice, saving. Training is ``python -m
schedule_gym.benchmark.ppo_tuner``'s (the protocol's training split, layout and mock profile) with feature
observations, session episodes of the budget track's measurements from ``s0`` and reward
``best_improvement:0.005``, keeping a checkpoint every ``--checkpoint-every`` updates (``keep_checkpoints``).

* **Undiscounted** (``--gamma 1``, the default here): the tuner is scored on the best config it ever
  measured, and the session's ``best_improvement`` rewards sum to the log speed-up of that best over ``s0``
  (less the measurement costs), so the undiscounted return is the score. A discount below 1 weighs early
  improvements more than late ones and trains a climber that stops short (measured: at ``gamma`` 0.99 the
  training return fell from 3.7 to 3.2 after 0.3 million steps, at 1.0 it stayed at 3.6-3.8).
* Each kept checkpoint plays the protocol's **validation** split (:meth:`~schedule_gym.benchmark.Protocol.validation_tasks`:
  layers of networks in neither split) and its **held-out** split at the budget track, as ``schedule-gym
  benchmark --policy`` does (:func:`schedule_gym.benchmark.run_protocol` with
  :func:`~schedule_gym.benchmark.ppo_tuner.ppo_tuner`), for ``--eval-seeds``: IQM and median regret with their
  stratified-bootstrap intervals. The **chosen** checkpoint of a seed is the one with the lowest validation
  IQM; the held-out scores are reported, never used to choose. ``--ship PATH`` copies the chosen checkpoint
  of all seeds (lowest validation IQM) to ``PATH`` with its sidecars (the leak check's ``.meta.json``
  records the training tasks, and the validation tasks it was chosen on).

Random search's score at the same track is run once on both splits as the reference line.

    nice .venv/bin/python examples/learning_curves.py --protocol v1 --budget-track 64 --train-seeds 1 2 3 \\
        --total-timesteps 2000000 --num-envs 1024 --checkpoint-every 6 --eval-seeds 0 1 2

writes ``examples/results/learning-curves/<protocol>-b<track>.json`` (``-<architecture>`` added for another
network than ``Agent``, ``-synth<N>`` with ``--synthetic N`` (synthetic layers added to the training split,
:mod:`schedule_gym.benchmark.synthetic`), ``-from-<checkpoint>`` with ``--init-from``, ``-warm<K>`` with
``--critic-warmup K`` and ``-ent<X>`` with an ``--ent-coef`` other than the default; per training seed: the
progress rows ``[global step, mean episode return]``, per checkpoint its global step and validation and held-out
statistics, and the chosen checkpoint; random search's rows; the command, date and CPU). Regrets are mock
figures of the protocol's profile and do not depend on the CPU; the figure is drawn by
``examples/plot_results.py``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import shlex
import shutil
import sys
from pathlib import Path

from schedule_gym.baselines.imitation import OBSERVATION_OF, imitation_env_kwargs
from schedule_gym.baselines.ppo_vec import parse_args, train
from schedule_gym.benchmark import agent_tuner, get_protocol, run_protocol
from schedule_gym.benchmark.ppo_tuner import ppo_tuner
from schedule_gym.benchmark.pretrained import checkpoint_training_tasks, write_sidecar
from schedule_gym.hardware import cpu_name

STATISTICS = ("iqm_regret", "iqm_regret_interval", "median_regret", "median_regret_interval")


def progress_rows(run_dir: Path) -> list[list[float]]:
    """``[global step, mean return of the episodes ended in that update]`` of every update that ended one."""
    with open(run_dir / "progress.csv") as f:
        rows = [(int(r["global_step"]), float(r["episodic_return"])) for r in csv.DictReader(f)]
    return [[step, value] for step, value in rows if math.isfinite(value)]


def scores(tuner, protocol, name: str, track: int, seeds: list[int]) -> dict:
    """The statistics of ``tuner`` on the validation and the held-out split."""
    return {split: {key: row[key] for key in STATISTICS}
            for split in ("validation", "held_out")
            for row in [run_protocol(tuner, protocol, name, seeds=seeds, budget_track=track, split=split)]}


def ship(checkpoint: Path, out: Path, protocol, command: str, step: int, validation_iqm: float,
         artefact: str = "ppo_vec policy") -> None:
    """Copy ``checkpoint`` and its ``.json`` sidecar to ``out``, and write the leak check's sidecar (``step``: the
    training step, or the DAgger iteration, of the checkpoint) with the tasks the checkpoint records it was trained
    on (the protocol's training split, and any synthetic layers added to it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(checkpoint, out)
    shutil.copyfile(checkpoint.with_suffix(".json"), out.with_suffix(".json"))
    write_sidecar(out, protocol, checkpoint_training_tasks(checkpoint), artefact=artefact, command=command,
                  global_step=step, chosen_on={"split": "validation", "iqm_regret": validation_iqm,
                                               "tasks": [t.key for t in protocol.validation_tasks()]})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--budget-track", type=int, default=64)
    parser.add_argument("--train-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-timesteps", type=int, default=2_000_000)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--checkpoint-every", type=int, default=6, help="updates between kept checkpoints")
    parser.add_argument("--gamma", type=float, default=1.0, help="the discount (1: the score is the return)")
    parser.add_argument("--ent-coef", type=float, default=0.01, help="the entropy bonus' coefficient")
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--hidden-size", type=int, default=64, help="units per hidden layer (ppo_vec's)")
    parser.add_argument("--architecture", choices=sorted(OBSERVATION_OF), default="Agent",
                        help="the policy network, trained on the observation it reads (imitation.OBSERVATION_OF: Agent "
                             "features, MoveScorer move_features)")
    parser.add_argument("--init-from", default="", help="start every seed from this checkpoint (ppo_vec's --init-from: "
                                                       "fine-tune an imitation policy)")
    parser.add_argument("--critic-warmup", type=int, default=0, help="updates that train the critic alone first "
                                                                     "(ppo_vec's --critic-warmup)")
    parser.add_argument("--synthetic", type=int, default=0, help="synthetic layers added to the training split "
                                                                 "(imitation's --synthetic)")
    parser.add_argument("--synthetic-depthwise", type=float, default=0.0, help="their share of depthwise convolutions")
    parser.add_argument("--ship", type=Path, help="copy the checkpoint chosen on the validation split here")
    parser.add_argument("--runs", default="runs/learning-curves", help="the training runs' folder")
    parser.add_argument("--out", default="examples/results/learning-curves")
    args = parser.parse_args()
    protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    track = protocol.budget
    env_kwargs = imitation_env_kwargs(protocol, args.architecture, synthetic=args.synthetic,
                                      depthwise=args.synthetic_depthwise)
    result = {"protocol": protocol.to_dict(), "budget_track": track, "env_kwargs": {**env_kwargs, "layout": "protocol"},
              "eval_seeds": args.eval_seeds, "command": shlex.join(["python", *sys.argv]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_name(),
              "seeds": []}
    result["random"] = scores(agent_tuner("random"), protocol, "random", track, args.eval_seeds)
    print(f"random search: IQM regret {result['random']['validation']['iqm_regret']:.3f} (validation), "
          f"{result['random']['held_out']['iqm_regret']:.3f} (held out)", flush=True)
    chosen = []
    for seed in args.train_seeds:
        train_args, _ = parse_args([
            "--env-kwargs", json.dumps(env_kwargs), "--total-timesteps", str(args.total_timesteps),
            "--num-envs", str(args.num_envs), "--seed", str(seed), "--exp-name", f"curve_{protocol.name}_b{track}",
            "--checkpoint-every", str(args.checkpoint_every), "--keep-checkpoints", "--no-tensorboard",
            "--gamma", str(args.gamma), "--ent-coef", str(args.ent_coef), "--learning-rate", str(args.learning_rate),
            "--hidden-size", str(args.hidden_size), "--architecture", args.architecture, "--init-from", args.init_from,
            "--critic-warmup", str(args.critic_warmup),
            "--out", args.runs])
        final = train(train_args)
        checkpoints = sorted((int(p.stem.split("-")[1]), p) for p in final.parent.glob("model-*.safetensors"))
        points = []
        for step, path in checkpoints:
            stats = scores(ppo_tuner(path, protocol), protocol, f"ppo-vec@{step}", track, args.eval_seeds)
            points.append({"global_step": step, **stats})
            print(f"seed {seed}, {step:,} steps: IQM regret {stats['validation']['iqm_regret']:.3f} (validation), "
                  f"{stats['held_out']['iqm_regret']:.3f} (held out)", flush=True)
        best = min(range(len(points)), key=lambda i: points[i]["validation"]["iqm_regret"])
        chosen.append((points[best]["validation"]["iqm_regret"], seed, checkpoints[best]))
        result["seeds"].append({"seed": seed, "run": final.parent.name, "progress": progress_rows(final.parent),
                                "checkpoints": points, "chosen": points[best]["global_step"]})
    if args.ship:
        validation_iqm, seed, (step, path) = min(chosen)
        ship(path, args.ship, protocol, result["command"], step, validation_iqm)
        result["shipped"] = {"path": str(args.ship), "seed": seed, "global_step": step}
        print(f"shipped seed {seed}'s checkpoint at {step:,} steps (validation IQM {validation_iqm:.3f}) as {args.ship}")
    started_from = f"-from-{Path(args.init_from).stem}" if args.init_from else ""
    network = "" if args.architecture == "Agent" else f"-{args.architecture}"
    synthetic = f"-synth{args.synthetic}" if args.synthetic else ""
    settings = (f"-warm{args.critic_warmup}" if args.critic_warmup else "") + (
        f"-ent{args.ent_coef:g}" if args.ent_coef != parser.get_default("ent_coef") else "")
    out = Path(args.out) / f"{protocol.name}-b{track}{network}{synthetic}{started_from}{settings}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
