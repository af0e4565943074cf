"""CPU (LLVM) schedule template: a GEMM tile config as a TVM ``s_tir`` schedule.

The loop nest is the task's ``loop_order`` (for splits 4/2/4: ``m0 n0 m1 n1 k0 m2 n2 k1 m3 n3``):

* the leading spatial loops (those outside the first reduction loop) are fused and run in parallel;
* the output tile below them accumulates in a ``local`` buffer (``cache_write``), written back once;
* the innermost loop is vectorised (``n3``, contiguous in B and C) and the one outside it unrolled (``m3``);
* the reduction's initialisation is hoisted out of the k loops (``decompose_reduction``; it must come
  after vectorize/unroll, see shared/TVM_NOTES.md).

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

#: Bump when the generated code changes: records remember it and never mix versions.
TEMPLATE_VERSION = "gemm-cpu-v1"


def gemm_prim_func(task: Task) -> Any:
    """``C[m, n] = sum_k A[m, k] * B[k, n]`` as a TE-built PrimFunc named ``main``."""
    from tvm import te

    if task.op != "gemm":
        raise ValueError(f"the GEMM template cannot build task {task.name!r} of op {task.op!r}")
    m, k, n = (task.dim(x).extent for x in ("m", "k", "n"))
    a = te.placeholder((m, k), name="A", dtype=task.dtype)
    b = te.placeholder((k, n), name="B", dtype=task.dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


def schedule_gemm_cpu(task: Task, config: Config) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``."""
    import tvm
    import tvm.s_tir as s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": gemm_prim_func(task)}))
    block = sch.get_sblock("C")
    axes = dict(zip(("m", "n", "k"), sch.get_loops(block)))
    factors = dict(zip(task.dim_names, config))
    loops = {}
    for name in task.dim_names:
        split = sch.split(axes[name], list(factors[name])) if len(factors[name]) > 1 else [axes[name]]
        for level, loop in enumerate(split):
            loops[(name, level)] = loop
    order = [loops[key] for key in task.loop_order]
    sch.reorder(*order)

    reduction = {d.name for d in task.dims if d.reduction}
    n_parallel = 0
    for name, _ in task.loop_order:
        if name in reduction:
            break
        n_parallel += 1
    inner_parallel = order[n_parallel - 1] if n_parallel else None

    local = sch.cache_write(block, 0, "local")
    if inner_parallel is not None:
        sch.reverse_compute_at(local, inner_parallel)
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

    innermost, outside = task.loop_order[-1], task.loop_order[-2] if len(task.loop_order) > 1 else None
    if innermost[0] not in reduction and len(order) > n_parallel:
        sch.vectorize(order[-1])
    if outside is not None and outside[0] not in reduction and len(order) - 1 > n_parallel:
        sch.unroll(order[-2])
    first_reduction = next((i for i, (name, _) in enumerate(task.loop_order) if name in reduction), None)
    if first_reduction is not None:
        sch.decompose_reduction(block, order[first_reduction])
    return sch.mod
