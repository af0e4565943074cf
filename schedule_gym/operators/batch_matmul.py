"""Batch matmul ``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``, either operand stored transposed: builder, name,
workload, packed form, references, model mapping (attention's ``Q @ K^T`` and ``P @ V``), environment."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedule_gym.operators.base import CudaAxis, Operator, check_bool, split_tuple
from schedule_gym.operators.graph import ANY, Refusal, check_float32, shape_of
from schedule_gym.operators.matmul import extents, packed_form
from schedule_gym.operators.workload import Workload
from schedule_gym.tasks.task import LoopDim, Operand, Task, check_positive_int

__all__ = ["BATCH_MATMUL", "BatchMatmulWorkload", "batch_matmul"]


def batch_matmul(
    b: int,
    m: int,
    k: int,
    n: int,
    transpose_a: bool = False,
    transpose_b: bool = False,
    splits: Sequence[int] = (4, 4, 2, 4),
    dtype: str = "float32",
    name: str | None = None,
) -> Task:
    """Batch matmul ``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``; the transposed forms store
    ``A[b, k, m]`` / ``B[b, n, k]`` (attention's ``Q @ K^T`` is ``transpose_b=True``).

    ``splits`` gives the loops of ``b, m, k, n``.

    >>> batch_matmul(12, 128, 64, 128, transpose_b=True).operands[1].describe()
    'B[b, n, k]'
    """
    check_bool(transpose_a, "transpose_a")
    check_bool(transpose_b, "transpose_b")
    s = split_tuple(splits, 4, "batch_matmul splits (b, m, k, n)")
    dims = (
        LoopDim("b", check_positive_int(b, "b"), s[0]),
        LoopDim("m", check_positive_int(m, "m"), s[1]),
        LoopDim("k", check_positive_int(k, "k"), s[2], reduction=True),
        LoopDim("n", check_positive_int(n, "n"), s[3]),
    )
    operands = (
        Operand.of_dims("A", ("b", "k", "m") if transpose_a else ("b", "m", "k")),
        Operand.of_dims("B", ("b", "n", "k") if transpose_b else ("b", "k", "n")),
        Operand.of_dims("C", ("b", "m", "n"), output=True),
    )
    tag = ("T" if transpose_a else "N") + ("T" if transpose_b else "N")
    return Task(
        name=name or f"bmm{tag}-{b}x{m}x{k}x{n}", op="batch_matmul", dims=dims, operands=operands, dtype=dtype,
        params=(("transpose_a", transpose_a), ("transpose_b", transpose_b)),
    )


_NAME = re.compile(r"^bmm([NT])([NT])-(\d+)x(\d+)x(\d+)x(\d+)$")


def parse_name(name: str) -> dict[str, Any] | None:
    """``bmmNT-12x128x64x128`` -> the builder's arguments."""
    match = _NAME.match(name)
    if match is None:
        return None
    ta, tb, b, m, k, n = match.groups()
    return {"b": int(b), "m": int(m), "k": int(k), "n": int(n), "transpose_a": ta == "T", "transpose_b": tb == "T"}


class BatchMatmulWorkload(Workload):
    """``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``, with ``A`` stored ``[b, k, m]`` if ``transpose_a`` and
    ``B`` stored ``[b, n, k]`` if ``transpose_b``."""

    op = "batch_matmul"

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te

        ta, tb = task.param("transpose_a"), task.param("transpose_b")
        shape_a, shape_b = self.input_shapes(task)
        a = te.placeholder(shape_a, name="A", dtype=task.dtype)
        b = te.placeholder(shape_b, name="B", dtype=task.dtype)
        r = te.reduce_axis((0, task.dim("k").extent), name="k")

        def body(z: Any, i: Any, j: Any) -> Any:
            lhs = a[z, r, i] if ta else a[z, i, r]
            rhs = b[z, j, r] if tb else b[z, r, j]
            return te.sum(lhs * rhs, axis=r)

        c = te.compute(self.output_shape(task), body, name="C")
        return [a, b, c]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        bb, m, k, n = extents(task, "b", "m", "k", "n")
        shape_a = (bb, k, m) if task.param("transpose_a") else (bb, m, k)
        shape_b = (bb, n, k) if task.param("transpose_b") else (bb, k, n)
        return [shape_a, shape_b]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        bb, m, _, n = extents(task, "b", "m", "k", "n")
        return (bb, m, n)

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = inputs
        if task.param("transpose_a"):
            a = a.transpose(0, 2, 1)
        if task.param("transpose_b"):
            b = b.transpose(0, 2, 1)
        return a @ b

    def formula(self, task: Task) -> str:
        lhs = "A^T" if task.param("transpose_a") else "A"
        rhs = "B^T" if task.param("transpose_b") else "B"
        return f"{lhs} @ {rhs} per batch"


def torch_kernel(task: Task, inputs: Sequence[Any]) -> Any:
    import torch

    a, b = inputs
    a = a.transpose(1, 2) if task.param("transpose_a") else a
    b = b.transpose(1, 2) if task.param("transpose_b") else b
    return lambda: torch.bmm(a, b)


def cuda_axes(task: Task) -> tuple[CudaAxis, ...]:
    return (CudaAxis(("b",), "z", "z"), CudaAxis(("m",), "y", "y"), CudaAxis(("n",), "x", "x"))


_NT = {"type": "batch_matmul", "transpose_b": True}
#: two computed operands (a constant right operand is a dense layer); a transpose of the right operand's last
#: two axes is folded into ``transpose_b`` (the frontend flattens a 4-D matmul's batch dimensions:
#: ``matmul(a, reshape(permute_dims(k)))``)
PATTERNS = (
    {"name": "batch_matmul-nt", "op_type": _NT, "cell": [{"name": "t", "op": "permute_dims", "inputs": [ANY]},
                                                         {"name": "main", "op": "matmul", "inputs": [ANY, "t"]}]},
    {"name": "batch_matmul-nt-flat", "op_type": _NT, "cell": [{"name": "t", "op": "permute_dims", "inputs": [ANY]},
                                                              {"name": "r", "op": "reshape", "inputs": ["t", ANY]},
                                                              {"name": "main", "op": "matmul", "inputs": [ANY, "r"]}]},
    {"name": "batch_matmul", "op_type": {"type": "batch_matmul", "transpose_b": False},
     "cell": [{"name": "main", "op": "matmul", "inputs": [ANY, ANY]}]},
)


def implement(params: Mapping[str, Any], matches: Mapping[str, Any]) -> tuple[Task, tuple[Any, ...]]:
    """A matched ``matmul`` of two computed operands with equal batch dimensions (merged into one)."""
    from tvm import relax

    lhs, rhs = matches["main"].args
    transpose_b = bool(params.get("transpose_b"))
    if transpose_b:
        t = matches["t"]
        axes = [int(a) for a in t.attrs.axes] if t.attrs.axes is not None else None
        rank = len(shape_of(t.args[0]))
        if axes != list(range(rank - 2)) + [rank - 1, rank - 2]:
            raise Refusal(f"permute_dims{tuple(axes or [])} is not a transpose of the last two axes")
        rhs = t.args[0]
        if "r" in matches:  # the transpose was reshaped to 3-D: only its batch dimensions may be merged
            flat = shape_of(matches["r"])
            full = shape_of(t)
            if len(flat) != 3 or flat[-2:] != full[-2:]:
                raise Refusal(f"reshape of the transposed operand {full} to {flat} is not a merge of batch dimensions")
    check_float32(lhs, rhs)
    a, b = shape_of(lhs), shape_of(rhs)
    if len(a) == 3 and len(b) > 3 and math.prod(b[:-2]) == a[0]:  # b's batch dims flattened like a's
        b = (a[0],) + b[-2:]
    if len(a) < 3 or len(a) != len(b) or a[:-2] != b[:-2]:
        raise Refusal(f"matmul of {a} by {b}: batch matmul needs equal leading (batch) dimensions")
    batch = math.prod(a[:-2])
    m, k = a[-2:]
    n = b[-2] if transpose_b else b[-1]
    task = batch_matmul(batch, m, k, n, transpose_b=transpose_b)
    args = tuple(x if len(shape_of(x)) == 3 else relax.op.reshape(x, (batch,) + shape_of(x)[-2:]) for x in (lhs, rhs))
    return task, args


BATCH_MATMUL = Operator(
    name="batch_matmul",
    build=batch_matmul,
    parse_name=parse_name,
    workload=BatchMatmulWorkload(),
    templates={"llvm": "batch_matmul-cpu", "cuda": "batch_matmul-cuda"},
    packed=packed_form("batch_matmul", batched=True),
    cuda_axes=cuda_axes,
    torch_kernel=torch_kernel,
    patterns=PATTERNS,
    implement=implement,
    env_id="schedule_gym/BatchMatmul-v0",
    env_kwargs={"b": 12, "m": 128, "k": 64, "n": 128, "transpose_b": True},
)
