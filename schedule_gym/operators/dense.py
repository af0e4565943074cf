"""Dense: a linear layer with its epilogue fused, ``Y[m, n] = act(sum_k X[m, k] * W[k, n] + bias[n])``: builder,
name, workload, packed form, references, model mapping (``Linear``), environment."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedule_gym.operators.base import Operator, split_tuple
from schedule_gym.operators.epilogue import ACTIVATION_PATTERN, Epilogue, check_epilogue, epilogue_suffix
from schedule_gym.operators.graph import (
    ANY, CONST, Refusal, activation_of, bias_operand, bias_vector, check_float32, epilogue_patterns, shape_of,
)
from schedule_gym.operators.matmul import extents, matmul_te, packed_form
from schedule_gym.operators.workload import Workload
from schedule_gym.tasks.task import LoopDim, Operand, Task, check_positive_int

__all__ = ["DENSE", "DenseWorkload", "dense"]


def dense(
    m: int,
    k: int,
    n: int,
    bias: bool = True,
    activation: str = "none",
    splits: Sequence[int] = (4, 2, 4),
    dtype: str = "float32",
    name: str | None = None,
) -> Task:
    """A linear layer with its epilogue fused: ``Y[m, n] = act(sum_k X[m, k] * W[k, n] + bias[n])``.

    ``W`` is the layer's weight stored ``[in, out]``: what ``torch.nn.Linear`` computes
    (``x @ weight.T + bias``) once the constant transpose of its weight is folded, as a compiler does
    (TVM Relax imports ``Linear`` as ``permute_dims`` + ``matmul`` + ``add``). ``activation`` is one of
    :data:`~schedule_gym.operators.epilogue.ACTIVATIONS`. ``splits`` gives the loops of ``m, k, n``.
    """
    check_epilogue(bias, activation)
    s = split_tuple(splits, 3, "dense splits (m, k, n)")
    dims = (
        LoopDim("m", check_positive_int(m, "m"), s[0]),
        LoopDim("k", check_positive_int(k, "k"), s[1], reduction=True),
        LoopDim("n", check_positive_int(n, "n"), s[2]),
    )
    operands = [Operand.of_dims("X", ("m", "k")), Operand.of_dims("W", ("k", "n"))]
    if bias:
        operands.append(Operand.of_dims("bias", ("n",)))
    operands.append(Operand.of_dims("Y", ("m", "n"), output=True))
    return Task(
        name=name or f"dense-{m}x{k}x{n}{epilogue_suffix(bias, activation)}", op="dense", dims=dims,
        operands=tuple(operands), dtype=dtype, params=(("bias", bias), ("activation", activation)),
    )


_NAME = re.compile(rf"^dense-(\d+)x(\d+)x(\d+)(\+bias)?(?:\+({ACTIVATION_PATTERN}))?$")


def parse_name(name: str) -> dict[str, Any] | None:
    """``dense-128x768x3072+bias+gelu`` -> the builder's arguments."""
    match = _NAME.match(name)
    if match is None:
        return None
    m, k, n, bias, act = match.groups()
    return {"m": int(m), "k": int(k), "n": int(n), "bias": bias is not None, "activation": act or "none"}


class DenseWorkload(Epilogue, Workload):
    """``Y[m, n] = act(sum_k X[m, k] * W[k, n] + bias[n])`` (see :func:`dense`)."""

    op = "dense"
    out_name = "Y"

    def bias_axis(self, task: Task) -> int:
        return 1

    def te_tensors(self, task: Task) -> list[Any]:
        x, w, c = matmul_te(task, "X", "W")
        bias, out = self.epilogue_te(task, c, task.dim("n").extent)
        return [x, w, *bias, out]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        m, k, n = extents(task, "m", "k", "n")
        return [(m, k), (k, n)] + ([(n,)] if task.param("bias") else [])

    def output_shape(self, task: Task) -> tuple[int, ...]:
        m, _, n = extents(task, "m", "k", "n")
        return (m, n)

    def _linear(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        y = inputs[0] @ inputs[1]
        return self.add_epilogue_inputs(task, y, inputs[2:])

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self.activate(task, self._linear(task, inputs))

    def before_activation(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self._linear(task, inputs)

    def magnitude(self, task: Task, abs_inputs: list[np.ndarray]) -> np.ndarray:
        return self.activation_slope(task) * self._linear(task, abs_inputs)

    def formula(self, task: Task) -> str:
        return self.epilogue_formula(task, "X @ W")


def torch_kernel(task: Task, inputs: Sequence[Any]) -> Any:
    import torch.nn.functional as F

    x, w = inputs[0], inputs[1].t().contiguous()  # nn.Linear keeps its weight [out, in]
    bias = inputs[2] if task.param("bias") else None
    acts = {"none": lambda y: y, "relu": F.relu, "relu6": F.relu6, "gelu": F.gelu,
            "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"), "silu": F.silu}
    act = acts[task.param("activation")]  # type: ignore[index]
    return lambda: act(F.linear(x, w, bias))


def implement(params: Mapping[str, Any], matches: Mapping[str, Any]) -> tuple[Task, tuple[Any, ...]]:
    """A matched ``matmul`` by a constant ``[in, out]`` weight (leading dimensions of the input merged)."""
    from tvm import relax

    data, weight = matches["main"].args
    check_float32(data, weight)
    shape, wshape = shape_of(data), shape_of(weight)
    if len(wshape) != 2 or len(shape) < 2:
        raise Refusal(f"matmul of {shape} by a constant {wshape}: dense takes a [in, out] weight")
    k, n = wshape
    m = math.prod(shape[:-1])
    bias = bool(params.get("bias", False))
    task = dense(m, k, n, bias=bias, activation=activation_of(params, matches))
    x = data if len(shape) == 2 else relax.op.reshape(data, (m, k))
    args: tuple[Any, ...] = (x, weight)
    if bias:
        args += (bias_vector(bias_operand(matches), n, len(shape) - 1, len(shape)),)
    return task, args


DENSE = Operator(
    name="dense",
    build=dense,
    parse_name=parse_name,
    workload=DenseWorkload(),
    templates={"llvm": "dense-cpu"},
    packed=packed_form("dense"),
    torch_kernel=torch_kernel,
    patterns=tuple(epilogue_patterns("dense", {"op": "matmul", "inputs": [ANY, CONST]})),
    implement=implement,
    env_id="schedule_gym/Dense-v0",
    env_kwargs={"m": 128, "k": 768, "n": 3072, "bias": True, "activation": "gelu"},
)
