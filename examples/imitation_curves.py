"""Imitation curves: DAgger on the oracle walker (``schedule_gym.baselines.imitation``), validation and held-out
regret against DAgger iterations for several training seeds, and the checkpoint chosen on the validation split.

The companion of ``examples/learning_curves.py`` (PPO), scored the same way: each iteration's checkpoint plays
the protocol's validation and held-out splits at the budget track, as ``schedule-gym benchmark --policy`` does
(IQM and median regret with their stratified-bootstrap intervals, ``--eval-seeds``); the chosen checkpoint of
all seeds is the one with the lowest validation IQM, and the held-out scores are reported, never used to choose.
``--play greedy`` plays the most probable move (``deterministic``), ``sample`` draws it.

    nice .venv/bin/python examples/imitation_curves.py --protocol v1 --budget-track 16 --train-seeds 1 2 3 \\
        --iterations 8 --eval-seeds 0 1 2 --ship leaderboard/v1-dagger16.safetensors

``--profile P`` trains and scores on the mock profile ``P`` instead of the protocol's (its splits, layout, budget
and seeds unchanged; the references are ``P``'s): a policy for the CPU ``P`` is fitted to, such as the day's CPU,
whose real kernels ``examples/benchmarks/real_heldout.py`` then plays it on. The results file is suffixed
``-<P>``, and the shipped checkpoint's sidecar records ``P`` in its protocol.

``--synthetic N`` adds N synthetic layers of random shapes to the training split (none held out or in the
validation split: :mod:`schedule_gym.benchmark.synthetic`); the shipped checkpoint's sidecar records them.

writes ``examples/results/imitation/<protocol>-b<track>[-<architecture>][-synth<N>][-tol<X>][-<P>].json`` (``-tol``
for a ``--tolerance`` other than the default; per seed its ``progress.csv`` rows and per iteration the two splits'
statistics; random search's; the command, date and CPU). Regrets are mock figures of the protocol's profile (or
``--profile``'s) and do not depend on the CPU.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import shlex
import sys
from dataclasses import fields, replace
from pathlib import Path

from learning_curves import scores, ship

from schedule_gym.backends import PROFILES
from schedule_gym.baselines.imitation import ImitationArgs, imitation_env_kwargs, make_experts, train
from schedule_gym.baselines.ppo_vec import make_envs
from schedule_gym.benchmark import agent_tuner, get_protocol
from schedule_gym.benchmark.ppo_tuner import MULTITASK_ID, ppo_tuner
from schedule_gym.hardware import cpu_name

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--play", choices=("sample", "greedy"), default="sample")
    parser.add_argument("--ship", type=Path, help="copy the checkpoint chosen on the validation split here")
    parser.add_argument("--results", default="examples/results/imitation")
    parser.add_argument("--profile", choices=list(PROFILES),
                        help="the mock profile to train and score on (default: the protocol's)")
    for f in fields(ImitationArgs):
        if f.name not in ("seed",):
            parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                                help=f.metadata["help"])
    args = parser.parse_args()
    protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    if args.profile:
        protocol = replace(protocol, profile=args.profile)
    track, greedy = protocol.budget, args.play == "greedy"
    result = {"protocol": protocol.to_dict(), "budget_track": track, "play": args.play, "eval_seeds": args.eval_seeds,
              "command": shlex.join(["python", *sys.argv]), "cpu": cpu_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "seeds": []}
    result["random"] = scores(agent_tuner("random"), protocol, "random", track, args.eval_seeds)
    print(f"random search: IQM regret {result['random']['validation']['iqm_regret']:.3f} (validation), "
          f"{result['random']['held_out']['iqm_regret']:.3f} (held out)", flush=True)
    env_kwargs = imitation_env_kwargs(protocol, args.architecture, synthetic=args.synthetic,
                                      depthwise=args.synthetic_depthwise)
    envs = make_envs(MULTITASK_ID, args.num_envs, env_kwargs)  # one game and its experts serve every seed
    experts = make_experts(envs, track, args.tolerance)
    chosen = []
    for seed in args.train_seeds:
        settings = ImitationArgs(**{f.name: getattr(args, f.name) for f in fields(ImitationArgs) if f.name != "seed"},
                                 seed=seed)
        final = train(settings, envs, env_kwargs, experts)
        with open(final.parent / "progress.csv") as f:
            progress = list(csv.DictReader(f))
        points = []
        for iteration in range(settings.iterations):
            path = final.parent / f"model-{iteration}.safetensors"
            stats = scores(ppo_tuner(path, protocol, deterministic=greedy), protocol, f"dagger@{iteration}", track,
                           args.eval_seeds)
            points.append({"iteration": iteration, **stats})
            print(f"seed {seed}, iteration {iteration}: IQM regret {stats['validation']['iqm_regret']:.3f} "
                  f"(validation), {stats['held_out']['iqm_regret']:.3f} (held out)", flush=True)
        best = min(range(len(points)), key=lambda i: points[i]["validation"]["iqm_regret"])
        chosen.append((points[best]["validation"]["iqm_regret"], seed, best, final.parent / f"model-{best}.safetensors"))
        result["seeds"].append({"seed": seed, "run": final.parent.name, "progress": progress, "iterations": points,
                                "chosen": best})
    if args.ship:
        validation_iqm, seed, iteration, path = min(chosen)
        ship(path, args.ship, protocol, result["command"], iteration, validation_iqm, artefact="DAgger policy")
        result["shipped"] = {"path": str(args.ship), "seed": seed, "iteration": iteration}
        print(f"shipped seed {seed}'s checkpoint of iteration {iteration} (validation IQM {validation_iqm:.3f}) as "
              f"{args.ship}")
    envs.close()
    suffix = ("" if args.architecture == "Agent" else f"-{args.architecture}") + (
        f"-synth{args.synthetic}" if args.synthetic else "") + (
        f"-tol{args.tolerance:g}" if args.tolerance != parser.get_default("tolerance") else "") + (
        f"-{args.profile}" if args.profile else "")
    out = Path(args.results) / f"{protocol.name}-b{track}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
