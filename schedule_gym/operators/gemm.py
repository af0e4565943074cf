"""GEMM ``C[m, n] = sum_k A[m, k] * B[k, n]``: builder, name, workload, packed form, references, environment."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from schedule_gym.operators.base import CudaAxis, Operator
from schedule_gym.operators.matmul import extents, matmul_te, packed_form
from schedule_gym.operators.workload import Workload
from schedule_gym.tasks.task import LoopDim, Operand, Task, check_positive_int

__all__ = ["GEMM", "GemmWorkload", "gemm"]


def gemm(
    m: int,
    k: int,
    n: int,
    d_m: int = 4,
    d_k: int = 2,
    d_n: int = 4,
    dtype: str = "float32",
    name: str | None = None,
) -> Task:
    """GEMM ``C[m, n] = sum_k A[m, k] * B[k, n]`` with ``d_m, d_k, d_n`` nested loops per dimension.

    The defaults (4, 2, 4) are the paper's (Zhang et al., Section 5), MetaSchedule's "SSRSRS" for GEMM.

    >>> gemm(1024, 1024, 1024).describe()
    'gemm-1024x1024x1024 (gemm m=1024 k=1024 n=1024, splits 4/2/4, float32)'
    """
    dims = (
        LoopDim("m", check_positive_int(m, "m"), check_positive_int(d_m, "d_m")),
        LoopDim("k", check_positive_int(k, "k"), check_positive_int(d_k, "d_k"), reduction=True),
        LoopDim("n", check_positive_int(n, "n"), check_positive_int(d_n, "d_n")),
    )
    operands = (
        Operand.of_dims("A", ("m", "k")),
        Operand.of_dims("B", ("k", "n")),
        Operand.of_dims("C", ("m", "n"), output=True),
    )
    return Task(name=name or f"gemm-{m}x{k}x{n}", op="gemm", dims=dims, operands=operands, dtype=dtype)


_NAME = re.compile(r"^gemm-(\d+)x(\d+)x(\d+)$")


def parse_name(name: str) -> dict[str, Any] | None:
    """``gemm-MxKxN`` -> the builder's arguments (the name is kept as written)."""
    match = _NAME.match(name)
    if match is None:
        return None
    m, k, n = (int(x) for x in match.groups())
    return {"m": m, "k": k, "n": n, "name": name}


class GemmWorkload(Workload):
    """``C[m, n] = sum_k A[m, k] * B[k, n]``."""

    op = "gemm"

    def te_tensors(self, task: Task) -> list[Any]:
        return matmul_te(task, "A", "B")

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        m, k, n = extents(task, "m", "k", "n")
        return [(m, k), (k, n)]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        m, _, n = extents(task, "m", "k", "n")
        return (m, n)

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = inputs
        return a @ b

    def formula(self, task: Task) -> str:
        return "A @ B"


def torch_kernel(task: Task, inputs: Sequence[Any]) -> Any:
    import torch

    a, b = inputs
    return lambda: torch.matmul(a, b)


def cuda_axes(task: Task) -> tuple[CudaAxis, ...]:
    return (CudaAxis(("m",), "y", "y"), CudaAxis(("n",), "x", "x"))


GEMM = Operator(
    name="gemm",
    build=gemm,
    parse_name=parse_name,
    workload=GemmWorkload(),
    templates={"llvm": "gemm-cpu", "cuda": "gemm-cuda"},
    packed=packed_form("gemm"),
    cuda_axes=cuda_axes,
    torch_kernel=torch_kernel,
    env_id="schedule_gym/Gemm-v0",
    env_kwargs={"m": 1024, "k": 1024, "n": 1024},
)
