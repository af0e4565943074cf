"""Concatenations on the last axis, with the per-channel affine map and ReLU after them, as one kernel.

TVM lowers ``concat`` to one loop nest whose every element picks its input by a chain of ``if_then_else``
on the concatenated axis. On NHWC activations that axis is the innermost, so the chain (as long as the
number of inputs: DenseNet-121 concatenates up to 32 feature maps) runs for every element and nothing
vectorises; DenseNet's pre-activation layers apply batch norm and ReLU to every concatenation
(``relu(bn(cat(features)))``), which TVM fuses into that loop nest.

:func:`fold_concats` replaces each ``concat`` on the last axis of a statically shaped float32 tensor, and the
single-use operations after it that are affine per channel (``add``, ``subtract``, ``multiply`` or ``divide``
by a constant holding one value or one per channel: inference batch norm as the importer decomposes it),
ending, optionally, in a ReLU, by one call of :func:`concat_kernel`: rows in parallel, each input copied to
its columns of the output as ``x * scale + shift`` (the chain composed in float64, then rounded once) and the
ReLU, in ``LANES``-wide vector pieces. The kernel is bound by memory; it has nothing to tune. An
operation the chain cannot take (another operator, a constant of another shape, a value read twice) ends the
chain and stays with TVM.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from schedule_gym.models.bindings import Bindings
from schedule_gym.models.fixed.common import KernelCache, for_each_column, kernel_attrs
from schedule_gym.models.importer import tvm_shape

__all__ = ["concat_kernel", "fold_concats"]

#: the affine operators a chain may take
_AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")
#: those of them that stay affine with the constant as the first operand (``c / x`` is not)
_CONSTANT_FIRST = ("relax.add", "relax.subtract", "relax.multiply")


def concat_kernel(rows: int, widths: Sequence[int], affine: bool = False, relu: bool = False) -> Any:
    """The PrimFunc ``(x_0 [rows, w_0], ..., x_k [rows, w_k], [scale [C], shift [C],] y [rows, C])``,
    ``C = sum(widths)``, that writes ``y[r, o_i + j] = x_i[r, j] * scale[o_i + j] + shift[o_i + j]``
    (``o_i`` the sum of the widths before ``w_i``; the product and sum only if ``affine``), then
    ``max(., 0)`` if ``relu``; rows in parallel, columns in ``LANES``-wide vectors."""
    widths = [int(w) for w in widths]
    if rows < 1 or not widths or min(widths) < 1:
        raise ValueError(f"a concatenation needs rows >= 1 and widths >= 1, got rows={rows!r}, widths={widths!r}")
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    total = sum(widths)
    with IRBuilder() as ib:
        with T.prim_func():
            xs = [T.arg(f"x{i}", T.buffer((rows, w), "float32")) for i, w in enumerate(widths)]
            if affine:
                scale = T.arg("scale", T.buffer((total,), "float32"))
                shift = T.arg("shift", T.buffer((total,), "float32"))
            y = T.arg("y", T.buffer((rows, total), "float32"))
            T.func_attr(kernel_attrs("concat"))
            with T.parallel(0, rows) as r:
                offset = 0
                for x, width in zip(xs, widths):

                    def store(col: Any, x: Any = x, offset: int = offset) -> None:
                        value = x[r, col]
                        if affine:
                            value = value * scale[offset + col] + shift[offset + col]
                        if relu:
                            value = T.max(value, T.float32(0))
                        T.buffer_store(y, value, [r, offset + col])

                    for_each_column(width, store)
                    offset += width
    return ib.get()


def _per_channel(expr: Any, channels: int, rank: int) -> np.ndarray | None:
    """A constant's values as one per channel (float64, ``[channels]``) if it holds one value or one per channel
    of the last axis (leading axes of 1, at most ``rank`` of them), else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant) or str(expr.value.dtype) != "float32":
        return None
    values = expr.value.numpy().astype(np.float64)
    if values.ndim > rank:
        return None
    if values.size == 1:
        return np.full(channels, values.reshape(()))
    if values.size == channels and values.shape[-1] == channels:
        return values.reshape(channels)
    return None


