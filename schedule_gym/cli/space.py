"""``schedule-gym space``: the exact size of tile spaces (and with ``--orders``, of schedule spaces)."""

from __future__ import annotations

import argparse
from typing import Any

from schedule_gym.spaces import ScheduleSpace, TileSpace
from schedule_gym.tasks import gemm, get_task

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("space", help="print the exact size of tile spaces (default: the paper's three)")
    p.add_argument("tasks", nargs="*", help="task names (schedule-gym tasks lists them)")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), help="a GEMM shape")
    p.add_argument("--d-m", type=int, default=4)
    p.add_argument("--d-k", type=int, default=2)
    p.add_argument("--d-n", type=int, default=4)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--orders", action="store_true",
                   help="also the loop orders and the schedule space sizes: MDF (tiles x orders) and ADF (tiles + orders)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tasks = [get_task(name, args.d_m, args.d_k, args.d_n, args.dtype) for name in args.tasks]
    if args.shape:
        m, k, n = args.shape
        tasks.append(gemm(m, k, n, args.d_m, args.d_k, args.d_n, args.dtype))
    if not tasks:
        tasks = [get_task(name, args.d_m, args.d_k, args.d_n, args.dtype) for name in ("gemm-512", "gemm-1024", "gemm-2048")]
    for task in tasks:
        space = TileSpace(task)
        sizes = " x ".join(f"{d.name}:{d.size}" for d in space.dims)
        print(f"{task.describe():<70} {space.size:>16,} configs ({sizes}), {space.n_actions} actions")
        if args.orders:
            schedules = ScheduleSpace(task, space)
            print(f"{'':<4}loop orders {schedules.orders.size:,} (levels of a dimension nested; "
                  f"{schedules.orders.n_actions} swaps); MDF tiles x orders = {schedules.mdf_size:,}, "
                  f"ADF tiles + orders = {schedules.adf_size:,}")
    return 0
