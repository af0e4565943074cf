"""Regret of agents on protocol v0's held-out split at several measurement budgets: median and interquartile mean.

Runs :func:`schedule_gym.benchmark.run_protocol` for each agent and budget (the protocol with its budget and
seeds replaced), appends each result row to ``<out>/rows.jsonl`` (the row's ``wall_s`` is dropped: the machine
these run on is shared, so no timing is reported), then prints per budget the median and the interquartile
mean (``scipy.stats.trim_mean(x, 0.25)``) of the regret ``best_found / reference - 1`` over held-out tasks
(each task's regret the mean over seeds, as the protocol's metric), over all the depthwise convolutions
(never seen in training) and over the other held-out tasks, and the IQM over every (task, seed) run.

    nice .venv/bin/python examples/benchmarks/transfer_regret.py --agents transfer random xgb felix \\
        --budgets 16 64 100 --seeds 0 1 2 3 4
    .venv/bin/python examples/benchmarks/transfer_regret.py --table-only   # the table of the saved rows
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import trim_mean

from schedule_gym.benchmark import agent_tuner, get_protocol, run_protocol


def is_depthwise(task_key: str) -> bool:
    """A grouped convolution with one input channel per group (its key names ``groups`` and ``rc1/``)."""
    return task_key.startswith("conv2d{") and "groups=1," not in task_key and "rc1/" in task_key


def summarise(rows: list[dict]) -> str:
    lines = ["| budget | agent | seeds | median (all) | IQM (all) | IQM of runs | median (depthwise) | IQM (depthwise) "
             "| median (rest) | IQM (rest) | tasks (dw/rest) |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    latest = {(r["protocol"]["budget"], r["agent"]): r for r in rows}
    for (budget, agent), r in sorted(latest.items()):
        regret = np.array([t["regret"] for t in r["tasks"]])
        runs = np.array([b / t["reference_latency_s"] - 1.0 for t in r["tasks"] for b in t["best_latency_s"]])
        dw = np.array([is_depthwise(t["key"]) for t in r["tasks"]])
        lines.append(
            f"| {budget} | {agent} | {','.join(map(str, r['seeds']))} | {np.median(regret):.3f} "
            f"| {trim_mean(regret, 0.25):.3f} | {trim_mean(runs, 0.25):.3f} | {np.median(regret[dw]):.3f} "
            f"| {trim_mean(regret[dw], 0.25):.3f} | {np.median(regret[~dw]):.3f} | {trim_mean(regret[~dw], 0.25):.3f} "
            f"| {dw.sum()}/{(~dw).sum()} |")
    first = rows[0] if rows else {}
    lines.append(f"\nCPU {first.get('cpu')}, {first.get('profile')}; dates "
                 f"{', '.join(sorted({r['date'][:10] for r in rows}))}")
    return "\n".join(lines)


def parse_params(items: list[str]) -> dict[str, dict]:
    """``agent:key=json`` items, e.g. ``transfer:batch_size=16``."""
    out: dict[str, dict] = {}
    for item in items:
        agent, _, assignment = item.partition(":")
        key, _, value = assignment.partition("=")
        out.setdefault(agent, {})[key] = json.loads(value)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["transfer", "random", "xgb", "felix"])
    parser.add_argument("--budgets", nargs="+", type=int, default=[16, 64, 100])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--param", nargs="*", default=[], help="agent:key=json, e.g. transfer:batch_size=16")
    parser.add_argument("--name", default=None, help="the rows' agent name (one agent only; default its name)")
    parser.add_argument("--out", default="examples/results/transfer")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    path = Path(args.out) / "rows.jsonl"
    if not args.table_only:
        params = parse_params(args.param)
        path.parent.mkdir(parents=True, exist_ok=True)
        command = "python " + " ".join(sys.argv)
        for budget in args.budgets:
            protocol = dataclasses.replace(get_protocol("v0"), budget=budget, seeds=tuple(args.seeds))
            for agent in args.agents:
                name = args.name or agent
                row = run_protocol(agent_tuner(agent, params.get(agent)), protocol, agent=name,
                                   params=params.get(agent), command=command)
                row.pop("wall_s", None)
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"budget {budget} {name}: median regret {row['median_regret']:.3f}, "
                      f"IQM {trim_mean([t['regret'] for t in row['tasks']], 0.25):.3f}", flush=True)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(summarise(rows))
