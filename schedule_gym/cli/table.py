"""``schedule-gym table``: every config of a task measured with the TVM backend into a record file (resumable)."""

from __future__ import annotations

import argparse
from typing import Any

from schedule_gym.cli.errors import CLIError
from schedule_gym.tasks import Task, gemm, get_task

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("table", help="measure every config of a task with the TVM backend (resumable)")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), help="a GEMM shape")
    p.add_argument("--task", help="or a named task (schedule-gym tasks)")
    p.add_argument("--splits", nargs="+", type=int, help="split count per dimension (GEMM default 4 2 4)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", required=True, help="record file (JSON lines); resumes if it exists")
    p.add_argument("--gzip", help="also write a compressed copy here")
    p.add_argument("--threads", type=int, default=None, help="TVM runtime threads (default: all cores)")
    p.add_argument("--build-workers", type=int, default=None)
    p.add_argument("--runner-cpus", type=int, nargs="+", default=None, help="pin the kernel runner to these CPUs")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-repeat-ms", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=64)
    p.set_defaults(func=run)


def _with_splits(task: Task, splits: list[int]) -> Task:
    """``task`` with other split counts (its loop order rebuilt for them)."""
    from dataclasses import replace

    from schedule_gym.tasks import LoopDim

    dims = tuple(LoopDim(d.name, d.extent, s, d.reduction) for d, s in zip(task.dims, splits))
    return replace(task, dims=dims, loop_order=(), name=f"{task.name}-splits{''.join(map(str, splits))}")


def run(args: argparse.Namespace) -> int:
    from schedule_gym.tables import compress, measure_space, summarize

    if (args.shape is None) == (args.task is None):
        raise CLIError("give either --shape M K N (a GEMM) or --task NAME")
    if args.task is not None:
        task = get_task(args.task)
        if args.splits is not None:
            if len(args.splits) != len(task.dims):
                raise CLIError(f"--splits needs {len(task.dims)} counts for {task.name} ({' '.join(task.dim_names)})")
            task = _with_splits(task, args.splits)
    else:
        m, k, n = args.shape
        task = gemm(m, k, n, *(args.splits or [4, 2, 4]), dtype=args.dtype)
    protocol = {"min_repeat_ms": args.min_repeat_ms, "repeat": args.repeat}
    options = {"num_threads": args.threads, "build_workers": args.build_workers, "protocol": protocol, "runner_cpus": args.runner_cpus}
    measure_space(task, args.out, options, args.batch)
    print(summarize(args.out, task))
    if args.gzip:
        compress(args.out, args.gzip)
        print(f"compressed to {args.gzip}")
    return 0