def _chain(bindings: Bindings, start: Any, channels: int, rank: int) -> tuple[Any, np.ndarray | None, np.ndarray, bool]:
    """Walk from the concatenation's var along single-use affine operations and a final ReLU: the chain's last
    var, its composed ``scale`` (None if nothing affine was taken), ``shift``, and whether it ends in a ReLU."""
    import tvm

    shape = tvm_shape(start)
    scale, shift = np.ones(channels), np.zeros(channels)
    affine, var = False, start
    while bindings.uses[var] == 1 and len(bindings.readers.get(var, ())) == 1:
        reader = bindings.readers[var][0]
        call = bindings.value_of[reader]
        if not isinstance(call.op, tvm.ir.Op) or tvm_shape(reader) != shape or str(reader.ty.dtype) != "float32":
            break
        name = call.op.name
        if name == "relax.nn.relu":
            return reader, (scale if affine else None), shift, True
        if name not in _AFFINE or len(call.args) != 2:
            break
        first = call.args[0].same_as(var)
        other = call.args[1] if first else call.args[0]
        c = _per_channel(other, channels, rank)
        if c is None or not (first or name in _CONSTANT_FIRST):
            break
        if name == "relax.add":
            shift = shift + c
        elif name == "relax.multiply":
            scale, shift = scale * c, shift * c
        elif name == "relax.subtract":
            scale, shift = (scale, shift - c) if first else (-scale, c - shift)
        else:  # divide by the constant (first) only
            scale, shift = scale / c, shift / c
        affine, var = True, reader
    return var, (scale if affine else None), shift, False


def fold_concats(mod: Any) -> tuple[Any, Counter]:
    """``mod`` with every concatenation on the last axis (and its affine chain and ReLU) in ``main`` replaced by a
    call of :func:`concat_kernel` (see the module docstring), and how many of each form were replaced
    (``"concat"``, ``"concat+affine"``, ``"concat+relu"``, ``"concat+affine+relu"``)."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    mod = tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])(mod)  # batch norm's tuple of outputs
    func = mod["main"]
    bindings = Bindings(func)
    builder = relax.BlockBuilder(mod)
    kernels = KernelCache(builder)
    replaced: list[tuple[Any, Any]] = []  # (the chain's last value, its replacement)
    counts: Counter = Counter()
    for var, call in bindings.value_of.items():
        if not isinstance(call, relax.Call) or getattr(call.op, "name", None) != "relax.concat":
            continue
        shape, fields = tvm_shape(var), call.args[0]
        if shape is None or str(var.ty.dtype) != "float32" or not isinstance(fields, relax.Tuple):
            continue
        axis = int(call.attrs.axis) if call.attrs.axis is not None else 0
        field_shapes = [tvm_shape(f) for f in fields.fields]
        if axis % len(shape) != len(shape) - 1 or any(s is None or s[:-1] != shape[:-1] for s in field_shapes):
            continue
        rows, widths = math.prod(shape[:-1]), tuple(s[-1] for s in field_shapes)
        end, scale, shift, relu = _chain(bindings, var, shape[-1], len(shape))
        form = "concat" + ("+affine" if scale is not None else "") + ("+relu" if relu else "")
        kernel = kernels.get((rows, widths, scale is not None, relu), form.replace("+", "_"),
                             lambda: concat_kernel(rows, widths, scale is not None, relu))
        args = [relax.op.reshape(f, (rows, s[-1])) for f, s in zip(fields.fields, field_shapes)]
        if scale is not None:
            args += [relax.const(scale.astype(np.float32)), relax.const(shift.astype(np.float32))]
        out = relax.call_tir(kernel, args, relax.TensorType((rows, shape[-1]), "float32"))
        replaced.append((bindings.value_of[end], relax.op.reshape(out, shape)))
        counts[form] += 1
    if not replaced:
        return mod, counts

    def rewrite(expr: Any, _matched: Any) -> Any:
        return next((new for old, new in replaced if old.same_as(expr)), expr)

    pattern = is_op("relax.concat")(wildcard()) | is_op("relax.nn.relu")(wildcard())  # what a chain may end in
    for op in _AFFINE:
        pattern = pattern | is_op(op)(wildcard(), wildcard())
    out_mod = builder.get()
    out_mod["main"] = rewrite_call(pattern, rewrite, func)
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.Normalize()])(out_mod), \
        counts
