"""Layer norm on the last axis, with the residual sum before it, as one kernel.

TVM's CPU rule for a layer norm left to it (dlight's ``Reduction``) runs the rows in parallel and vectorises
the normalisation, but sums each row's mean and variance one element after another: a chain of dependent
additions as long as the row (768 in BERT-base). Post-LN transformers (BERT) also add the residual in a pass of
its own just before (``layer_norm(x + sublayer(x))``).

:func:`fold_layer_norms` replaces each ``nn.layer_norm`` over the last axis of a statically shaped float32
tensor, with its scale and shift, by a call of :func:`layer_norm_kernel`: rows in parallel; per row the mean,
then the variance as the mean of squared deviations (two passes over the row, as PyTorch's two-pass
definition, not the sum of squares less the squared mean), each summed in ``LANES`` partial sums; then the
normalised row, in vectors. Where the layer norm's input is an ``add`` of two tensors of its shape read nowhere
else, the sum is taken in the kernel too (the kernel reads both, and the sum is not written out). Applied in the
attention build (``attention=True``, :data:`~schedule_gym.models.fixed.ATTENTION_FOLDS`) and when asked for
(``map_model(..., fixed_kernels=("concat", "layer_norm"))``; see :mod:`schedule_gym.models.fixed` for why not by
default).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from schedule_gym.models.bindings import Bindings
from schedule_gym.models.fixed.common import LANES, KernelCache, fold_calls, for_each_column, kernel_attrs
from schedule_gym.models.importer import tvm_shape

__all__ = ["fold_layer_norms", "layer_norm_kernel"]


def layer_norm_kernel(rows: int, n: int, epsilon: float, residual: bool = False) -> Any:
    """The PrimFunc ``(x [rows, n], [r [rows, n],] gamma [n], beta [n], y [rows, n])`` that writes
    ``y = (v - mean(v)) / sqrt(var(v) + epsilon) * gamma + beta`` per row, ``v = x`` (``v = x + r`` if
    ``residual``), the variance the mean of ``(v - mean(v))^2``."""
    if rows < 1 or n < 1 or not epsilon >= 0:
        raise ValueError(f"a layer norm needs rows >= 1, n >= 1 and epsilon >= 0, got rows={rows!r}, n={n!r}, "
                         f"epsilon={epsilon!r}")
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    pieces, tail = divmod(n, LANES)
    with IRBuilder() as ib:
        with T.prim_func():
            x = T.arg("x", T.buffer((rows, n), "float32"))
            r = T.arg("r", T.buffer((rows, n), "float32")) if residual else None
            gamma = T.arg("gamma", T.buffer((n,), "float32"))
            beta = T.arg("beta", T.buffer((n,), "float32"))
            y = T.arg("y", T.buffer((rows, n), "float32"))
            T.func_attr(kernel_attrs("layer_norm"))
            with T.parallel(0, rows) as i:
                acc = T.alloc_buffer((LANES,), "float32", scope="local")
                stat = T.alloc_buffer((2,), "float32", scope="local")  # the mean, then 1 / standard deviation

                def v(col: Any) -> Any:
                    return x[i, col] + r[i, col] if residual else x[i, col]

                def row_sum(term: Any, slot: int) -> None:
                    """``stat[slot] = sum over the row of term(col)``, in LANES partial sums."""
                    with T.vectorized(0, LANES) as lane:
                        T.buffer_store(acc, T.float32(0), [lane])
                    if pieces:
                        with T.serial(0, pieces) as piece:
                            with T.vectorized(0, LANES) as lane:
                                T.buffer_store(acc, acc[lane] + term(piece * LANES + lane), [lane])
                    if tail:
                        with T.serial(0, tail) as lane:
                            T.buffer_store(acc, acc[lane] + term(pieces * LANES + lane), [lane])
                    T.buffer_store(stat, T.float32(0), [slot])
                    with T.serial(0, LANES) as lane:
                        T.buffer_store(stat, stat[slot] + acc[lane], [slot])

                row_sum(v, 0)
                T.buffer_store(stat, stat[0] / T.float32(n), [0])
                row_sum(lambda col: (v(col) - stat[0]) * (v(col) - stat[0]), 1)
                T.buffer_store(stat, T.float32(1) / T.sqrt(stat[1] / T.float32(n) + T.float32(epsilon)), [1])

                def write(col: Any) -> None:
                    T.buffer_store(y, (v(col) - stat[0]) * stat[1] * gamma[col] + beta[col], [i, col])

                for_each_column(n, write)
    return ib.get()


def fold_layer_norms(mod: Any) -> tuple[Any, Counter]:
    """``mod`` with every layer norm over the last axis in ``main`` (and the residual ``add`` before it where that
    is read nowhere else) replaced by a call of :func:`layer_norm_kernel`, and how many of each form were
    replaced (``"layer_norm"``, ``"add+layer_norm"``)."""
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    def rewrite(expr: Any, bindings: Bindings, kernels: KernelCache, counts: Counter) -> Any:
        x, gamma, beta = expr.args
        shape, attrs = tvm_shape(expr), expr.attrs
        if shape is None or str(expr.ty.dtype) != "float32" or not (attrs.center and attrs.scale):
            return expr
        if [int(a) % len(shape) for a in attrs.axes] != [len(shape) - 1]:
            return expr
        n, rows = shape[-1], math.prod(shape[:-1])
        if tvm_shape(gamma) != (n,) or tvm_shape(beta) != (n,) or str(gamma.ty.dtype) != "float32" \
                or str(beta.ty.dtype) != "float32":
            return expr
        operands = [x]
        add = bindings.value_of.get(x)
        if isinstance(add, relax.Call) and getattr(add.op, "name", None) == "relax.add" and bindings.uses[x] == 1 \
                and all(tvm_shape(a) == shape and str(a.ty.dtype) == "float32" for a in add.args):
            operands = list(add.args)
        residual = len(operands) == 2
        epsilon = float(attrs.epsilon)
        kernel = kernels.get((rows, n, epsilon, residual), "add_layer_norm" if residual else "layer_norm",
                             lambda: layer_norm_kernel(rows, n, epsilon, residual))
        counts["add+layer_norm" if residual else "layer_norm"] += 1
        args = [relax.op.reshape(a, (rows, n)) for a in operands] + [gamma, beta]
        return relax.op.reshape(relax.call_tir(kernel, args, relax.TensorType((rows, n), "float32")), shape)

    return fold_calls(mod, is_op("relax.nn.layer_norm")(wildcard(), wildcard(), wildcard()), rewrite)
