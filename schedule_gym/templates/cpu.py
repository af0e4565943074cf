"""The CPU (LLVM) template: a tile config of any operator as a TVM ``s_tir`` schedule.

It builds the loop nest :class:`schedule_gym.loopnest.LoopNest` describes (for GEMM 4/2/4:
``m0 n0 m1 n1 | k0 m2 n2 k1 m3 n3``) on the operator's definition from its workload
(:mod:`schedule_gym.operators`):

* the workload's inline blocks (a convolution's padding) are folded into the main block;
* every loop of the main block is split by the config's factors and the loops reordered;
* the parallel prefix is fused and run in parallel;
* the output tile below it accumulates in a ``local`` buffer (``cache_write``), written back once; an
  epilogue (bias, activation) is folded into that write-back, whose innermost loop is vectorised;
* the vector loop is vectorised and the unroll loop unrolled;
* the reduction's initialisation is hoisted above the first reduction loop (``decompose_reduction``; it
  must come after vectorize/unroll: the other order makes ``vectorize`` fail).

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.loopnest import LoopNest
from schedule_gym.operators import get_workload
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["schedule_cpu"]


def schedule_cpu(task: Task, config: Config) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``."""
    import tvm
    import tvm.s_tir as s_tir

    workload = get_workload(task.op)
    nest = LoopNest.cpu(task)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    for name in workload.blocks_to_inline(task):
        sch.compute_inline(sch.get_sblock(name))
    block = sch.get_sblock(workload.main_block)
    axes = dict(zip(workload.block_dims(task), sch.get_loops(block)))
    factors = dict(zip(task.dim_names, config))
    loops = {}
    for name in task.dim_names:
        split = sch.split(axes[name], list(factors[name])) if len(factors[name]) > 1 else [axes[name]]
        for level, loop in enumerate(split):
            loops[(name, level)] = loop
    order = [loops[key] for key in nest.order]
    sch.reorder(*order)

    n_parallel = nest.n_parallel
    inner_parallel = order[n_parallel - 1] if n_parallel else None
    local = sch.cache_write(block, 0, "local")
    if inner_parallel is not None:
        sch.reverse_compute_at(local, inner_parallel)
    for name in workload.epilogues(task):  # bias, activation: computed as the tile is written back
        sch.reverse_compute_inline(sch.get_sblock(name))
    if n_parallel > 1:
        fused = sch.fuse(*order[:n_parallel])
    elif n_parallel == 1:
        fused = order[0]
    else:
        fused = None
    if fused is not None:
        sch.parallel(fused)
    # the write-back of the local tile: vectorise its innermost loop
    writeback = sch.get_loops(local)[1 if fused is not None else 0 :]
    if writeback:
        sch.vectorize(writeback[-1])

    if nest.vector is not None:
        sch.vectorize(order[nest.vector])
    if nest.unroll is not None:
        sch.unroll(order[nest.unroll])
    if nest.first_reduction is not None:
        sch.decompose_reduction(block, order[nest.first_reduction])
    return sch.mod
