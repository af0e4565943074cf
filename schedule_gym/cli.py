"""The ``schedule-gym`` command line."""

from __future__ import annotations

import argparse
import sys

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import PRESETS, gemm, get_task


def _space(args: argparse.Namespace) -> int:
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
    return 0


def _tasks(args: argparse.Namespace) -> int:
    for name, (m, k, n) in PRESETS.items():
        print(f"{name:<20} m={m:<6} k={k:<6} n={n:<6}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from schedule_gym.tables import compress, measure_space, summarize

    m, k, n = args.shape
    task = gemm(m, k, n, *args.splits, dtype=args.dtype)
    protocol = {"min_repeat_ms": args.min_repeat_ms, "repeat": args.repeat}
    options = {"num_threads": args.threads, "build_workers": args.build_workers, "protocol": protocol, "runner_cpus": args.runner_cpus}
    measure_space(task, args.out, options, args.batch)
    print(summarize(args.out, task))
    if args.gzip:
        compress(args.out, args.gzip)
        print(f"compressed to {args.gzip}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="schedule-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("space", help="print the exact size of tile spaces (default: the paper's three)")
    p.add_argument("tasks", nargs="*", help=f"preset task names ({', '.join(PRESETS)})")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), help="a GEMM shape")
    p.add_argument("--d-m", type=int, default=4)
    p.add_argument("--d-k", type=int, default=2)
    p.add_argument("--d-n", type=int, default=4)
    p.add_argument("--dtype", default="float32")
    p.set_defaults(func=_space)
    p = sub.add_parser("tasks", help="list the preset tasks")
    p.set_defaults(func=_tasks)
    p = sub.add_parser("table", help="measure every config of a GEMM with the TVM backend (resumable)")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), required=True)
    p.add_argument("--splits", nargs=3, type=int, metavar=("D_M", "D_K", "D_N"), default=[4, 2, 4])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", required=True, help="record file (JSON lines); resumes if it exists")
    p.add_argument("--gzip", help="also write a compressed copy here")
    p.add_argument("--threads", type=int, default=None, help="TVM runtime threads (default: all cores)")
    p.add_argument("--build-workers", type=int, default=None)
    p.add_argument("--runner-cpus", type=int, nargs="+", default=None, help="pin the kernel runner to these CPUs")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-repeat-ms", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=64)
    p.set_defaults(func=_table)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (TypeError, ValueError) as exc:
        print(f"schedule-gym: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
