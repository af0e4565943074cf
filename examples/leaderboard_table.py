"""Print a leaderboard file (JSON lines written by ``schedule-gym benchmark --leaderboard``) as markdown tables.

    .venv/bin/python examples/leaderboard_table.py leaderboard/v1.jsonl
    .venv/bin/python examples/leaderboard_table.py leaderboard/v0.jsonl

Rows of a protocol with budget tracks (v1) make one table per track, best (lowest IQM regret) first, with
the 95% stratified-bootstrap intervals of the IQM and the median; rows without (v0) make one table, best
(lowest median regret) first. Partial rows (``--tasks``) and training-split rows are left out. Each row's
last column is the command that regenerates it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The leaderboard entries of a file: every row but partial and training-split ones."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if not r.get("partial") and r.get("split", "held_out") == "held_out"]


def with_interval(value: float, interval: list[float] | None) -> str:
    return f"{value:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def _common(r: dict[str, Any]) -> str:
    kinds = [t["reference"] for t in r["tasks"]]
    return (f"| {len(r['tasks'])} | {kinds.count('exact')} / {kinds.count('search')} | {' '.join(map(str, r['seeds']))} "
            f"| {r['protocol']['budget']} | {r['wall_s']:.0f} | {r['cpu']}, {r['profile']} | {r['date'][:10]} "
            f"| `{r['command']}` |")


def tracks(rows: list[dict[str, Any]]) -> list[int]:
    """The budget tracks of the rows that have one, in increasing order."""
    return sorted({r["budget_track"] for r in rows if "budget_track" in r})


def table(path: Path, track: int | None = None) -> str:
    """The rows of ``path`` as a markdown table: those of budget ``track`` (with intervals) if given, else those
    without a track (v0's columns)."""
    rows = read_rows(path)
    tail = "held-out tasks | exact / search refs | seeds | budget | wall (s) | CPU, mock profile | date | command |"
    rule = "---:|---|---|---:|---:|---|---|---|"
    if track is None:
        chosen = sorted((r for r in rows if "budget_track" not in r), key=lambda r: r["median_regret"])
        lines = [f"| agent | median regret | mean regret | {tail}", f"|---|---:|---:|{rule}"]
        lines += [f"| {r['agent']} | {r['median_regret']:.3f} | {r['mean_regret']:.3f} {_common(r)}" for r in chosen]
    else:
        chosen = sorted((r for r in rows if r.get("budget_track") == track), key=lambda r: r["iqm_regret"])
        lines = [f"| agent | IQM regret [95% CI] | median regret [95% CI] | mean regret | {tail}",
                 f"|---|---:|---:|---:|{rule}"]
        lines += [f"| {r['agent']} | {with_interval(r['iqm_regret'], r['iqm_regret_interval'])} "
                  f"| {with_interval(r['median_regret'], r['median_regret_interval'])} | {r['mean_regret']:.3f} "
                  f"{_common(r)}" for r in chosen]
    return "\n".join(lines)


def tables(path: Path) -> str:
    """Every table of a leaderboard file: one per budget track, or the one of rows without tracks."""
    rows = read_rows(path)
    if not tracks(rows):
        return table(path)
    return "\n\n".join(f"**{track} measurements per task**\n\n{table(path, track)}" for track in tracks(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("leaderboard", nargs="?", default="leaderboard/v1.jsonl")
    print(tables(Path(parser.parse_args().leaderboard)))
