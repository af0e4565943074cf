"""Does a 12-accumulator micro-kernel help ``gemm-cpu-v2`` at 1024^3 on an AVX2 CPU? An experiment.

At 1024 every factor of ``gemm-cpu-v2`` divides 1024, so its micro-tiles on AVX2 (8 lanes, 16 ymm
registers) have at most 8 accumulators (4x16, 2x32, 8x8) where OpenBLAS and MKL use 12 (6x16). This
script builds the 6x16 kernel by padding ``M`` to a multiple of 6 with TVM's ``pad_einsum`` (``A`` is
zero-padded as it is packed, the padded output rows are computed into a per-block buffer and dropped),
keeps everything else of the v2 schedule, and times it side by side with the best unpadded kernels
(GFLOP/s counted on the real 1024^3 work; every kernel checked against NumPy in float64 first):
``--rounds`` interleaved rounds, each kernel 5 warm-ups then the best of 30 single calls.

    python examples/benchmarks/padded_microkernel.py [--rounds 3] [--threads 2]

Not part of the package: the tile space has no padded extents; this measures whether they would pay.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from schedule_gym.hardware import cpu_name
from schedule_gym.operators import get_workload, packed_task
from schedule_gym.tasks import gemm

# (padded M, ((m0, m1, m2), (k0, k1), (n0, n1, n2))): the last factor of m is MR, of n is NR
KERNELS = [
    (1024, ((2, 256, 2), (8, 128), (1, 32, 32))),  # 2x32, the best hand-picked v2 kernel of 2026-11-23
    (1024, ((4, 128, 2), (4, 256), (1, 32, 32))),  # 2x32
    (1024, ((4, 64, 4), (4, 256), (1, 64, 16))),  # 4x16
    (1032, ((4, 43, 6), (4, 256), (1, 64, 16))),  # 6x16, M padded by 8 rows
    (1032, ((4, 43, 6), (4, 256), (2, 32, 16))),
    (1032, ((2, 86, 6), (8, 128), (1, 64, 16))),
    (1056, ((8, 22, 6), (4, 256), (1, 64, 16))),  # 6x16, M padded by 32 rows
]


def build(m: int, k: int, n: int, padded_m: int, config) -> object:
    """The v2 schedule (templates/packed_matmul.py, version 2) on ``M`` padded to ``padded_m`` rows."""
    import tvm
    import tvm.s_tir as s_tir

    (mo, mi, mr), (ko, kc), (no, ni, nr) = config
    if mo * mi * mr != padded_m or ko * kc != k or no * ni * nr != n:
        raise ValueError(f"{config} does not multiply to ({padded_m}, {k}, {n})")
    workload = get_workload("gemm")
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(packed_task(gemm(m, k, n)))}))
    block = sch.get_sblock(workload.main_block)
    if padded_m != m:
        sch.pad_einsum(block, [padded_m, 1, 1])  # A_pad (zero rows) -> C_pad -> C
    i, j, kk = sch.get_loops(block)
    m0, m1, m2 = sch.split(i, [mo, mi, mr])
    n0, n1, n2 = sch.split(j, [no, ni, nr])
    k0, k1 = sch.split(kk, [ko, kc])
    sch.reorder(m0, n0, k0, n1, m1, k1, m2, n2)
    pack_b = sch.cache_read(block, 1, "global")
    sch.transform_layout(pack_b, ("write", 0), lambda a, b: (b // nr, a, b % nr))
    sch.compute_at(pack_b, k0, preserve_unit_loops=True)
    pk, pn = sch.get_loops(pack_b)[-2:]
    pn_o, pn_i = sch.split(pn, [ni, nr])
    sch.reorder(pn_o, pk, pn_i)
    sch.vectorize(pn_i)
    pack_a = sch.get_sblock("A_pad") if padded_m != m else sch.cache_read(block, 0, "global")
    sch.transform_layout(pack_a, ("write", 0), lambda a, b: (a // mr, b, a % mr))
    sch.compute_at(pack_a, k0, preserve_unit_loops=True)
    pm, pk = sch.get_loops(pack_a)[-2:]
    pm_o, pm_i = sch.split(pm, [mi, mr])
    sch.reorder(pm_o, pk, pm_i)
    sch.unroll(pm_i)
    fused = sch.fuse(m0, n0)
    if padded_m != m:  # copy each finished block's real rows out
        out = sch.get_sblock("C_pad")
        sch.reverse_compute_at(out, fused, preserve_unit_loops=True)
        sch.vectorize(sch.split(sch.get_loops(out)[-1], [None, nr])[1])
    sch.parallel(fused)
    sch.unroll(m2)
    sch.vectorize(n2)
    sch.decompose_reduction(block, k0)
    return sch.mod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    import tvm

    from schedule_gym.backends.tvm.targets import host_llvm_target

    m = k = n = 1024
    print(f"GEMM {m}^3 float32, {args.threads} threads, CPU {cpu_name()}, {time.strftime('%Y-%m-%d %H:%M')}")
    target = tvm.target.Target(host_llvm_target(args.threads))
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    a_np, b_np = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    expected = a_np.astype(np.float64) @ b_np.astype(np.float64)
    a, b = tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(b_np, dev)
    c = tvm.runtime.tensor(np.zeros((m, n), np.float32), dev)
    kernels = []
    for padded_m, config in KERNELS:
        with target:
            lib = tvm.compile(build(m, k, n, padded_m, config), target=target)
        lib["main"](a, b, c)
        np.testing.assert_allclose(c.numpy(), expected, rtol=1e-4)  # wrong kernels stop the experiment
        kernels.append((f"M={padded_m} MR={config[0][2]} NR={config[2][2]} {config}", lib))
    flops = 2 * m * n * k
    gflops: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for label, lib in kernels:
            for _ in range(5):
                lib["main"](a, b, c)
            times = lib.mod.time_evaluator("main", dev, number=1, repeat=30)(a, b, c).results
            gflops.setdefault(label, []).append(flops / min(times) * 1e-9)
    width = max(len(label) for label in gflops) + 2
    print(f"{'kernel':<{width}}{'best':>8}{'median':>8}   GFLOP/s over {args.rounds} rounds")
    for label, values in gflops.items():
        print(f"{label:<{width}}{max(values):>8.1f}{statistics.median(values):>8.1f}")


if __name__ == "__main__":
    sys.exit(main())
