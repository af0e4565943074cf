"""Print a leaderboard file (JSON lines written by ``schedule-gym benchmark --leaderboard``) as a markdown table.

    .venv/bin/python examples/leaderboard_table.py leaderboard/v0.jsonl

One row per result row, best (lowest median regret) first; partial rows (``--tasks``) are left out. Each
row's last column is the command that regenerates it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def table(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if not r.get("partial")), key=lambda r: r["median_regret"])
    lines = [
        "| agent | median regret | mean regret | held-out tasks | exact / search refs | seeds | budget | wall (s) | CPU, mock profile | date | command |",
        "|---|---:|---:|---:|---|---|---:|---:|---|---|---|",
    ]
    for r in rows:
        kinds = [t["reference"] for t in r["tasks"]]
        lines.append(
            f"| {r['agent']} | {r['median_regret']:.3f} | {r['mean_regret']:.3f} | {len(r['tasks'])} "
            f"| {kinds.count('exact')} / {kinds.count('search')} | {' '.join(map(str, r['seeds']))} "
            f"| {r['protocol']['budget']} | {r['wall_s']:.0f} | {r['cpu']}, {r['profile']} | {r['date'][:10]} "
            f"| `{r['command']}` |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("leaderboard", nargs="?", default="leaderboard/v0.jsonl")
    print(table(Path(parser.parse_args().leaderboard)))
