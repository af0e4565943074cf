"""How good a config a policy that walks from ``s0`` can reach at all within a measurement budget.

A policy tuner plays moves from ``s0`` (:func:`~schedule_gym.benchmark.tuners.run_policy_session`): each move
doubles one factor of a dimension and halves another, and every config it lands on for the first time costs one
measurement, ``s0`` included. With a budget of ``B`` measurements it can therefore reach exactly the configs at
most ``B - 1`` moves from ``s0`` (any shortest path to one of them visits that many new configs, and a path through
configs measured before still needs them measured first). The best of those is what an **oracle walker** finds:
a lower bound on the regret of *every* policy played from ``s0``, trained or not, however it is trained.

This script computes the bound exactly by breadth-first search (:mod:`schedule_gym.benchmark.oracle`) over each
task's whole move graph on the protocol's mock profile, and the interquartile mean over tasks (the protocol's
metric: the bound is the same on every seed, and the IQM is monotone in each task's regret, so the IQM of the
bounds bounds the IQM of any policy)::

    python examples/benchmarks/walk_reach.py --protocol v1 --split held_out --tracks 16 64 256

It prints, per task, the bound at each track and how many moves from ``s0`` the nearest config within 1.25x of
the reference lies; then the IQM and median of the bounds. ``--json PATH`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.aggregate import aggregate_iqm, aggregate_median
from schedule_gym.benchmark.oracle import all_latencies, move_distances
from schedule_gym.benchmark.protocol import SPLITS, get_protocol
from schedule_gym.benchmark.references import reference_latency
from schedule_gym.hardware import cpu_name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--split", default="held_out", choices=SPLITS)
    parser.add_argument("--tracks", type=int, nargs="+", default=None, help="budgets (default: the protocol's tracks)")
    parser.add_argument("--near", type=float, default=0.25, help="the regret whose distance is reported (default 0.25)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    protocol = get_protocol(args.protocol)
    tracks = sorted(args.tracks or protocol.budget_tracks or (protocol.budget,))
    backend = MockBackend(profile=protocol.profile)
    tasks = protocol.split_tasks(args.split)
    t_start = time.perf_counter()
    print(f"# walk_reach: protocol {protocol.name}, split {args.split}, mock profile {protocol.profile}, CPU "
          f"{cpu_name()}, {time.strftime('%Y-%m-%d')}")
    print(f"# per task: the oracle walker's regret at each budget (best config within budget-1 moves of s0), "
          f"moves to the nearest config with regret <= {args.near}")
    print(f"{'task':44s} {'configs':>10s} " + " ".join(f"{'@' + str(b):>7s}" for b in tracks) + f" {'moves':>6s}")
    rows = []
    for task in tasks:
        space = backend.space(task)
        reference, kind = reference_latency(task, backend, protocol.exact_limit)
        latency = all_latencies(backend.latency_table(task, space), space.size)
        dist = move_distances(space, tracks[-1] - 1)
        bounds = {}
        for budget in tracks:
            within = (dist >= 0) & (dist <= budget - 1)
            bounds[budget] = float(np.nanmin(latency[within]) / reference - 1.0)
        near = (dist >= 0) & (latency <= (1.0 + args.near) * reference)
        moves = int(dist[near].min()) if near.any() else None
        rows.append({"task": task.name, "space_size": space.size, "reference": kind, "reference_latency_s": reference,
                     "bound": {str(b): v for b, v in bounds.items()}, "moves_to_near": moves})
        print(f"{task.name[:44]:44s} {space.size:10,d} " + " ".join(f"{bounds[b]:7.3f}" for b in tracks)
              + f" {'>' + str(tracks[-1] - 1) if moves is None else moves:>6}", flush=True)
    summary = {}
    for budget in tracks:
        values = [r["bound"][str(budget)] for r in rows]
        summary[str(budget)] = {"iqm": aggregate_iqm([[v] for v in values]), "median": aggregate_median([[v] for v in values]),
                                "tasks_within_near": sum(v <= args.near for v in values)}
        print(f"# budget {budget}: IQM of the bound {summary[str(budget)]['iqm']:.3f}, median "
              f"{summary[str(budget)]['median']:.3f}, {summary[str(budget)]['tasks_within_near']} of {len(rows)} "
              f"tasks can reach regret <= {args.near}")
    moves = sorted(r["moves_to_near"] if r["moves_to_near"] is not None else tracks[-1] for r in rows)
    print(f"# moves from s0 to regret <= {args.near}: median {statistics.median(moves)}, min {moves[0]}, "
          f"max {moves[-1]} ({time.perf_counter() - t_start:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"protocol": protocol.name, "split": args.split, "profile": protocol.profile,
                                         "cpu": cpu_name(), "date": time.strftime("%Y-%m-%d"), "near": args.near,
                                         "command": "python " + " ".join(sys.argv), "tasks": rows,
                                         "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
