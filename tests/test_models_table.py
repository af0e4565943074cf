"""The models' standing table (examples/models_table.py): which run stands for a model on a CPU, and its ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models_table import standings, table  # noqa: E402


def _row(model: str, cpu: str, torch_s: tuple[float, float], **builds: tuple[float, float]) -> dict:
    latency = {"torch": {"median": torch_s[0], "min": torch_s[1]}}
    latency.update({name.replace("_", "-"): {"median": m, "min": n} for name, (m, n) in builds.items()})
    return {"model": model, "cpu": cpu, "date": "2026-11-30", "threads": 2, "budget": 50, "tasks": 2,
            "latency_s": latency}


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    (folder / name).write_text(json.dumps(rows))


def test_the_latest_run_not_superseded_stands_for_each_cpu_and_model(tmp_path):
    _write(tmp_path, "run2.json", [_row("bert", "zen", (0.30, 0.28), schedule_gym_packed=(0.20, 0.19)),
                                   _row("bert", "xeon", (0.10, 0.10), schedule_gym_packed=(0.10, 0.09))])
    _write(tmp_path, "run10.json", [_row("bert", "zen", (0.30, 0.30), schedule_gym_packed=(0.25, 0.24))])
    # a later run whose row a metadata entry marks superseded, and a run's other state, stand for nothing
    _write(tmp_path, "run11.json", [_row("bert", "zen", (0.9, 0.9), schedule_gym_packed=(0.1, 0.1))])
    _write(tmp_path, "run12-before.json", [_row("bert", "zen", (0.9, 0.9), schedule_gym_packed=(0.1, 0.1))])
    # and a later run whose timings of the model were disturbed
    _write(tmp_path, "run13.json", [_row("bert", "zen", (0.9, 0.9), schedule_gym_packed=(0.1, 0.1))])
    (tmp_path / "metadata.json").write_text(json.dumps({"run11.json": {"superseded": ["bert"]},
                                                        "run13.json": {"disturbed": {"bert": "a busy host"}}}))
    rows = {(s.cpu, s.model): s for s in standings(tmp_path)}
    assert sorted(rows) == [("xeon", "bert"), ("zen", "bert")]
    assert rows["zen", "bert"].run == 10  # run 10 over run 2: numbers, not names, order the runs
    assert rows["xeon", "bert"].run == 2
    assert rows["zen", "bert"].measurements_per_task == 25


def test_the_fastest_build_is_chosen_by_the_median_and_bold_needs_both_statistics(tmp_path):
    _write(tmp_path, "run1.json", [
        _row("a", "zen", (0.30, 0.30), schedule_gym_packed=(0.20, 0.15), schedule_gym_packed_fast=(0.19, 0.19)),
        _row("b", "zen", (0.30, 0.30), schedule_gym_packed=(0.15, 0.15), metaschedule=(0.01, 0.01))])
    a, b = standings(tmp_path)
    assert (a.base_name, a.best_name) == ("schedule-gym-packed", "schedule-gym-packed-fast")
    assert b.best_name == "schedule-gym-packed"  # only our builds compete
    lines = table([a, b]).splitlines()
    # base: 0.30 / 0.20 = 1.50x by the median, 2.00x by the min; fastest: 1.58x by both; each at least 1.5x
    assert "**1.50x (2.00x)**" in lines[2] and "**1.58x (1.58x)**" in lines[2]
    _write(tmp_path, "run1.json", [_row("a", "zen", (0.30, 0.20), schedule_gym_packed=(0.19, 0.19))])
    (c,) = standings(tmp_path)
    assert "1.58x (1.05x)" in table([c]) and "**" not in table([c])  # 1.5x by the median alone is not the target
