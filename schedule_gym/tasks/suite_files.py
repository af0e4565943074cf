"""Suites from files: a network's distinct tunable tasks and their weights, as the model mapping found them.

A suite file is JSON, one task per line::

    {"format": 1, "model": "vgg16", "description": "...",
     "tasks": [
    {"weight": 13, "task": {...Task.to_dict()...}},
    ...]}

A task's name is ``model/kernel`` (``vgg16/conv2d-1x224x224x3-64-k3-s1-p1+bias+relu``: the mapped kernel's
name after the network's), its weight how many times one inference runs it. ``examples/make_zoo_suites.py``
imports and maps every full-size zoo network and writes the files shipped in ``schedule_gym/data/suites/``
(:func:`shipped_suite_files`); :func:`load_suite_file` reads any such file. A protocol's frozen split (its tasks
kept as drawn, whatever later becomes of the suites they came from) is a suite file in
``schedule_gym/data/splits/`` (:func:`shipped_split_files`; ``examples/freeze_validation_split.py`` writes one).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from schedule_gym.tasks.task import SuiteTask, Task

__all__ = ["SUITE_FILE_FORMAT", "load_shipped_suite", "load_suite_file", "shipped_split_files", "shipped_suite_files",
           "write_suite_file"]

#: the version of the file layout written by :func:`write_suite_file`
SUITE_FILE_FORMAT = 1


def _shipped_dir(kind: str = "suites") -> Path:
    return Path(str(resources.files("schedule_gym").joinpath("data", kind)))


def write_suite_file(path: str | Path, model: str, tasks: Iterable[tuple[Task, int]], description: str = "") -> Path:
    """Write ``model``'s ``(task, weight)`` pairs to ``path``; each task is renamed ``model/<its name>``."""
    if not isinstance(model, str) or not model or "/" in model:
        raise ValueError(f"model must be a non-empty name without '/', got {model!r}")
    lines = []
    names: set[str] = set()
    for task, weight in tasks:
        if not isinstance(task, Task):
            raise TypeError(f"tasks must be (Task, weight) pairs, got a {type(task).__name__}")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise ValueError(f"task {task.name!r}: weight must be a positive int, got {weight!r}")
        name = f"{model}/{task.name}"
        if name in names:
            raise ValueError(f"task {name!r} appears twice: a suite lists distinct tasks")
        names.add(name)
        renamed = dataclasses.replace(task, name=name)
        lines.append(json.dumps({"weight": weight, "task": renamed.to_dict()}, separators=(",", ":")))
    if not lines:
        raise ValueError(f"model {model!r}: a suite needs at least one task")
    head = json.dumps({"format": SUITE_FILE_FORMAT, "model": model, "description": description}, separators=(",", ":"))
    path = Path(path)
    path.write_text(head[:-1] + ',"tasks":[\n' + ",\n".join(lines) + "]}\n")
    return path


def load_suite_file(path: str | Path) -> list[SuiteTask]:
    """The tasks of a suite file (:func:`write_suite_file`), in the file's order, with their weights."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"suite file {path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != SUITE_FILE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"suite file {path}: format {found!r}, expected {SUITE_FILE_FORMAT}")
    entries = data.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"suite file {path}: 'tasks' must be a non-empty list")
    out: list[SuiteTask] = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        out.append(_suite_task(path, i, entry))
        if out[-1].name in names:
            raise ValueError(f"suite file {path}: task {i} ({out[-1].name!r}) appears twice")
        names.add(out[-1].name)
    return out


def _suite_task(path: Path, i: int, entry: Any) -> SuiteTask:
    if not isinstance(entry, dict) or set(entry) != {"weight", "task"}:
        raise ValueError(f"suite file {path}: task {i} must be an object with 'weight' and 'task', got {entry!r:.200}")
    weight = entry["weight"]
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise ValueError(f"suite file {path}: task {i} has weight {weight!r}; weights are positive ints")
    try:
        task = Task.from_dict(entry["task"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"suite file {path}: task {i}: {exc}") from None
    return SuiteTask(task.name, task, weight)


def shipped_suite_files() -> dict[str, Path]:
    """Model name -> the suite file shipped for it in ``schedule_gym/data/suites/``."""
    return {p.stem: p for p in sorted(_shipped_dir().glob("*.json"))}


def shipped_split_files() -> dict[str, Path]:
    """Split name -> the frozen split shipped in ``schedule_gym/data/splits/`` (a suite file of that name)."""
    return {p.stem: p for p in sorted(_shipped_dir("splits").glob("*.json"))}


def load_shipped_suite(model: str) -> list[SuiteTask]:
    """The shipped suite of the zoo network ``model`` (a key of :func:`shipped_suite_files`)."""
    files = shipped_suite_files()
    if model not in files:
        raise ValueError(f"no suite file for {model!r}; shipped: {', '.join(files) or 'none'}")
    return load_suite_file(files[model])
