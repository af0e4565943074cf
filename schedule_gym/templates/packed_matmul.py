"""``gemm-cpu-v3``, ``dense-cpu-v3``, ``batch_matmul-cpu-v3`` (and their ``-v2``): packed operands and a
register micro-kernel (BLIS's structure) for the matrix-multiply operators.

The two versions build the same loop nest from the same tile space; they differ only in how a micro-tile
row's ``NR`` columns are vectorised (:mod:`~schedule_gym.templates.vectors`): v2 as one ``<NR x float>``
vector, v3 as whole vectors, which keeps ``NR = 48`` or 96 tiles in the registers on AVX-512. v3 is the
operators' packed template (``schedule_gym.templates.PACKED``); v2 stays selectable by name, so its records
keep naming the kernels they measured.

What it builds, for ``C[m, n] = sum_k A[m, k] * B[k, n]`` in the operator's own definition (the workload's
arguments and layouts, unchanged: GEMM's ``A, B, C``; dense's ``X, W[, bias], Y`` with its bias and
activation; batch matmul's ``A, B, C`` with a batch loop ``b`` and either operand stored transposed),
from a task whose splits are **3/2/3** (and 1 for ``b``) in the loop order
``[b0] m0 n0 | k0 n1 m1 k1 m2 n2`` (the operators' packed form, :mod:`schedule_gym.operators.matmul`:
``schedule_gym.operators.packed_task`` makes one from any task of these operators) and a config
``([(b0,)], (m0, m1, m2), (k0, k1), (n0, n1, n2))``:

========  ===========  ==========================================================================
factor    BLIS name    meaning
========  ===========  ==========================================================================
``b0``    (batch)      the batch loop of a batch matmul; fused with ``m0`` and ``n0`` and run in parallel
``m0``    M / MC       blocks of ``MC = m1 * m2`` rows of ``C``; fused with ``n0`` and run in parallel
``m1``    MC / MR      micro-tiles in a row block (inside ``n1``: one ``B`` sliver meets every ``A`` one)
``m2``    MR           rows of the register micro-tile (unrolled: ``MR`` broadcasts of ``A`` a step)
``k0``    K / KC       blocks of the reduction; ``C`` is zeroed before the first and accumulated in place
``k1``    KC           reduction steps of one micro-kernel call (its packed panels are ``KC`` deep)
``n0``    N / NC       blocks of ``NC = n1 * n2`` columns; fused with ``m0`` and run in parallel
``n1``    NC / NR      micro-tiles in a column block
``n2``    NR           columns of the micro-tile, vectorised (``NR / lanes`` vector registers a row;
                       v3 writes them out as whole vectors)
========  ===========  ==========================================================================

Each factor tuple multiplies to its dimension's extent (the tile space's rule), so every factor divides
it: odd and prime extents work, with the micro-tile restricted to their divisors.

The schedule, per parallel ``([b0,] m0, n0)`` block and reduction block ``k0``:

* **pack B**: the ``KC x NC`` panel of ``B`` is copied into a per-block buffer laid out
  ``[NC/NR, KC, NR]`` (``cache_read`` + ``transform_layout`` + ``compute_at`` at ``k0``), so a
  micro-kernel reads its ``KC x NR`` sliver as one contiguous stream; the copy is vectorised along ``NR``
  (a ``B`` stored transposed is gathered into the same layout);
* **pack A**: the ``MC x KC`` block of ``A`` is copied into ``[MC/MR, KC, MR]`` the same way, so the
  ``MR`` values broadcast at each reduction step are adjacent;
  Each panel is packed once per ``([b0,] m0, n0, k0)``: ``B`` ``M/MC`` times in all, ``A`` ``N/NC`` times;
* **micro-kernel**: for each ``(n1, m1)`` (BLIS's ``jr``, ``ir`` loops: the ``KC x NR`` sliver of packed
  ``B`` stays in L1 while the ``MC x KC`` block of packed ``A`` streams past it) the ``MR x NR`` tile of
  ``C`` is updated over ``KC`` steps, ``m2`` unrolled and ``n2`` vectorised; its addresses do not depend
  on ``k1``, so LLVM keeps the tile in vector registers across the ``k1`` loop (``MR * NR / lanes``
  accumulators) and loads and stores it once per call;
* the reduction's initialisation is hoisted above ``k0`` (``decompose_reduction``, after vectorize/unroll);
* **epilogue** (dense's bias and activation): applied to the ``MC x NC`` block once its reduction is
  complete (``reverse_compute_at`` the parallel block loop), vectorised along ``NR``; the accumulator
  ``C`` is then a per-block buffer.

The micro-tile that fills the registers without spilling is ``MR * NR / lanes + NR / lanes + 1 <= 16``
ymm registers on AVX2 (e.g. 4 x 16, 6 x 16, 4 x 24; 8 x 8 is load-bound) and ``<= 32`` zmm on AVX-512
(e.g. 14 x 32, 8 x 48); the tile space does not encode that, so the search (or a seed) must find it.

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.operators import get_operator, get_workload
from schedule_gym.tasks.task import Task
from schedule_gym.templates.vectors import vector_width, vectorize_columns
from schedule_gym.types import Config

__all__ = ["OPS", "check_task", "schedule_packed_matmul"]

#: The operators the template builds.
OPS = ("gemm", "dense", "batch_matmul")


def check_task(task: Task, version: int = 3) -> None:
    """Raise ValueError naming what is wrong if ``task`` is not a task the template of ``version`` can build (its
    operator's packed form)."""
    if task.op not in OPS:
        raise ValueError(f"the packed matmul templates build {', '.join(OPS)} tasks, not {task.op!r} ({task.name})")
    form = get_operator(task.op).packed
    template = f"{task.op}-cpu-v{version}"
    if task.splits != tuple(form.splits.get(d) for d in task.dim_names):
        have = "/".join(map(str, task.splits))
        need = "/".join(str(form.splits.get(d, "?")) for d in task.dim_names)
        raise ValueError(
            f"template {template!r} needs splits {need} (m: M/MC, MC/MR, MR; k: K/KC, KC; n: N/NC, NC/NR, NR"
            f"{'; b: 1' if task.op == 'batch_matmul' else ''}); task {task.name!r} has splits {have}: "
            "build it with schedule_gym.operators.packed_task(task)"
        )
    if tuple(task.loop_order) != form.loop_order:
        order = " ".join(f"{d}{level}" for d, level in task.loop_order)
        need = " ".join(f"{d}{level}" for d, level in form.loop_order)
        raise ValueError(
            f"template {template!r} builds the loop order {need}; task {task.name!r} has {order} "
            "(build it with schedule_gym.operators.packed_task(task))"
        )


def schedule_packed_matmul(task: Task, config: Config, version: int = 3) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``, as the template of
    ``version`` (2 or 3) builds it."""
    import tvm
    import tvm.s_tir as s_tir

    check_task(task, version)
    factors = dict(zip(task.dim_names, config))
    (mo, mi, mr), (ko, kc), (no, ni, nr) = factors["m"], factors["k"], factors["n"]
    width = vector_width(nr, task.dtype, version)
    workload = get_workload(task.op)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    axes = dict(zip(workload.block_dims(task), sch.get_loops(block)))
    batch = [axes["b"]] if "b" in axes else []
    m0, m1, m2 = sch.split(axes["m"], [mo, mi, mr])
    n0, n1, n2 = sch.split(axes["n"], [no, ni, nr])
    k0, k1 = sch.split(axes["k"], [ko, kc])
    sch.reorder(*batch, m0, n0, k0, n1, m1, k1, m2, n2)

    # Pack the KC x NC panel of B as [NC/NR][KC][NR], once per block and k0, vectorised along NR. The
    # buffer's own layout is [b,] k, n (or [b,] n, k stored transposed); a leading batch index is kept.
    transposed_b = bool(task.param("transpose_b", False))
    pack_b = sch.cache_read(block, 1, "global")
    if batch:
        b_map = (lambda z, nn, kk: (z, nn // nr, kk, nn % nr)) if transposed_b else (lambda z, kk, nn: (z, nn // nr, kk, nn % nr))
    else:
        b_map = lambda kk, nn: (nn // nr, kk, nn % nr)  # noqa: E731
    sch.transform_layout(pack_b, ("write", 0), b_map)
    sch.compute_at(pack_b, k0, preserve_unit_loops=True)
    outer, inner = sch.get_loops(pack_b)[-2:]
    pn, pk = (outer, inner) if transposed_b else (inner, outer)
    pn_o, pn_i = sch.split(pn, [ni, nr])
    sch.reorder(pn_o, pk, pn_i)
    vectorize_columns(sch, pn_i, width)
    # Pack the MC x KC block of A as [MC/MR][KC][MR] (stored [b,] m, k, or [b,] k, m transposed).
    transposed_a = bool(task.param("transpose_a", False))
    pack_a = sch.cache_read(block, 0, "global")
    if batch:
        a_map = (lambda z, kk, ii: (z, ii // mr, kk, ii % mr)) if transposed_a else (lambda z, ii, kk: (z, ii // mr, kk, ii % mr))
    else:
        a_map = lambda ii, kk: (ii // mr, kk, ii % mr)  # noqa: E731
    sch.transform_layout(pack_a, ("write", 0), a_map)
    sch.compute_at(pack_a, k0, preserve_unit_loops=True)
    outer, inner = sch.get_loops(pack_a)[-2:]
    pm, pk = (inner, outer) if transposed_a else (outer, inner)
    pm_o, pm_i = sch.split(pm, [mi, mr])
    sch.reorder(pm_o, pk, pm_i)
    sch.unroll(pm_i)

    fused = sch.fuse(*batch, m0, n0)
    # The epilogue (bias, activation) on each finished MC x NC block, vectorised along NR (v3: its vectors).
    for name in workload.epilogues(task):
        epilogue = sch.get_sblock(name)
        sch.reverse_compute_at(epilogue, fused, preserve_unit_loops=True)
        last = sch.get_loops(epilogue)[-1]
        sch.vectorize(sch.split(last, [None, width])[1])
    sch.parallel(fused)
    sch.unroll(m2)
    vectorize_columns(sch, n2, width)
    sch.decompose_reduction(block, k0)
    return sch.mod
