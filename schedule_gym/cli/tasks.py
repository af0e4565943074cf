"""``schedule-gym tasks``: the named tasks, GEMM presets and the suites' layers with their weights."""

from __future__ import annotations

import argparse
from typing import Any

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import PRESETS, SUITES, get_suite

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("tasks", help="list the named tasks: GEMM presets and the suites' layers with their weights")
    p.add_argument("--suite", choices=SUITES, help="list this suite only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    suites = [args.suite] if args.suite else list(SUITES)
    if not args.suite:
        print("GEMM presets (or any gemm-MxKxN):")
        for name, (m, k, n) in PRESETS.items():
            print(f"  {name:<20} m={m:<6} k={k:<6} n={n:<6}")
    for suite in suites:
        layers = get_suite(suite)
        print(f"suite {suite}: {len(layers)} distinct layers, {sum(t.weight for t in layers)} in the network")
        for entry in layers:
            space = TileSpace(entry.task)
            shape = " ".join(f"{d.name}={d.extent}" for d in entry.task.dims)
            print(f"  {entry.name:<26} x{entry.weight:<3} {entry.task.op}{entry.task.params_text()} {shape}  "
                  f"{space.size:,} configs")
    return 0
