"""CUDA schedule template: the paper's GPU setting (Zhang et al., Section 5; TVM's classic GEMM schedule).

Splits (4, 2, 4): ``m = (block, virtual thread, thread, inner)``, ``k = (outer, inner)``,
``n = (block, virtual thread, thread, inner)``. Loop order
``m0 n0 | m1 n1 | m2 n2 | k0 k1 | m3 n3`` with ``m0/n0`` bound to ``blockIdx.y/x``, ``m1/n1`` to
``vthread.y/x`` and ``m2/n2`` to ``threadIdx.y/x``; each thread accumulates an ``m3 x n3`` tile in
registers (``local``); A and B tiles of one ``k0`` step are staged in shared memory, loaded cooperatively
by all threads of the block. Configs that ask for more threads or shared memory than the device has fail
to build or to launch: failed measurements, as in the paper (its legality bit ``J``).
"""

from __future__ import annotations

from typing import Any

from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

TEMPLATE_VERSION = "gemm-cuda-v1"
#: CUDA's limit on threads in one block (every GPU since compute capability 2.0). A config over it
#: builds, but its launch fails (``CUDA_ERROR_INVALID_VALUE``, seen on an H100): refused at build time.
MAX_THREADS_PER_BLOCK = 1024


def schedule_gemm_cuda(task: Task, config: Config) -> Any:
    import tvm
    import tvm.s_tir as s_tir

    from schedule_gym.workloads import get_workload

    factors = dict(zip(task.dim_names, config))
    if len(factors["m"]) != 4 or len(factors["n"]) != 4 or len(factors["k"]) != 2:
        raise ValueError(f"the CUDA template needs splits (4, 2, 4), got {task.splits} for {task.name!r}")
    threads = factors["m"][2] * factors["n"][2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(
            f"config {config} needs {threads} threads a block (m2 x n2 = {factors['m'][2]} x {factors['n'][2]}); "
            f"CUDA allows {MAX_THREADS_PER_BLOCK}"
        )
    sch = s_tir.Schedule(tvm.IRModule({"main": get_workload("gemm").prim_func(task)}))
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    by, vy, ty, yi = sch.split(i, list(factors["m"]))
    bx, vx, tx, xi = sch.split(j, list(factors["n"]))
    ko, ki = sch.split(k, list(factors["k"]))
    sch.reorder(by, bx, vy, vx, ty, tx, ko, ki, yi, xi)
    sch.bind(by, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    sch.bind(vy, "vthread.y")
    sch.bind(vx, "vthread.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")

    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, tx)
    threads_y, threads_x = factors["m"][2], factors["n"][2]
    for operand in (0, 1):  # A, B: stage one k0 step's tile in shared memory
        shared = sch.cache_read(block, operand, "shared")
        sch.compute_at(shared, ko)
        loops = sch.get_loops(shared)
        ko_node = sch.get(ko)
        own = loops[1 + next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(ko_node)) :]
        if not own:  # a one-element tile: nothing to share out
            continue
        fused = sch.fuse(*own) if len(own) > 1 else own[0]
        _, ty_, tx_ = sch.split(fused, [None, threads_y, threads_x])
        sch.bind(ty_, "threadIdx.y")
        sch.bind(tx_, "threadIdx.x")
    sch.decompose_reduction(block, ko)
    return sch.mod
