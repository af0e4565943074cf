"""The CUDA template: TVM's classic block / virtual thread / thread / inner schedule, for every operator with
CUDA axes (Zhang et al., Section 5, for GEMM: the paper's GPU setting; TVM's former topi CUDA schedules for
the others).

Every spatial dimension is split in 4 levels ``(block, virtual thread, thread, inner)``, every reduction
in 2 ``(outer, inner)`` (the tasks' default splits). The spatial dimensions are grouped on CUDA axes
(:func:`cuda_axes`, which each operator's module states); at each of the three outer levels the loops of
one group are fused and bound to that group's axis, so blocks and threads use at most 3 axes.
``threadIdx.x`` gets the output's contiguous dimension (coalesced stores); a convolution's fused
``n·h·w`` (or ``h·w``) block loop goes on ``blockIdx.x``, the one grid axis allowing more than 65,535
blocks. Loop order::

    S0 (blocks) | S1 (vthreads) | S2 (threads) | R0 (every reduction) | R1 | S3 (inner)

Each thread accumulates its ``S3`` tile (times its virtual threads) in registers (``local``). The
operands' tiles of one ``R0`` step (the innermost outer reduction loop) are staged in shared memory,
loaded cooperatively by all threads of the block; a convolution's ``pad`` block (its workload's inline
blocks) is inlined into that load, so the staged input tile is the padded one. For GEMM this is
``m0 n0 | m1 n1 | m2 n2 | k0 k1 | m3 n3`` with ``m0/n0`` on ``blockIdx.y/x``, ``m1/n1`` on ``vthread.y/x`` and
``m2/n2`` on ``threadIdx.y/x``. The template builds no epilogue (a task with one is refused).

Configs CUDA cannot launch (more than :data:`MAX_THREADS_PER_BLOCK` threads a block, more than 64
threads on ``threadIdx.z``, more than 65,535 blocks on ``blockIdx.y`` or ``z``) are refused at build time
with a ValueError naming the loops; configs needing more shared memory than the device has fail in nvcc
(a failed build, as in the paper's legality bit ``J``). TVM is imported lazily.
"""

from __future__ import annotations

import math
from typing import Any

from schedule_gym.operators import CudaAxis, get_operator, get_workload, operator_names
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["MAX_THREADS_PER_BLOCK", "cuda_axes", "schedule_cuda"]

#: CUDA's limit on threads in one block (every GPU since compute capability 2.0). A config over it
#: builds, but its launch fails (``CUDA_ERROR_INVALID_VALUE``, seen on an H100): refused at build time.
MAX_THREADS_PER_BLOCK = 1024
#: CUDA's per-axis limits on a block's threads and on the grid's blocks (compute capability >= 3.0).
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID_DIM = {"x": 2**31 - 1, "y": 65535, "z": 65535}
SPATIAL_LEVELS = 4  # block, virtual thread, thread, inner
REDUCTION_LEVELS = 2  # outer, inner


def cuda_axes(task: Task) -> tuple[CudaAxis, ...]:
    """How ``task``'s spatial dimensions map to CUDA axes (its operator's ``cuda_axes``), outermost first."""
    axes = get_operator(task.op).cuda_axes
    if axes is None:
        have = ", ".join(op for op in operator_names() if get_operator(op).cuda_axes is not None)
        raise ValueError(f"the CUDA template builds {have} tasks, not {task.op!r} ({task.name})")
    return axes(task)


def _check_launch(task: Task, config: Config, axes: tuple[CudaAxis, ...]) -> None:
    """Refuse configs whose launch would fail, naming the loops and their factors."""
    factors = dict(zip(task.dim_names, config))

    def product(level: int, dims: tuple[str, ...]) -> tuple[int, str]:
        names = " x ".join(f"{d}{level}" for d in dims)
        values = " x ".join(str(factors[d][level]) for d in dims)
        return math.prod(factors[d][level] for d in dims), f"{names} = {values}"

    spatial = tuple(d for axis in axes for d in axis.dims)
    threads, text = product(2, spatial)
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(
            f"config {config} needs {threads} threads a block ({text}); CUDA allows {MAX_THREADS_PER_BLOCK}"
        )
    for axis in axes:
        count, text = product(2, axis.dims)
        if count > MAX_BLOCK_DIM[axis.thread]:
            raise ValueError(
                f"config {config} needs {count} threads on threadIdx.{axis.thread} ({text}); "
                f"CUDA allows {MAX_BLOCK_DIM[axis.thread]}"
            )
        count, text = product(0, axis.dims)
        if count > MAX_GRID_DIM[axis.block]:
            raise ValueError(
                f"config {config} needs {count} blocks on blockIdx.{axis.block} ({text}); "
                f"CUDA allows {MAX_GRID_DIM[axis.block]}"
            )


def schedule_cuda(task: Task, config: Config) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``."""
    import tvm
    import tvm.s_tir as s_tir

    axes = cuda_axes(task)
    expected = tuple(REDUCTION_LEVELS if d.reduction else SPATIAL_LEVELS for d in task.dims)
    if task.splits != expected:
        raise ValueError(
            f"the CUDA template needs splits {expected} ({SPATIAL_LEVELS} loops per spatial dimension, "
            f"{REDUCTION_LEVELS} per reduction), got {task.splits} for {task.name!r}"
        )
    _check_launch(task, config, axes)
    workload = get_workload(task.op)
    factors = dict(zip(task.dim_names, config))
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    dims = workload.block_dims(task)
    loops = {name: sch.split(loop, list(factors[name])) for name, loop in zip(dims, sch.get_loops(block))}
    reductions = [d.name for d in task.dims if d.reduction]
    spatial = [name for axis in axes for name in axis.dims]
    inner = [name for name in dims if name not in reductions]
    sch.reorder(
        *[loops[name][level] for level in range(3) for name in spatial],
        *[loops[name][level] for level in range(2) for name in reductions],
        *[loops[name][3] for name in inner],
    )
    bound = []  # (tier, axis, loop) for the block, vthread and thread tiers
    for level, tier in enumerate(("blockIdx", "vthread", "threadIdx")):
        for axis in axes:
            own = [loops[name][level] for name in axis.dims]
            fused = sch.fuse(*own) if len(own) > 1 else own[0]
            sch.bind(fused, f"{tier}.{axis.block if tier == 'blockIdx' else axis.thread}")
            bound.append(fused)
    last_thread = bound[-1]
    outer_reduction = [loops[name][0] for name in reductions]
    ko = outer_reduction[-1]

    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, last_thread)
    threads = [(axis.thread, math.prod(factors[name][2] for name in axis.dims)) for axis in axes]
    for operand in range(len(sch.get(block).reads)):  # stage one R0 step's tile of every input in shared memory
        shared = sch.cache_read(block, operand, "shared")
        sch.compute_at(shared, ko)
        loops_shared = sch.get_loops(shared)
        ko_node = sch.get(ko)
        own = loops_shared[1 + next(i for i, loop in enumerate(loops_shared) if sch.get(loop).same_as(ko_node)) :]
        if not own:  # a one-element tile: nothing to share out
            continue
        fused = sch.fuse(*own) if len(own) > 1 else own[0]
        split = sch.split(fused, [None, *(count for _, count in threads)])
        for (letter, _), loop in zip(threads, split[1:]):
            sch.bind(loop, f"threadIdx.{letter}")
    for name in workload.blocks_to_inline(task):  # a convolution's padding, computed as its tile is staged
        sch.compute_inline(sch.get_sblock(name))
    sch.decompose_reduction(block, outer_reduction[0])
    return sch.mod
