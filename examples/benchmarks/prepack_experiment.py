"""Would packing A and B once for all blocks beat ``gemm-cpu-v2``'s per-block packing? A side-by-side test.

``gemm-cpu-v2`` packs each block's panels of ``A`` and ``B`` inside the parallel loop, so a panel is packed
once per block that uses it (``B`` ``M/MC`` times, ``A`` ``N/NC`` times). This script builds, for GEMM
1024^3 and five good v2 configs, the v2 schedule and variants that pack ``A``, ``B`` or both once, in a
parallel pre-pass over the whole matrix (the micro-kernel unchanged), checks each against float64, and
times them under the libraries' protocol (5 warm-ups, best of 30 calls) in 5 interleaved rounds.
Prints GFLOP/s best / median of the rounds. Run with ``TVM_NUM_THREADS`` set to the core count.

On the Zen 4 of 2026-11-25 (two runs) pre-packing gained 3-4% where ``n0 = 8`` re-packs ``A`` 8 times and
at most 2% elsewhere, and no variant passed the best per-block config: not made a template.

    TVM_NUM_THREADS=2 python examples/benchmarks/prepack_experiment.py
"""

import statistics
import time

import numpy as np
import tvm
import tvm.s_tir as s_tir

from schedule_gym.backends.tvm.targets import resolve_target
from schedule_gym.hardware import cpu_name
from schedule_gym.operators import get_workload, packed_task
from schedule_gym.tasks import gemm


def pack(sch, block, operand: int, index_map, k0, pre_pass: bool, tiles: int, lanes: int, inner) -> None:
    """Pack ``operand`` of ``block`` into ``index_map``'s panel layout: per ``(block, k0)`` as
    ``gemm-cpu-v2`` does (``tiles`` panels of ``lanes``), or once for the whole matrix in a parallel
    pre-pass; ``inner`` (``sch.vectorize`` or ``sch.unroll``) is applied to the ``lanes`` loop."""
    packed = sch.cache_read(block, operand, "global")
    sch.transform_layout(packed, ("write", 0), index_map)
    if not pre_pass:
        sch.compute_at(packed, k0, preserve_unit_loops=True)
    rows, cols = sch.get_loops(packed)[-2:]
    # the panel dimension (B's n, the columns; A's m, the rows) is split into panels of ``lanes``
    panel, depth = (cols, rows) if operand == 1 else (rows, cols)
    outer, lane = sch.split(panel, [None if pre_pass else tiles, lanes])
    sch.reorder(outer, depth, lane)
    if pre_pass:
        sch.parallel(outer)
    inner(lane)


def sched(task, config, glob_a: bool, glob_b: bool):
    """The v2 schedule of ``config`` (as in ``templates/packed_matmul.py``, version 2, the batch loop, transposed
    operands and epilogues left out), packing A (``glob_a``) and B (``glob_b``) in a pre-pass instead of
    per block."""
    factors = dict(zip(task.dim_names, config))
    (mo, mi, mr), (ko, kc), (no, ni, nr) = factors["m"], factors["k"], factors["n"]
    workload = get_workload(task.op)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    axes = dict(zip(workload.block_dims(task), sch.get_loops(block)))
    m0, m1, m2 = sch.split(axes["m"], [mo, mi, mr])
    n0, n1, n2 = sch.split(axes["n"], [no, ni, nr])
    k0, k1 = sch.split(axes["k"], [ko, kc])
    sch.reorder(m0, n0, k0, n1, m1, k1, m2, n2)
    pack(sch, block, 1, lambda kk, nn: (nn // nr, kk, nn % nr), k0, glob_b, ni, nr, sch.vectorize)
    pack(sch, block, 0, lambda ii, kk: (ii // mr, kk, ii % mr), k0, glob_a, mi, mr, sch.unroll)
    fused = sch.fuse(m0, n0)
    sch.parallel(fused)
    sch.unroll(m2)
    sch.vectorize(n2)
    sch.decompose_reduction(block, k0)
    return sch.mod


#: good v2 configs at 1024^3 on the Zen 4 of 2026-11-25 (the searches' and hand-picked bests)
CONFIGS = [((2, 128, 4), (4, 256), (8, 2, 64)), ((2, 128, 4), (8, 128), (1, 16, 64)), ((4, 64, 4), (4, 256), (1, 16, 64)),
           ((4, 32, 8), (4, 256), (1, 32, 32)), ((2, 64, 8), (8, 128), (1, 32, 32))]
#: variant -> (pre-pack A, pre-pack B)
VARIANTS = {"v2": (False, False), "preB": (False, True), "preA": (True, False), "preAB": (True, True)}


def main() -> None:
    task = packed_task(gemm(1024, 1024, 1024))
    workload = get_workload(task.op)
    target = tvm.target.Target(resolve_target("llvm"))
    dev = tvm.cpu()
    inputs = workload.inputs(task)
    expected, tol = workload.reference(task, inputs)
    args = [tvm.runtime.tensor(x, dev) for x in inputs] + [tvm.runtime.empty(workload.output_shape(task), task.dtype, dev)]
    print(f"{task.name}, CPU {cpu_name()}, {time.strftime('%Y-%m-%d %H:%M')}; GFLOP/s best / median of 5 rounds")
    modules = {}
    for config in CONFIGS:
        for variant, (glob_a, glob_b) in VARIANTS.items():
            with target:
                executable = tvm.compile(sched(task, config, glob_a, glob_b), target=target)
            executable["main"](*args)
            problem = workload.check(task, args[-1].numpy(), expected, tol)
            if problem:
                raise SystemExit(f"{variant} {config}: {problem}")
            modules[(config, variant)] = executable
    gflops: dict = {key: [] for key in modules}
    for _ in range(5):
        for key, executable in modules.items():
            timer = executable.mod.time_evaluator("main", dev, number=1, repeat=30, min_repeat_ms=0)
            for _ in range(5):
                executable["main"](*args)
            gflops[key].append(task.flops / min(timer(*args).results) * 1e-9)
    for config in CONFIGS:
        print(config, "  ".join(f"{v} {max(gflops[(config, v)]):6.1f}/{statistics.median(gflops[(config, v)]):6.1f}" for v in VARIANTS))


if __name__ == "__main__":
    main()
