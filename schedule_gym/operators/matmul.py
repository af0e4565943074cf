"""What the matrix-multiply operators (GEMM, dense, batch matmul) share: the TE of ``sum_k A[m, k] B[k, n]``
and their packed form, the BLIS structure of their packed templates (batch matmul's ``-v4``, dense's ``-v8``, GEMM's
``-v6``; and the earlier versions).

The packed form splits ``m`` and ``n`` in 3 (block, micro-tiles in a block, register micro-tile), ``k`` in
2 (block, steps of one micro-kernel call) and a batch ``b`` in 1, in the loop order
``[b0] m0 n0 | k0 n1 m1 k1 m2 n2``: the parallel block loops, the reduction blocks, BLIS's ``jr`` and ``ir``
loops, the micro-kernel's reduction and its register tile (the template's module says how it is built). GEMM's v6
builds the same factors with its three block loops in GotoBLAS's order, ``n0 k0 m0``, and dense's v7 and v8 run
``n0 m0`` in parallel: the order names the loops a kernel has and where each tile level sits, not the nesting of
the block loops.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.operators.base import PackedForm
from schedule_gym.tasks.task import Task

__all__ = ["PACKED_LOOP_ORDER", "PACKED_SPLITS", "extents", "matmul_te", "packed_form"]

#: Split counts of the packed form (a batch loop ``b`` has 1).
PACKED_SPLITS = {"b": 1, "m": 3, "k": 2, "n": 3}
#: Its loop order, outermost first (a batch matmul's ``b0`` comes first).
PACKED_LOOP_ORDER = (("m", 0), ("n", 0), ("k", 0), ("n", 1), ("m", 1), ("k", 1), ("m", 2), ("n", 2))


def packed_form(op: str, batched: bool = False) -> PackedForm:
    """The packed form of a matrix-multiply operator, built by its template ``<op>-cpu-v4`` (dense:
    ``dense-cpu-v8``, whose kernels take their weight packed, run its column blocks outer and prefetch its next
    sliver; GEMM: ``gemm-cpu-v6``, its block loops in GotoBLAS's order; the earlier versions by name)."""
    version = {"dense": 8, "gemm": 6}.get(op, 4)
    return PackedForm(f"{op}-cpu-v{version}", PACKED_SPLITS, ((("b", 0),) if batched else ()) + PACKED_LOOP_ORDER)


def extents(task: Task, *names: str) -> tuple[int, ...]:
    return tuple(task.dim(x).extent for x in names)


def matmul_te(task: Task, lhs: str, rhs: str) -> list[Any]:
    """``C[m, n] = sum_k lhs[m, k] * rhs[k, n]`` in TE: the placeholders and the main block ``C``."""
    from tvm import te

    m, k, n = extents(task, "m", "k", "n")
    a = te.placeholder((m, k), name=lhs, dtype=task.dtype)
    b = te.placeholder((k, n), name=rhs, dtype=task.dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]
