"""The CPU template's best GEMM 1024^3 kernels next to NumPy/OpenBLAS and torch, side by side in one run.

Takes the fastest configs of a record file (default: the shipped calibration sample, 600 random
configs), times each again precisely (10 repeats of at least 100 ms), and in the same run, interleaved,
times ``A @ B`` with NumPy under OpenBLAS's ``Haswell`` kernels (what this sandbox forces with
``OPENBLAS_CORETYPE=Haswell``), its ``Zen`` and, on an AVX-512 CPU, its ``SkylakeX`` kernels, and torch, with
:func:`schedule_gym.reference.library_gemm_times`: every library runs in its own subprocess so the
environment variable takes effect, and the label says which OpenBLAS kernels actually ran. Prints min,
median and max GFLOP/s of each (over rounds, of the best run per round).

    python examples/benchmarks/template_vs_blas.py [--top 5] [--rounds 5] [--records FILE]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from schedule_gym import gemm
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.data import CALIBRATION
from schedule_gym.records import RecordStore
from schedule_gym.hardware import cpu_has
from schedule_gym.reference import CORETYPE_NEEDS, library_gemm_times

#: (library, OPENBLAS_CORETYPE): this environment's NumPy kernels as the sandbox forces them, the Zen
#: and AVX-512 ones, and torch. Each run is 5 warm-ups and 30 single calls, as before. Kernel types this
#: CPU cannot run (SkylakeX without AVX-512: an illegal instruction) are left out.
LIBRARIES = tuple(
    (lib, core) for lib, core in (("numpy", "Haswell"), ("numpy", "Zen"), ("numpy", "SkylakeX"), ("torch", None))
    if core is None or cpu_has(CORETYPE_NEEDS[core.lower()])
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(CALIBRATION))
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    task = gemm(1024, 1024, 1024)
    store = RecordStore(args.records)
    ok = sorted((r.result for r in store.records_of(task) if r.result.ok), key=lambda r: r.latency_s)
    top = [r.config for r in ok[: args.top]]
    backend = TVMBackend(protocol={"repeat": 10, "min_repeat_ms": 100, "early_stop_ratio": None, "coarse_above_s": None, "censor_ratio": None})
    flops = task.flops
    gflops: dict[str, list[float]] = {}
    for _ in range(args.rounds):  # interleave everything, round after round
        for config in top:
            (r,) = backend.measure(task, [config])
            if r.ok:
                gflops.setdefault(f"template {config}", []).append(flops / min(r.costs_s) * 1e-9)
        for lib, core in LIBRARIES:
            times = library_gemm_times(task, lib, coretype=core, repeats=30, min_repeat_ms=0, warmup=5)
            gflops.setdefault(times.label, []).append(times.stats.best_gflops)
    backend.close()
    print(f"GEMM 1024^3 float32, {os.cpu_count()} threads, {args.rounds} interleaved rounds (GFLOP/s of the best run per round)")
    width = max(len(label) for label in gflops) + 2
    print(f"{'kernel':<{width}}{'min':>8}{'median':>8}{'max':>8}")
    for label, values in gflops.items():
        v = np.array(values)
        print(f"{label:<{width}}{v.min():>8.1f}{np.median(v):>8.1f}{v.max():>8.1f}")


if __name__ == "__main__":
    main()
