"""Calibrate the mock model against real TVM measurements on this machine, for one or several operators.

1. measures N uniformly random configs (seeded) of each task with the TVM backend into a record file
   (resumable; the sample behind the shipped Zen 5 profile is ``schedule_gym/data/calibration-gemm-1024.jsonl.gz``);
2. splits each task's sample in halves and fits one CPU profile on all the first halves together, starting
   from the profile the mock picks on this CPU (:func:`schedule_gym.calibration.calibrate`, the same
   steps ``schedule-gym calibrate`` runs: a profile describes the CPU, not an operator);
3. reports, per task, Spearman's rank correlation between mock and real latency on the held-out half,
   for the starting profile and the fitted one, and prints the fitted profile.

Configs whose first run was slow are timed from that one run (``coarse``) unless ``--precise`` is given:
their rank is roughly right, their value less precise (a single cold run of a millisecond kernel is
noisy; ``--precise`` times them fully). Failed configs are left out.

    python examples/benchmarks/calibrate_mock.py --tasks gemm-1024 resnet50/conv6 bert-base/attn-qk --configs 300
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from schedule_gym.backends import PROFILES
from schedule_gym.backends.mock.selection import select_profile
from schedule_gym.calibration import calibrate
from schedule_gym.hardware import cpu_has_avx512
from schedule_gym.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["gemm-1024"], help="task names (schedule-gym tasks)")
    parser.add_argument("--configs", type=int, default=600, help="random configs measured per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--records", default="runs/calibration.jsonl")
    parser.add_argument("--precise", action="store_true",
                        help="time every config fully (no single-run 'coarse' timings of slow configs)")
    parser.add_argument("--profile", default=None, choices=list(PROFILES),
                        help="starting profile (default: the one the mock's profile='auto' picks on this CPU)")
    args = parser.parse_args()

    import tvm

    cpu = tvm.target.codegen.llvm_get_system_cpu()
    start, origin = (PROFILES[args.profile], "named") if args.profile else select_profile()
    print(f"CPU: {cpu} (LLVM), AVX-512: {cpu_has_avx512()}; starting profile {start.name} ({origin}); "
          f"{time.strftime('%Y-%m-%d')}")
    Path(args.records).parent.mkdir(parents=True, exist_ok=True)
    options = {"protocol": {"early_stop_ratio": None, "coarse_above_s": None, "censor_ratio": None}} if args.precise else None
    t0 = time.perf_counter()
    result = calibrate([get_task(name) for name in args.tasks], args.configs, args.records, start,
                       name=f"{cpu}-2core-fitted", seed=args.seed, backend_options=options)
    print(f"measured in {time.perf_counter() - t0:.0f} s (with what the records already held)")
    print("fit:", result.fit)
    print(result.table())
    print(f"\nfitted profile:\n{result.profile}")


if __name__ == "__main__":
    main()
