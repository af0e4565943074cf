"""Calibrate the mock model against real TVM measurements on this machine, for one or several operators.

1. measures N uniformly random configs (seeded) of each task with the TVM backend into a record file
   (resumable; the sample behind the shipped Zen 5 profile is ``schedule_gym/data/calibration-gemm-1024.jsonl.gz``);
2. splits each task's sample in halves and fits one CPU profile on all the first halves together
   (:func:`schedule_gym.calibration.fit_profile`: a profile describes the CPU, not an operator);
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

import numpy as np

from schedule_gym.backends import PROFILES
from schedule_gym.calibration import fit_profile, measure_sample
from schedule_gym.hardware import cpu_has
from schedule_gym.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["gemm-1024"], help="task names (schedule-gym tasks)")
    parser.add_argument("--configs", type=int, default=600, help="random configs measured per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--records", default="runs/calibration.jsonl")
    parser.add_argument("--precise", action="store_true",
                        help="time every config fully (no single-run 'coarse' timings of slow configs)")
    parser.add_argument("--profile", default=None,
                        help="starting profile (default: avx512-2core-nominal or avx2-2core-nominal, by this CPU)")
    args = parser.parse_args()

    import tvm

    cpu = tvm.target.codegen.llvm_get_system_cpu()
    start = args.profile or ("avx512-2core-nominal" if cpu_has("avx512f") else "avx2-2core-nominal")
    print(f"CPU: {cpu} (LLVM), AVX-512: {cpu_has('avx512f')}; starting profile {start}; "
          f"{time.strftime('%Y-%m-%d')}")
    Path(args.records).parent.mkdir(parents=True, exist_ok=True)
    samples = []
    for name in args.tasks:
        t0 = time.perf_counter()
        options = {"protocol": {"early_stop_ratio": None, "coarse_above_s": None}} if args.precise else None
        sample = measure_sample(get_task(name), args.configs, args.records, seed=args.seed, backend_options=options)
        print(f"{name}: {len(sample.configs)} of {args.configs} configs measured successfully "
              f"({time.perf_counter() - t0:.0f} s with what the records already held)")
        samples.append(sample)
    halves = [s.split() for s in samples]
    base = PROFILES[start]
    report = fit_profile([fit for fit, _ in halves], base, name=f"{cpu}-2core-fitted")
    print("fit:", report)
    print(f"{'task':<28} {'configs held out':>16} {'Spearman before':>16} {'after':>8}   best real GFLOP/s")
    for sample, (_, held_out) in zip(samples, halves):
        best = sample.task.flops / min(sample.latencies_s) * 1e-9
        print(f"{sample.task.name:<28} {len(held_out.configs):>16} {held_out.spearman(base):>16.3f} "
              f"{held_out.spearman(report.profile):>8.3f}   {best:.1f}")
    print(f"\nfitted profile:\n{report.profile}")
    print(f"(mean held-out Spearman after the fit: {np.mean([h.spearman(report.profile) for _, h in halves]):.3f})")


if __name__ == "__main__":
    main()
