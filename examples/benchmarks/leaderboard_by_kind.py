"""A leaderboard's rows split by kind of held-out task: depthwise convolutions and the rest.

Each row of a protocol with intervals holds every held-out task's regret per seed (``best_latency_s`` against
``reference_latency_s``); this prints, per budget track and agent, the IQM regret over the (task, seed) runs of
each group with its stratified-bootstrap 95% interval (``schedule_gym.benchmark.aggregate``, as the rows' own),
the latest row of each (track, agent) pair.

    python examples/benchmarks/leaderboard_by_kind.py leaderboard/v1.jsonl --agents random xgb dagger16-moves
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from transfer_regret import is_depthwise

from schedule_gym.benchmark.aggregate import aggregate_iqm, stratified_bootstrap_interval


def regrets(task: dict) -> list[float]:
    return [best / task["reference_latency_s"] - 1.0 for best in task["best_latency_s"]]


def by_kind(row: dict) -> dict[str, tuple[int, float, tuple[float, float] | None]]:
    """Per group (``depthwise``, ``rest``): its task count, IQM regret and the IQM's interval."""
    out = {}
    for group, keep in (("depthwise", True), ("rest", False)):
        matrix = np.array([regrets(t) for t in row["tasks"] if is_depthwise(t["key"]) == keep])
        if matrix.size:
            out[group] = (len(matrix), aggregate_iqm(matrix), stratified_bootstrap_interval(matrix, aggregate_iqm))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("leaderboard", help="a leaderboard file (JSON lines)")
    parser.add_argument("--agents", nargs="+", help="these agents only (default: every one)")
    parser.add_argument("--tracks", type=int, nargs="+", help="these budget tracks only (default: every one)")
    args = parser.parse_args()
    with open(args.leaderboard) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    latest = {(r.get("budget_track", r["protocol"]["budget"]), r["agent"]): r for r in rows
              if (not args.agents or r["agent"] in args.agents) and not r.get("partial")}
    print("| track | agent | seeds | IQM, depthwise [95%] | IQM, the rest [95%] | tasks (dw/rest) |")
    print("|---:|---|---|---:|---:|---|")
    for (track, agent), row in sorted(latest.items()):
        if args.tracks and track not in args.tracks:
            continue
        groups = by_kind(row)
        cells = []
        for group in ("depthwise", "rest"):
            if group not in groups:
                cells.append("-")
                continue
            _, iqm, interval = groups[group]
            cells.append(f"{iqm:.3f}" + ("" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"))
        counts = "/".join(str(groups[g][0]) if g in groups else "0" for g in ("depthwise", "rest"))
        print(f"| {track} | {agent} | {len(row['seeds'])} | {cells[0]} | {cells[1]} | {counts} |")
