"""Calibrate the mock model against real TVM measurements of GEMM 1024^3 on this machine.

1. measures N uniformly random configs (seeded) with the TVM backend into a record file (resumable;
   the sample used for the shipped default profile is ``schedule_gym/data/calibration-gemm-1024.jsonl.gz``);
2. splits them in halves, fits the profile on one half (:func:`schedule_gym.calibration.fit_profile`);
3. reports Spearman's rank correlation between mock and real latency on the held-out half and on all,
   for the profile before and after the fit, and prints the fitted profile.

Configs whose first run was slow are timed from that one run (``coarse``): their rank is right, their
value less precise. Failed configs are left out.

    python examples/benchmarks/calibrate_mock.py [--configs 600] [--records runs/calibration.jsonl]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from schedule_gym import TileSpace, gemm
from schedule_gym.backends import PROFILES, ReplayBackend
from schedule_gym.backends.mock import mock_latency_s
from schedule_gym.calibration import fit_profile, spearman
from schedule_gym.records import RecordStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--records", default="runs/calibration-gemm-1024.jsonl")
    parser.add_argument("--profile", default="avx512-2core-nominal", help="starting profile")
    parser.add_argument("--no-measure", action="store_true", help="only fit the records there are")
    args = parser.parse_args()

    task = gemm(1024, 1024, 1024)
    space = TileSpace(task)
    rng = np.random.default_rng(args.seed)
    configs = [space.config(int(i)) for i in rng.choice(space.size, args.configs, replace=False)]
    Path(args.records).parent.mkdir(parents=True, exist_ok=True)
    if not args.no_measure:
        from schedule_gym.backends.tvm_backend import TVMBackend

        backend = ReplayBackend(args.records, delegate=TVMBackend())
        for start in range(0, len(configs), 25):
            backend.measure(task, configs[start : start + 25])
            print(f"  measured {min(start + 25, len(configs))}/{len(configs)}", flush=True)
        backend.close()

    store = RecordStore(args.records)
    records = {r.result.config: r.result for r in store.records_of(task)}
    pairs = [(c, records[c]) for c in configs if c in records and records[c].ok]
    failed = sum(1 for c in configs if c in records and not records[c].ok)
    print(f"{len(pairs)} measured configs ({failed} failed, {sum(r.coarse for _, r in pairs)} timed from one run)")
    half = len(pairs) // 2
    fit_set, held_out = pairs[:half], pairs[half:]
    base = PROFILES[args.profile]
    report = fit_profile(task, [c for c, _ in fit_set], [r.latency_s for _, r in fit_set], base, name="fitted")
    print("fit:", report)

    for label, profile in (("before", base), ("after", report.profile)):
        for set_name, subset in (("held-out half", held_out), ("all", pairs)):
            idx = np.array([space.index(c) for c, _ in subset])
            pred = mock_latency_s(task, space, idx, profile)
            real = [r.latency_s for _, r in subset]
            print(f"Spearman mock vs real, {label:<6} fit, {set_name:<13} ({len(subset)} configs): {spearman(pred, real):.3f}")
    real_best = min(r.latency_s for _, r in pairs)
    print(f"best real config in the sample: {task.flops / real_best * 1e-9:.1f} GFLOP/s")
    print("\nfitted profile:\n", report.profile)


if __name__ == "__main__":
    main()
