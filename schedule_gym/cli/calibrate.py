"""``schedule-gym calibrate``: the mock's CPU profile fitted to kernels measured on this machine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from schedule_gym.cli.errors import EXIT_INTERRUPTED, CLIError
from schedule_gym.extras import require
from schedule_gym.tasks import get_task

__all__ = ["CALIBRATE_CONFIGS", "CALIBRATE_TASKS", "add_parser", "run"]

#: Tasks ``calibrate`` measures by default: a small GEMM, a ResNet-50 conv2d and BERT's P @ V batch matmul
#: (three operators' loop nests, each kernel a few milliseconds at most, so sampling them is cheap).
CALIBRATE_TASKS = ("gemm-256", "resnet50/conv6", "bert-base/attn-pv")
CALIBRATE_CONFIGS = 200

CALIBRATE_EPILOG = """
The fitted profile is stored in the user cache as profiles/<cpu>.json (the cache is $SCHEDULE_GYM_CACHE,
else $XDG_CACHE_HOME/schedule-gym, else ~/.cache/schedule-gym); from then on the mock backend's default
profile="auto" uses it on this CPU instead of the shipped or nominal profile. Delete the file to go back.
The measurements go to a record file in the cache's calibration/ folder (--records to choose one; the
same --records, tasks and seed resume an interrupted run without measuring anything twice).

examples:
  schedule-gym calibrate
  schedule-gym calibrate --tasks gemm-512 bert-base/attn-qk --configs 300 --seed 1
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="fit the mock's CPU profile to kernels measured on this machine (a few minutes)",
        description="Measure random configs of a few tasks with the TVM backend on this machine, fit the mock's\n"
        "CPU profile to them, report the held-out Spearman rank correlation, and store the profile in the\n"
        "user cache, where the mock's profile='auto' finds it.",
        epilog=CALIBRATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tasks", nargs="+", default=list(CALIBRATE_TASKS),
                   help=f"tasks to measure (schedule-gym tasks; default {' '.join(CALIBRATE_TASKS)})")
    p.add_argument("--configs", type=int, default=CALIBRATE_CONFIGS,
                   help=f"random configs measured per task (default {CALIBRATE_CONFIGS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the configs drawn (default 0)")
    p.add_argument("--held-out", type=float, default=0.5,
                   help="share of each task's configs kept out of the fit and used to score it (default 0.5)")
    p.add_argument("--threads", type=int, default=None, help="TVM runtime threads (default: all cores)")
    p.add_argument("--records", help="record file to measure into or resume (default: a new file in the cache)")
    p.add_argument("--out", help="write the fitted profile here instead of the user cache "
                                 "(then profile='auto' does not pick it up)")
    p.add_argument("--batch", type=int, default=25, help="configs measured per batch (default 25)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import time

    from schedule_gym import cache, hardware
    from schedule_gym.backends.mock.profile import write_profile
    from schedule_gym.backends.mock.selection import select_profile
    from schedule_gym.calibration import MIN_CONFIGS, calibrate

    # every input is checked before anything is measured
    tasks = [get_task(name) for name in args.tasks]  # an unknown name: ValueError naming it
    if len({t.name for t in tasks}) < len(tasks):
        raise CLIError(f"--tasks names a task twice: {' '.join(args.tasks)}")
    if args.configs < MIN_CONFIGS:
        raise CLIError(f"--configs must be at least {MIN_CONFIGS} (two to fit on, two to hold out), got {args.configs}")
    if not 0.0 < args.held_out < 1.0:
        raise CLIError(f"--held-out must be a share strictly between 0 and 1, got {args.held_out}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be a positive integer, got {args.threads}")
    if args.batch < 1:
        raise CLIError(f"--batch must be a positive integer, got {args.batch}")
    cpu = hardware.cpu_name()
    start, origin = select_profile(cpu)  # a malformed cached profile: ValueError naming the file and field
    out = Path(args.out) if args.out else cache.profile_path(cpu)
    if out.is_dir():
        raise CLIError(f"--out {out} is a directory; give a file name such as {out / (cpu + '.json')}")
    records = Path(args.records or cache.calibration_dir() / f"{cpu}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    if records.is_dir():
        raise CLIError(f"--records {records} is a directory, not a record file")
    require("schedule-gym calibrate (it measures kernels with TVM)", "tvm")
    threads = args.threads or os.cpu_count() or 1
    print(f"CPU {cpu} (AVX-512: {'yes' if hardware.cpu_has_avx512(cpu) else 'no'}), {threads} threads; "
          f"starting profile {start.name} ({origin}); {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"measuring {len(tasks)} tasks x {args.configs} random configs (seed {args.seed}) with the TVM backend "
          f"into {records}", flush=True)
    records.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # no kernel is censored: the slowest configs' ranks are part of what the profile must model
    try:
        result = calibrate(tasks, args.configs, records, start, name=f"{cpu}-{threads}core-calibrated",
                           seed=args.seed, held_out=args.held_out, cores=threads,
                           backend_options={"num_threads": threads, "protocol": {"censor_ratio": None}},
                           batch=args.batch)
    except KeyboardInterrupt:
        print(f"interrupted: nothing fitted; the measurements so far are in {records} (give --records {records} "
              "with the same tasks and seed to resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"\nmeasured and fitted in {time.perf_counter() - t0:.0f} s; fit: {result.fit}")
    print(result.table())
    written = write_profile(result.profile, out)
    print(f"\nheld-out Spearman {result.spearman_fitted:.3f} (mean over {len(tasks)} tasks; starting profile "
          f"{start.name}: {result.spearman_start:.3f})")
    if result.spearman_fitted < result.spearman_start:
        print(f"note: the fitted profile ranks the held-out configs worse than {start.name} does "
              f"(more --configs may help; delete {written} to stop using it)")
    cached = cache.profile_path(cpu)
    where = ("the mock's profile='auto' uses it on this CPU from now on" if written.resolve() == cached.resolve()
             else f"profile='auto' does not read it (its file for this CPU is {cached})")
    print(f"wrote profile {result.profile.name} to {written}: {where}")
    return 0
