"""Where each model stands against PyTorch eager on each CPU met: the latest run of the models benchmark.

    .venv/bin/python examples/models_table.py [examples/results/models]

Reads the runs of ``examples/benchmarks/models.py`` (``runN.json``, with ``metadata.json`` beside them for the
command, the rows a later run superseded and the rows whose timings were disturbed, each with what showed it) and
prints one markdown row per (CPU, model): the latest run that timed the model on that CPU, PyTorch eager's median
(min) over that run's timings, the base packed build's, and the fastest of that run's builds by the median with its
name. Choosing the fastest after timing favours the build whose rounds were luckiest (two builds a percent apart
swap places from run to run), so the table also gives the base build's ratio, the one every run has. A ratio is
PyTorch's time over the build's, measured in the same run; rows of different CPUs or days are not comparable with
each other.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent / "results" / "models"
#: the base build of the packed templates (every run since the packed templates has it; earlier: ``schedule-gym``)
BASE_BUILDS = ("schedule-gym-packed", "schedule-gym")
#: the target of the model-speed issue: at least this times PyTorch eager, by the median and by the minimum
TARGET = 1.5


@dataclass
class Standing:
    """One model on one CPU, in the latest run that timed it there."""

    model: str
    cpu: str
    run: int
    date: str
    threads: int
    command: str  # the run's, from metadata.json ('?' where it has none)
    measurements_per_task: float
    torch: dict[str, float]  # median, min (s)
    base_name: str
    base: dict[str, float]
    best_name: str
    best: dict[str, float]

    def ratio(self, build: dict[str, float], stat: str) -> float:
        return self.torch[stat] / build[stat]


def _run_number(path: Path) -> int | None:
    match = re.fullmatch(r"run(\d+)", path.stem)  # run25-before and the like are a run's other states
    return int(match.group(1)) if match else None


def _metadata(folder: Path) -> dict[str, Any]:
    path = folder / "metadata.json"
    return json.loads(path.read_text()) if path.exists() else {}


def standings(folder: Path = FOLDER) -> list[Standing]:
    """The latest row of each (CPU, model) that no later run superseded and whose timings were not disturbed (a busy
    host: ``metadata.json``'s ``disturbed``, model -> what showed it), by CPU and then model."""
    meta = _metadata(folder)
    latest: dict[tuple[str, str], Standing] = {}
    for path in folder.glob("run*.json"):
        number = _run_number(path)
        if number is None:
            continue
        entry = meta.get(path.name, {})
        left_out = set(entry.get("superseded", ())) | set(entry.get("disturbed", {}))
        for row in json.loads(path.read_text()):
            latency = row.get("latency_s", {})
            builds = {k: v for k, v in latency.items() if k.startswith("schedule-gym")}
            if row["model"] in left_out or "torch" not in latency or not builds:
                continue
            key = (row["cpu"], row["model"])
            if key in latest and latest[key].run > number:
                continue
            base_name = next((b for b in BASE_BUILDS if b in builds), min(builds))
            best_name = min(builds, key=lambda b: builds[b]["median"])
            latest[key] = Standing(row["model"], row["cpu"], number, row["date"], row["threads"],
                                   entry.get("command", "?"), row["budget"] / row["tasks"],
                                   latency["torch"], base_name, builds[base_name], best_name, builds[best_name])
    return [latest[key] for key in sorted(latest)]


def _ms(timing: dict[str, float]) -> str:
    return f"{timing['median'] * 1e3:.1f} ({timing['min'] * 1e3:.1f})"


def _ratios(s: Standing, build: dict[str, float]) -> str:
    median, low = s.ratio(build, "median"), s.ratio(build, "min")
    text = f"{median:.2f}x ({low:.2f}x)"
    return f"**{text}**" if min(median, low) >= TARGET - 1e-9 else text  # 0.30 / 0.20 is 1.4999999999999998


def table(rows: list[Standing]) -> str:
    """The standings as one markdown table; a ratio in bold is at least :data:`TARGET` by the median and the min."""
    lines = ["| CPU | model | run, date | measurements a task | PyTorch eager, ms | base build, ms | PyTorch / base "
             "| fastest build of the run | PyTorch / fastest |",
             "|---|---|---|---:|---:|---:|---:|---|---:|"]
    for s in rows:
        lines.append(f"| {s.cpu} | {s.model} | {s.run}, {s.date} | {s.measurements_per_task:.0f} | {_ms(s.torch)} "
                     f"| {_ms(s.base)} | {_ratios(s, s.base)} | `{s.best_name}` {_ms(s.best)} | {_ratios(s, s.best)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=FOLDER)
    print(table(standings(parser.parse_args().folder)))


if __name__ == "__main__":
    main()
