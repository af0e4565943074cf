"""``gemm-cpu-v2``: a GEMM template with packed operands and a register micro-kernel (BLIS's structure).

What it builds, for ``C[m, n] = sum_k A[m, k] * B[k, n]`` (the GEMM workload's definition and its
``A, B, C`` arguments, row-major, unchanged), from a GEMM task whose splits are **3/2/3** in the loop
order ``m0 n0 | k0 n1 m1 k1 m2 n2`` (:func:`gemm_task` builds it; 4/2/4 tasks are ``gemm-cpu``'s) and a
config ``((m0, m1, m2), (k0, k1), (n0, n1, n2))``:

========  ===========  ==========================================================================
factor    BLIS name    meaning
========  ===========  ==========================================================================
``m0``    M / MC       blocks of ``MC = m1 * m2`` rows of ``C``; fused with ``n0`` and run in parallel
``m1``    MC / MR      micro-tiles in a row block (inside ``n1``: one ``B`` sliver meets every ``A`` one)
``m2``    MR           rows of the register micro-tile (unrolled: ``MR`` broadcasts of ``A`` a step)
``k0``    K / KC       blocks of the reduction; ``C`` is zeroed before the first and accumulated in place
``k1``    KC           reduction steps of one micro-kernel call (its packed panels are ``KC`` deep)
``n0``    N / NC       blocks of ``NC = n1 * n2`` columns; fused with ``m0`` and run in parallel
``n1``    NC / NR      micro-tiles in a column block
``n2``    NR           columns of the micro-tile, vectorised (``NR / lanes`` vector registers a row)
========  ===========  ==========================================================================

Each factor tuple multiplies to its dimension's extent (the tile space's rule), so every factor divides
it: odd and prime extents work, with the micro-tile restricted to their divisors.

The schedule, per parallel ``(m0, n0)`` block and reduction block ``k0``:

* **pack B**: the ``KC x NC`` panel of ``B`` is copied into a per-block buffer laid out
  ``[NC/NR, KC, NR]`` (``cache_read`` + ``transform_layout`` + ``compute_at`` at ``k0``), so a
  micro-kernel reads its ``KC x NR`` sliver as one contiguous stream; the copy is vectorised along ``NR``;
* **pack A**: the ``MC x KC`` block of ``A`` is copied into ``[MC/MR, KC, MR]`` the same way, so the
  ``MR`` values broadcast at each reduction step are adjacent;
  Each panel is packed once per ``(m0, n0, k0)``: ``B`` ``M/MC`` times in all, ``A`` ``N/NC`` times;
* **micro-kernel**: for each ``(n1, m1)`` (BLIS's ``jr``, ``ir`` loops: the ``KC x NR`` sliver of packed
  ``B`` stays in L1 while the ``MC x KC`` block of packed ``A`` streams past it) the ``MR x NR`` tile of
  ``C`` is updated over ``KC`` steps, ``m2`` unrolled and ``n2`` vectorised; its addresses do not depend
  on ``k1``, so LLVM keeps the tile in vector registers across the ``k1`` loop (``MR * NR / lanes``
  accumulators) and loads and stores it once per call;
* the reduction's initialisation is hoisted above ``k0`` (``decompose_reduction``, after vectorize/unroll).

The micro-tile that fills the registers without spilling is ``MR * NR / lanes + NR / lanes + 1 <= 16``
ymm registers on AVX2 (e.g. 4 x 16, 6 x 16, 4 x 24; 8 x 8 is load-bound) and ``<= 32`` zmm on AVX-512
(e.g. 14 x 32, 8 x 48); the tile space does not encode that, so the search (or a seed) must find it.

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schedule_gym.tasks import Task, gemm
from schedule_gym.types import Config
from schedule_gym.workloads import get_workload

__all__ = ["LOOP_ORDER", "SPLITS", "check_task", "gemm_task", "schedule_gemm_cpu_v2"]

#: Split counts of ``m, k, n`` the template needs.
SPLITS = (3, 2, 3)
#: The loop order it builds, outermost first: the parallel block loops, the reduction blocks, BLIS's
#: ``jr`` and ``ir`` loops, the micro-kernel's reduction and its register tile.
LOOP_ORDER = (("m", 0), ("n", 0), ("k", 0), ("n", 1), ("m", 1), ("k", 1), ("m", 2), ("n", 2))


def gemm_task(m: int, k: int, n: int, dtype: str = "float32", name: str | None = None) -> Task:
    """The GEMM task ``gemm-cpu-v2`` builds: splits 3/2/3 in :data:`LOOP_ORDER`, named ``gemm-MxKxN-packed``.

    >>> gemm_task(1024, 1024, 1024).describe()
    'gemm-1024x1024x1024-packed (gemm m=1024 k=1024 n=1024, splits 3/2/3, float32)'
    """
    base = gemm(m, k, n, *SPLITS, dtype=dtype, name=name or f"gemm-{m}x{k}x{n}-packed")
    return dataclasses.replace(base, loop_order=LOOP_ORDER)


def check_task(task: Task) -> None:
    """Raise ValueError naming what is wrong if ``task`` is not a GEMM this template can build."""
    if task.op != "gemm":
        raise ValueError(f"template 'gemm-cpu-v2' builds 'gemm' tasks, not {task.op!r} ({task.name})")
    if task.dim_names != ("m", "k", "n") or task.splits != SPLITS:
        have = "/".join(map(str, task.splits))
        raise ValueError(
            f"template 'gemm-cpu-v2' needs GEMM splits 3/2/3 (m: M/MC, MC/MR, MR; k: K/KC, KC; n: N/NC, NC/NR, NR); "
            f"task {task.name!r} has splits {have}: build it with gemm_cpu_v2.gemm_task(m, k, n)"
        )
    if tuple(task.loop_order) != LOOP_ORDER:
        order = " ".join(f"{d}{level}" for d, level in task.loop_order)
        raise ValueError(
            f"template 'gemm-cpu-v2' builds the loop order m0 n0 k0 n1 m1 k1 m2 n2; task {task.name!r} has {order} "
            "(build it with gemm_cpu_v2.gemm_task(m, k, n))"
        )


def schedule_gemm_cpu_v2(task: Task, config: Config) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``."""
    import tvm
    import tvm.s_tir as s_tir

    check_task(task)
    factors = dict(zip(task.dim_names, config))
    (mo, mi, mr), (ko, kc), (no, ni, nr) = factors["m"], factors["k"], factors["n"]
    workload = get_workload(task.op)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    i, j, k = sch.get_loops(block)
    m0, m1, m2 = sch.split(i, [mo, mi, mr])
    n0, n1, n2 = sch.split(j, [no, ni, nr])
    k0, k1 = sch.split(k, [ko, kc])
    sch.reorder(m0, n0, k0, n1, m1, k1, m2, n2)

    # Pack the KC x NC panel of B as [NC/NR][KC][NR], once per (m0, n0, k0), vectorised along NR.
    pack_b = sch.cache_read(block, 1, "global")
    sch.transform_layout(pack_b, ("write", 0), lambda kk, nn: (nn // nr, kk, nn % nr))
    sch.compute_at(pack_b, k0, preserve_unit_loops=True)
    pk, pn = sch.get_loops(pack_b)[-2:]
    pn_o, pn_i = sch.split(pn, [ni, nr])
    sch.reorder(pn_o, pk, pn_i)
    sch.vectorize(pn_i)
    # Pack the MC x KC block of A as [MC/MR][KC][MR].
    pack_a = sch.cache_read(block, 0, "global")
    sch.transform_layout(pack_a, ("write", 0), lambda ii, kk: (ii // mr, kk, ii % mr))
    sch.compute_at(pack_a, k0, preserve_unit_loops=True)
    pm, pk = sch.get_loops(pack_a)[-2:]
    pm_o, pm_i = sch.split(pm, [mi, mr])
    sch.reorder(pm_o, pk, pm_i)
    sch.unroll(pm_i)

    sch.parallel(sch.fuse(m0, n0))
    sch.unroll(m2)
    sch.vectorize(n2)
    sch.decompose_reduction(block, k0)
    return sch.mod
