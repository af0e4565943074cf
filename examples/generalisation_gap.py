"""The generalisation gap of a learned agent against the number of training tasks (as Procgen and NetHack
report it): train on growing subsets of a protocol's training split, score on those training tasks and on
the held-out tasks at one budget track, and plot both regrets and their gap.

One file, top to bottom (CleanRL style): arguments, the nested subsets, per subset training and the two
scores, saving. The subsets are nested (each the next's first tasks): a seeded permutation of the training
tasks of the operators the learner fits, taking the operators in turn while each has tasks left, so even
the smallest subset holds one task of each (a Felix cost model tunes only the operators it was fitted on).

    nice -n 19 .venv/bin/python examples/generalisation_gap.py --protocol v1 --budget-track 16 \\
        --seeds 0,1,2 --held-out-tasks 12 --n-samples 1024 --epochs 10 --hidden-size 64

writes ``examples/results/generalisation-gap/<protocol>-<learner>-b<track>.json`` (every row: the subset, the
train and held-out statistics with their stratified-bootstrap intervals, the gap; the command, date and CPU)
and the plot beside it (``.png``). Regrets are mock figures of the protocol's profile; they do not depend on
the CPU. Learners (``--learner``): ``felix`` (Felix's cost models pretrained on the subset by
:func:`schedule_gym.benchmark.pretrained.pretrain_felix`, one per operator, then Felix's search with them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from schedule_gym.benchmark import Protocol, agent_tuner, get_protocol, run_protocol
from schedule_gym.hardware import cpu_name
from schedule_gym.tasks import Task

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_results  # noqa: E402  (beside this file: the figure the docs draw too)


@dataclass
class Args:
    protocol: str = "v1"
    """the protocol whose training split is subsampled and whose held-out split is scored"""
    budget_track: int = 64
    """measurements per task and seed (one of the protocol's budget tracks)"""
    learner: str = "felix"
    """the learned agent (see LEARNERS)"""
    sizes: str = "2,4,8,16,all"
    """training subset sizes, comma-separated ('all': the whole eligible training split)"""
    seeds: str = "0,1,2,3,4"
    """evaluation seeds"""
    held_out_tasks: int = 0
    """score this many held-out tasks, drawn with --subset-seed (0: all of them)"""
    subset_seed: int = 0
    """seed of the permutation of training tasks and of the held-out draw"""
    ops: str = "conv2d,dense"
    """operators the learner is trained on (v1's held-out tasks are convolutions and dense layers)"""
    n_samples: int = 8192
    """felix: configs drawn per training task"""
    epochs: int = 30
    """felix: passes over the samples"""
    hidden_size: int = 128
    """felix: the cost model's width"""
    out: str = "examples/results/generalisation-gap"
    """folder of the results file and its plot"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = Args(**vars(parser.parse_args()))
    if args.learner not in LEARNERS:
        parser.error(f"--learner must be one of {', '.join(LEARNERS)}, got {args.learner!r}")
    return args


def nested_subsets(tasks: Sequence[Task], sizes: Sequence[str], ops: Sequence[str], seed: int) -> list[tuple[Task, ...]]:
    """Nested subsets of ``tasks`` (those of ``ops``) of the given sizes: a seeded permutation of each
    operator's tasks, interleaved operator by operator while each has tasks left."""
    rng = np.random.default_rng(seed)
    queues = [[tasks_of_op[i] for i in rng.permutation(len(tasks_of_op))]
              for tasks_of_op in ([t for t in tasks if t.op == op] for op in ops) if tasks_of_op]
    order: list[Task] = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    counts = [len(order) if s == "all" else int(s) for s in sizes]
    bad = [c for c in counts if not 0 < c <= len(order)]
    if bad:
        raise ValueError(f"subset sizes must be in 1..{len(order)} (the training tasks of {', '.join(ops)}), got {bad}")
    return [tuple(order[:c]) for c in counts]


def felix_learner(protocol: Protocol, tasks: Sequence[Task], args: Args, folder: Path) -> tuple[str, dict[str, Any]]:
    """Felix's cost models pretrained on ``tasks`` (one per operator; sidecars beside them), as agent params."""
    from schedule_gym.agents.felix import save_cost_model
    from schedule_gym.benchmark.pretrained import felix_training_tasks, pretrain_felix, write_sidecar

    by_op = felix_training_tasks(protocol, tasks=tasks)
    models = pretrain_felix(protocol, tasks=tasks, n_samples=args.n_samples, epochs=args.epochs,
                            hidden_size=args.hidden_size, seed=args.subset_seed)
    paths = []
    for op, model in models.items():
        path = folder / f"felix-{len(tasks)}-{op}.pt"
        save_cost_model(model, path)
        write_sidecar(path, protocol, by_op[op], artefact="felix cost model", operator=op)
        paths.append(str(path))
    return "felix", {"cost_model": paths}


#: learner name -> (protocol, training tasks, args, scratch folder) -> (agent name, agent params)
LEARNERS: dict[str, Callable[[Protocol, Sequence[Task], Args, Path], tuple[str, dict[str, Any]]]] = {
    "felix": felix_learner,
}


def statistics_of(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("median_regret", "median_regret_interval", "iqm_regret", "iqm_regret_interval", "mean_regret")
    return {"tasks": [t["task"] for t in row["tasks"]], **{k: row.get(k) for k in keys},
            "regret_by_task": {t["task"]: t["regret"] for t in row["tasks"]}}


if __name__ == "__main__":
    args = parse_args()
    torch.set_num_threads(1)  # small MLPs on shared cores: one thread is fastest
    protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    seeds = [int(s) for s in args.seeds.split(",")]
    ops = [op for op in args.ops.split(",") if op]
    subsets = nested_subsets(protocol.train_tasks(), args.sizes.split(","), ops, args.subset_seed)
    held_out = [t.name for t in protocol.held_out_tasks()]
    if args.held_out_tasks:
        chosen = np.random.default_rng(args.subset_seed).choice(len(held_out), args.held_out_tasks, replace=False)
        held_out = [held_out[i] for i in sorted(chosen)]
    command = shlex.join(["python", "examples/generalisation_gap.py", *sys.argv[1:]])
    result: dict[str, Any] = {"command": command, "cpu": cpu_name(), "protocol": protocol.to_dict(),
                              "budget_track": protocol.budget, "learner": args.learner, "seeds": seeds,
                              "args": vars(args), "rows": []}
    with tempfile.TemporaryDirectory(prefix="generalisation-gap-") as scratch:
        for subset in subsets:
            agent, params = LEARNERS[args.learner](protocol, subset, args, Path(scratch))
            tuner = agent_tuner(agent, params)
            scores = {split: statistics_of(run_protocol(tuner, protocol, agent, seeds=seeds, tasks=names, split=split))
                      for split, names in (("train", [t.name for t in subset]), ("held_out", held_out))}
            row = {"n_train_tasks": len(subset), **scores,
                   "gap_iqm": scores["held_out"]["iqm_regret"] - scores["train"]["iqm_regret"],
                   "gap_median": scores["held_out"]["median_regret"] - scores["train"]["median_regret"]}
            result["rows"].append(row)
            print(f"{len(subset):3d} training tasks: train IQM {scores['train']['iqm_regret']:.3f}, held-out IQM "
                  f"{scores['held_out']['iqm_regret']:.3f}, gap {row['gap_iqm']:+.3f} (median gap "
                  f"{row['gap_median']:+.3f})", flush=True)
    result["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{protocol.name}-{args.learner}-b{protocol.budget}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_results.save(plot_results.generalisation_gap_figure(result), out / f"{stem}.png")
    print(f"wrote {out / stem}.json and .png")
