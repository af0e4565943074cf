"""The CPU template's best GEMM 1024^3 kernels next to NumPy/OpenBLAS and torch, side by side in one run.

Takes the fastest configs of a record file (default: the shipped calibration sample, 600 random
configs), times each again precisely (10 repeats of at least 100 ms), and in the same run, interleaved,
times ``A @ B`` with NumPy under OpenBLAS's ``Haswell`` kernels (what this sandbox forces with
``OPENBLAS_CORETYPE=Haswell``) and its ``SkylakeX`` (AVX-512) kernels, and torch. Every library runs in
its own subprocess so the environment variable takes effect. Prints min and median GFLOP/s of each.

    python examples/benchmarks/template_vs_blas.py [--top 5] [--rounds 5] [--records FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from schedule_gym import gemm
from schedule_gym.backends.tvm_backend import TVMBackend
from schedule_gym.data import CALIBRATION
from schedule_gym.records import RecordStore

LIBRARY = r"""
import json, sys, time
import numpy as np
lib = sys.argv[1]
n = 1024
a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
if lib == "torch":
    import torch
    a, b = torch.from_numpy(a), torch.from_numpy(b)
for _ in range(5):
    a @ b
times = []
for _ in range(30):
    t = time.perf_counter(); a @ b; times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def library_times(lib: str, coretype: str | None) -> list[float]:
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([sys.executable, "-c", LIBRARY, lib], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


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
    backend = TVMBackend(protocol={"repeat": 10, "min_repeat_ms": 100, "early_stop_ratio": None, "coarse_above_s": None})
    flops = task.flops
    gflops: dict[str, list[float]] = {}
    for _ in range(args.rounds):  # interleave everything, round after round
        for config in top:
            (r,) = backend.measure(task, [config])
            if r.ok:
                gflops.setdefault(f"template {config}", []).append(flops / min(r.costs_s) * 1e-9)
        for label, lib, core in (
            ("NumPy, OpenBLAS Haswell kernels", "numpy", "Haswell"),
            ("NumPy, OpenBLAS SkylakeX (AVX-512) kernels", "numpy", "SkylakeX"),
            ("torch 2.13 (CPU)", "torch", None),
        ):
            gflops.setdefault(label, []).append(flops / min(library_times(lib, core)) * 1e-9)
    backend.close()
    print(f"GEMM 1024^3 float32, {os.cpu_count()} threads, {args.rounds} interleaved rounds (GFLOP/s of the best run per round)")
    print(f"{'kernel':<72}{'min':>8}{'median':>8}{'max':>8}")
    for label, values in gflops.items():
        v = np.array(values)
        print(f"{label:<72}{v.min():>8.1f}{np.median(v):>8.1f}{v.max():>8.1f}")


if __name__ == "__main__":
    main()
