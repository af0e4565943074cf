"""The operators' side of model mapping: plain-data patterns and readers of a matched Relax sub-graph.

An operator's ``patterns`` are plain data in the form of the optimization-mapping paper's Figure 3b
(``{"name", "op_type", "cell": [{"name", "op", "inputs"}]}``; inputs name earlier nodes of the cell,
:data:`ANY` any value, :data:`CONST` a constant), and its ``implement(params, matches)`` turns a match
(the matched Relax calls by node name) into a task and the kernel's arguments, or raises :class:`Refusal`
saying why it cannot (the mapping reports it and leaves the sub-graph to TVM). The readers here are what
the implementations share; TVM is imported inside them only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedule_gym.operators.epilogue import epilogue_suffix

__all__ = ["ACTIVATION_OPS", "ANY", "CONST", "Refusal", "activation_of", "bias_operand", "bias_vector",
           "check_float32", "epilogue_patterns", "residual_operand", "shape_of"]

#: a cell input matching any value, and one matching a constant
ANY, CONST = "*", "const"
#: the Relax operator of each epilogue activation (ReLU6 is ``clip(x, 0, 6)``; SiLU is ``nn.silu``, which the
#: importer makes of the frontend's ``multiply(x, sigmoid(x))``)
ACTIVATION_OPS = {"relu": "nn.relu", "relu6": "clip", "gelu": "nn.gelu", "gelu_tanh": "nn.gelu_tanh", "silu": "nn.silu"}


class Refusal(Exception):
    """A match that the implementation cannot take; the message says why (reported, not raised)."""


def epilogue_patterns(op_type: str, main: Mapping[str, Any], residual: bool = False) -> list[dict[str, Any]]:
    """``op_type``'s patterns with every epilogue: the cell node ``main`` (named ``"main"``), then an optional
    bias add of a constant, with ``residual`` an optional add of any other value (node ``"res"``: the
    implementation checks that it has the output's shape), and an optional activation; parameters ``bias``,
    ``activation`` and, in the patterns with the residual add, ``residual``."""
    out = []
    # the bias patterns first: among cells of one size the earlier wins (map_model), and a residual's ANY would
    # also match a bias's constant
    for bias in (True, False):
        for res in (False, True) if residual else (False,):
            for act in (*ACTIVATION_OPS, "none"):
                cell = [{"name": "main", **main}]
                last = "main"
                if bias:
                    cell.append({"name": "bias", "op": "add", "inputs": [last, CONST]})
                    last = "bias"
                if res:
                    cell.append({"name": "res", "op": "add", "inputs": [last, ANY]})
                    last = "res"
                if act != "none":
                    extra = [ANY, ANY] if act == "relu6" else []
                    cell.append({"name": "act", "op": ACTIVATION_OPS[act], "inputs": [last, *extra]})
                name = op_type + epilogue_suffix(bias, act, res)
                params = {"type": op_type, "activation": act, "bias": bias, **({"residual": True} if res else {})}
                out.append({"name": name, "op_type": params, "cell": cell})
    return out


def shape_of(expr: Any) -> tuple[int, ...]:
    """The static shape of a Relax tensor expression; refuses an unknown or dynamic one."""
    from tvm import relax

    sinfo = expr.ty
    if not isinstance(sinfo, relax.TensorType) or sinfo.shape is None:
        raise Refusal("an operand is not a tensor of known shape")
    try:
        return tuple(int(v) for v in sinfo.shape.values)
    except (TypeError, AttributeError):
        raise Refusal(f"dynamic shape {sinfo.shape}") from None


def check_float32(*exprs: Any) -> None:
    for e in exprs:
        dtype = str(e.ty.dtype)
        if dtype != "float32":
            raise Refusal(f"dtype {dtype}: the templates are tuned in float32")


def activation_of(params: Mapping[str, Any], matches: Mapping[str, Any]) -> str:
    """The pattern's activation; refuses a ``clip`` that is not ReLU6."""
    act = params.get("activation", "none")
    if act == "relu6":
        bounds = [float(a.value) for a in matches["act"].args[1:]]
        if bounds != [0.0, 6.0]:
            raise Refusal(f"clip to {bounds} is not ReLU6")
    return act


def bias_operand(matches: Mapping[str, Any]) -> Any:
    """The constant of the matched bias add (the add is commutative: the constant is on either side)."""
    import tvm

    return next(a for a in matches["bias"].args if isinstance(a, tvm.ir.expr.Constant))


def residual_operand(matches: Mapping[str, Any], shape: tuple[int, ...]) -> Any:
    """The other operand of the matched residual add (the pattern's ``"res:1"``), if it has the output's
    ``shape`` and is float32 (a broadcast add is not a residual the epilogue reads element by element)."""
    import tvm
    from tvm import relax

    value = matches["res:1"]
    if not isinstance(value, (relax.Var, tvm.ir.expr.Constant)):  # a value the kernel would compute a second time
        raise Refusal(f"the residual is an unbound {type(value).__name__}")
    check_float32(value)
    if shape_of(value) != tuple(shape):
        raise Refusal(f"the added value of shape {shape_of(value)} is not a residual of the output's shape {shape}")
    return value


def bias_vector(expr: Any, length: int, axis: int, rank: int) -> Any:
    """The constant of a bias add as a vector of ``length``, if it broadcasts along ``axis`` only."""
    from tvm import relax

    arr = expr.value.numpy()
    shape = arr.shape
    padded = (1,) * (rank - len(shape)) + tuple(shape)
    if len(padded) != rank or any(s != 1 for i, s in enumerate(padded) if i != axis) or padded[axis] != length:
        raise Refusal(f"the added constant of shape {tuple(shape)} is not a bias along the output channels")
    return relax.const(arr.reshape(length), str(arr.dtype))
