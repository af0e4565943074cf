"""Scaled dot-product attention, ``softmax(Q @ K^T * alpha [masked]) @ V``, as one kernel.

Left to the mapping, a transformer's attention is five operators: the two batch matmuls (tuned tasks), the
scaling (a ``divide`` by a constant), the causal mask (GPT-2's ``where`` with a constant boolean mask) and the
softmax (TVM's lowering: ``exp`` a scalar ``expf`` call a lane; see :mod:`schedule_gym.models.fast_math`); each
writes its ``heads x rows x keys`` scores to memory and the next reads them back. :func:`attention_kernel` keeps
one block of a register tile's query rows' scores in a buffer of its own from ``Q @ K^T`` to ``P @ V``: per head
(the heads in parallel) and block, the scores in register tiles (:func:`register_tile`; a broadcast of ``Q`` times a
vector of ``K^T``), scaled and masked as they are written; each row's maximum, ``exp`` (the polynomial of
:func:`fast_exp`, arithmetic alone, so it vectorises), sum; then ``P @ V`` in register tiles of
columns of ``V``, each row times the reciprocal of its sum at the end. A causal kernel skips the key tiles
wholly after the block's last row and, in ``P @ V``, the keys after it: about half the multiplications of a
long sequence.

:func:`fold_attention` finds the pattern in a module's ``main`` before the mapping (which would otherwise take
the two matmuls as tasks) and replaces it by a call of the kernel; applied when asked for
(``map_model(..., fixed_kernels=(..., "attention"))``). The kernel takes the heads in place: a transformer splits
each projection into heads and joins them again by copies (reshapes and permutations; GPT-2's and ViT's ``Q``,
``K``, ``V`` the parts of one split), which become the strides of the kernel's operands
(:mod:`~schedule_gym.models.fixed.views`), so that those copies are left out of the model.
"""

from __future__ import annotations

import functools
import math
import operator
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from schedule_gym.hardware import generation
from schedule_gym.models.bindings import Bindings
from schedule_gym.models.fixed.common import LANES, KernelCache, fold_calls, for_each_column, kernel_attrs
from schedule_gym.models.fixed.views import Strided, strided_target, strided_view
from schedule_gym.models.importer import tvm_shape

__all__ = ["NARROW_TILE", "WIDE_TILE", "attention_kernel", "fast_exp", "fold_attention", "register_tile"]

#: the register tile, ``(rows, key_tile)``: query rows a block (and a register tile) holds, and columns of a tile
#: (keys of ``Q @ K^T``, columns of ``V`` in ``P @ V``). 6 x 16 is 12 AVX2 registers of accumulators (tiles of
#: 3 x 32 and 4 x 16 ran slower on a Zen 3, 2 x 32 and 8 x 16 too) and 6 AVX-512 ones: on a Zen 4 (AVX-512 on
#: 256-bit units) tiles of 32 columns, with 12 or more accumulators, ran no faster
#: (``examples/benchmarks/attention_tiles.py``)
NARROW_TILE = (6, LANES)
#: 24 of AVX-512's 32 registers of accumulators: on an Intel Xeon with two 512-bit FMA units, 12 x 32 ran 20-30%
#: faster than 6 x 16 on BERT-base's and ViT-B/16's shapes, 8 x 32 to 14 x 32 about as fast, 16 x 32 and 8 x 64
#: slower (``attention_tiles.py``)
WIDE_TILE = (12, 2 * LANES)
#: the fill of a masked score: PyTorch's (``torch.finfo(torch.float32).min``); ``fast_exp`` of it less a row's
#: maximum is exactly 0
MASKED = float(np.finfo(np.float32).min)

# Cephes' single-precision exp: ln 2 in two parts (the first exact in float32), the polynomial of exp(r) - 1 - r
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_EXP_LIMIT = 88.3762626647949


def fast_exp(x: Any) -> Any:
    """``exp(x)`` of a float32 TIR expression in arithmetic alone (Cephes' ``expf``: ``x = n ln 2 + r``,
    ``|r| <= ln 2 / 2``, a degree-7 polynomial for ``exp(r)``, ``2^n`` built in the exponent bits); ``x`` is
    clamped to +-88.376, so 0 below (``2^-127`` written as the bits of 0) and no infinity above."""
    from tvm.tirx.script.builder import ir as T

    f = T.float32
    x = T.max(T.min(x, f(_EXP_LIMIT)), f(-_EXP_LIMIT))
    n = T.floor(x * f(1.0 / math.log(2.0)) + f(0.5))
    r = x - n * f(_LN2_HI) - n * f(_LN2_LO)
    y = f(_EXP_POLY[0])
    for c in _EXP_POLY[1:]:
        y = y * r + f(c)
    y = y * r * r + r + f(1.0)
    return y * T.reinterpret("float32", T.shift_left(T.Cast("int32", n) + 127, 23))


def register_tile(cpu: str | None = None) -> tuple[int, int]:
    """The attention kernel's register tile for the CPU named ``cpu`` (default: this one, which the models are built
    for): :data:`WIDE_TILE` where AVX-512 runs on 512-bit FMA units (64 FP32 FLOP a cycle a core), else
    :data:`NARROW_TILE` (AVX2 has 16 registers; a CPU not known has the narrow tile, which fits either)."""
    gen = generation(cpu)
    return WIDE_TILE if gen is not None and gen.avx512 and gen.fma_flop_per_cycle == 64 else NARROW_TILE


def attention_kernel(heads: int, rows: int, keys: int, depth: int, value_depth: int, alpha: float,
                     causal: bool = False, views: Sequence[Strided] | None = None,
                     tile: tuple[int, int] | None = None) -> Any:
    """The PrimFunc ``(q [heads, rows, depth], kt [heads, depth, keys], v [heads, keys, value_depth],
    o [heads, rows, value_depth])`` writing ``o[h] = softmax(q[h] @ kt[h] * alpha) @ v[h]``, the softmax over the
    keys; ``causal`` (``rows == keys``): row ``i`` attends to the keys ``j <= i`` only (the scores after it are
    :data:`MASKED`).

    ``views`` (four, for ``q``, ``kt``, ``v`` and ``o``): each operand a flat tensor of ``view.size`` elements holding
    it in place (:class:`~schedule_gym.models.fixed.views.Strided`), so that a model's heads are read from its
    projections and the result written where the heads are joined, without the copies between. ``v`` and ``o``
    need their last axis contiguous (vectors of columns). At the start of each head the thread copies into
    buffers of its own a ``kt`` whose keys are not contiguous (``K`` as the projection holds it, a token a row),
    as ``depth x keys``, and a ``v`` whose rows are not adjacent, as ``keys x value_depth``: read in place, a ``V``
    whose rows lie a projection's width apart (ViT-B/16's 2,304 floats) made the kernel slower than the copy does.

    ``tile``: the register tile, ``(rows, key_tile)`` (default: :func:`register_tile`'s for this CPU)."""
    for name, value in (("heads", heads), ("rows", rows), ("keys", keys), ("depth", depth),
                        ("value_depth", value_depth)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"attention needs {name} >= 1, got {value!r}")
    if not math.isfinite(alpha):
        raise ValueError(f"attention needs a finite score scale, got alpha={alpha!r}")
    if causal and rows != keys:
        raise ValueError(f"causal attention needs rows == keys, got rows={rows}, keys={keys}")
    if tile is not None and not (isinstance(tile, (tuple, list)) and len(tile) == 2
                                 and all(isinstance(n, (int, np.integer)) and n >= 1 for n in tile)):
        raise ValueError(f"attention needs a register tile of two sizes >= 1, got tile={tile!r}")
    block_rows, key_tile = register_tile() if tile is None else tile
    shapes = ((heads, rows, depth), (heads, depth, keys), (heads, keys, value_depth), (heads, rows, value_depth))
    if views is not None:
        _check_views(views, shapes)
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    f = T.float32
    with IRBuilder() as ib:
        with T.prim_func():
            q, kt, v, o = (_Operand.arg(name, shape, None if views is None else view)
                           for name, shape, view in zip(("q", "kt", "v", "o"), shapes, views or shapes))
            T.func_attr(kernel_attrs("attention"))
            with T.parallel(0, heads) as h:
                s = T.alloc_buffer((block_rows, keys), "float32", scope="local")  # the block's scores, then exps
                scores_kt = kt
                if kt.view is not None and kt.view.strides[2] != 1:  # this head's K^T, the keys contiguous
                    k_rows = T.alloc_buffer((depth, keys), "float32", scope="local")
                    with T.serial(0, keys) as j:
                        with T.serial(0, depth) as k:
                            T.buffer_store(k_rows, kt[h, k, j], [k, j])
                    scores_kt = _HeadCopy(k_rows)
                values = v
                if v.view is not None and v.view.strides[1] != value_depth:  # this head's V, its rows adjacent
                    v_rows = T.alloc_buffer((keys, value_depth), "float32", scope="local")
                    with T.serial(0, keys) as j:
                        for_each_column(value_depth, lambda c: T.buffer_store(v_rows, v[h, j, c], [j, c]))
                    values = _HeadCopy(v_rows)
                acc = T.alloc_buffer((block_rows, key_tile), "float32", scope="local")  # a register tile
                part = T.alloc_buffer((LANES,), "float32", scope="local")  # partial maxima, then sums
                stat = T.alloc_buffer((block_rows, 2), "float32", scope="local")  # a row's maximum, 1 / its sum

                def accumulate(mr: int, width: int, extent: Any, product: Any) -> None:
                    """``acc[:mr, :width] = sum over k < extent of product(i, k, j)``, a register tile."""
                    with T.unroll(0, mr) as i:
                        with T.vectorized(0, width) as j:
                            T.buffer_store(acc, f(0), [i, j])
                    with T.serial(0, extent) as k:
                        with T.unroll(0, mr) as i:
                            with T.vectorized(0, width) as j:
                                T.buffer_store(acc, acc[i, j] + product(i, k, j), [i, j])

                def score_tile(i0: Any, mr: int, c0: Any, width: int) -> None:
                    """``s[:mr, c0:c0+width]`` from ``Q[i0:i0+mr] @ K^T[:, c0:c0+width]``, scaled and masked."""
                    accumulate(mr, width, depth, lambda i, k, j: q[h, i0 + i, k] * scores_kt[h, k, c0 + j])
                    with T.unroll(0, mr) as i:
                        with T.vectorized(0, width) as j:
                            value = acc[i, j] * f(alpha)
                            if causal:
                                value = T.Select(c0 + j <= i0 + i, value, f(MASKED))
                            T.buffer_store(s, value, [i, c0 + j])

                def masked_tile(mr: int, c0: Any) -> None:
                    with T.unroll(0, mr) as i:
                        with T.vectorized(0, key_tile) as j:
                            T.buffer_store(s, f(MASKED), [i, c0 + j])

                def row_pass(i: Any, update: Any) -> Any:
                    """``update(col, lane)`` over the row ``i`` in LANES-wide vectors (``lane``: the column's
                    partial value in ``part``), then ``part``'s lanes as a list."""
                    for_each_column(keys, lambda col: update(col, T.floormod(col, LANES)))
                    return [part[lane] for lane in range(LANES)]

                def softmax_rows(mr: int) -> None:
                    """``s[i] = exp(s[i] - max(s[i]))``, one pass for the maximum, one for the exps and their
                    sum; ``stat[i] = (max, 1 / sum)``."""
                    with T.unroll(0, mr) as i:
                        with T.vectorized(0, LANES) as lane:
                            T.buffer_store(part, f(MASKED), [lane])
                        maxima = row_pass(i, lambda col, lane: T.buffer_store(part, T.max(part[lane], s[i, col]),
                                                                              [lane]))
                        T.buffer_store(stat, functools.reduce(T.max, maxima), [i, 0])
                        with T.vectorized(0, LANES) as lane:
                            T.buffer_store(part, f(0), [lane])

                        def exp_and_sum(col: Any, lane: Any) -> None:
                            T.buffer_store(s, fast_exp(s[i, col] - stat[i, 0]), [i, col])
                            T.buffer_store(part, part[lane] + s[i, col], [lane])

                        sums = row_pass(i, exp_and_sum)
                        T.buffer_store(stat, f(1) / functools.reduce(operator.add, sums), [i, 1])

                def value_tile(i0: Any, mr: int, c0: int, width: int, key_end: Any) -> None:
                    """``o[i0:i0+mr, c0:c0+width] = s[:mr, :key_end] @ V[:key_end, c0:c0+width] / sums``."""
                    accumulate(mr, width, key_end, lambda i, k, j: s[i, k] * values[h, k, c0 + j])
                    with T.unroll(0, mr) as i:
                        with T.vectorized(0, width) as j:
                            o.store(acc[i, j] * stat[i, 1], h, i0 + i, c0 + j)

                def block(i0: Any, mr: int) -> None:
                    tiles, tail = divmod(keys, key_tile)
                    if tiles:
                        with T.serial(0, tiles) as c:
                            if causal:  # a tile wholly after the block's last row is masked
                                with T.If(c * key_tile < i0 + mr):
                                    with T.Then():
                                        score_tile(i0, mr, c * key_tile, key_tile)
                                    with T.Else():
                                        masked_tile(mr, c * key_tile)
                            else:
                                score_tile(i0, mr, c * key_tile, key_tile)
                    if tail:
                        score_tile(i0, mr, tiles * key_tile, tail)
                    softmax_rows(mr)
                    key_end = T.min(i0 + mr, keys) if causal else keys
                    columns, rest = divmod(value_depth, key_tile)
                    for c in range(columns):
                        value_tile(i0, mr, c * key_tile, key_tile, key_end)
                    if rest:
                        value_tile(i0, mr, columns * key_tile, rest, key_end)

                blocks, tail_rows = divmod(rows, block_rows)
                if blocks:
                    with T.serial(0, blocks) as b:
                        block(b * block_rows, block_rows)
                if tail_rows:
                    block(blocks * block_rows, tail_rows)
    return ib.get()


class _Operand:
    """An operand of the attention kernel: a buffer of its own shape, or (with ``view``) a flat one holding it in
    place; ``x[h, a, b]`` loads, :meth:`store` stores."""

    def __init__(self, buffer: Any, view: Strided | None = None) -> None:
        self.buffer, self.view = buffer, view

    @classmethod
    def arg(cls, name: str, shape: tuple[int, ...], view: Strided | None) -> _Operand:
        """The kernel's parameter ``name``: ``shape`` as it is, or the flat tensor ``view`` reads."""
        from tvm.tirx.script.builder import ir as T

        return cls(T.arg(name, T.buffer(shape if view is None else (view.size,), "float32")), view)

    def place(self, h: Any, a: Any, b: Any) -> tuple[Any, ...]:
        return (h, a, b) if self.view is None else (self.view.index(h, a, b),)

    def __getitem__(self, index: tuple[Any, Any, Any]) -> Any:
        return self.buffer[self.place(*index)]

    def store(self, value: Any, h: Any, a: Any, b: Any) -> None:
        from tvm.tirx.script.builder import ir as T

        T.buffer_store(self.buffer, value, list(self.place(h, a, b)))


class _HeadCopy(_Operand):
    """One head's copy of an operand, a 2-D buffer of the thread: ``x[h, a, b]`` is ``buffer[a, b]``."""

    def place(self, h: Any, a: Any, b: Any) -> tuple[Any, ...]:
        return (a, b)


def _check_views(views: Sequence[Strided], shapes: Sequence[tuple[int, int, int]]) -> None:
    """A clear error where ``views`` cannot hold the kernel's four operands of ``shapes``."""
    if len(views) != 4:
        raise ValueError(f"attention needs four views (q, kt, v, o), got {len(views)}")
    for name, view, shape in zip(("q", "kt", "v", "o"), views, shapes):
        corners = [view.index(*(e - 1 if bit else 0 for e, bit in zip(shape, bits)))
                   for bits in np.ndindex(2, 2, 2)]
        if min(corners) < 0 or max(corners) >= view.size:
            raise ValueError(f"attention's {name} view {view} reaches outside its {view.size} elements for {shape}")
        if name in ("v", "o") and view.strides[2] != 1 and shape[2] > 1:
            raise ValueError(f"attention's {name} view needs a contiguous last axis (stride 1), got {view.strides}")


def _constant(expr: Any, bindings: Bindings) -> np.ndarray | None:
    """The value of a Relax constant (or of a var bound to one), else None."""
    import tvm

    expr = bindings.value_of.get(expr, expr)
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


def _single_use_value(expr: Any, bindings: Bindings, op: str) -> Any:
    """The call of ``op`` that the var ``expr`` is bound to, if the var is read only there, else None."""
    from tvm import relax

    value = bindings.value_of.get(expr)
    if isinstance(value, relax.Call) and getattr(value.op, "name", None) == op and bindings.uses[expr] == 1:
        return value
    return None


def _through_reshapes(expr: Any, bindings: Bindings) -> Any:
    """The input of the chain of single-use reshapes that ends in ``expr`` (``expr`` itself if it is none)."""
    while (value := _single_use_value(expr, bindings, "relax.reshape")) is not None:
        expr = value.args[0]
    return expr


class _Match:
    """What the walk back from ``P @ V`` found: the softmax's shape, the score scale, the causal mask, ``Q`` and
    ``K^T``."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.alpha = 1.0
        self.causal = False
        self.q: Any = None
        self.kt: Any = None


def _scores(probabilities: Any, bindings: Bindings) -> _Match | None:
    """Walk from the first operand of ``P @ V`` back to ``Q @ K^T`` through a softmax over the last axis, a
    ``where`` with a constant causal mask and a fill of at most -1e30, and a ``divide`` or ``multiply`` by a
    constant scalar; each value read only by the next. None where the chain is not attention's."""
    from tvm import relax

    softmax = _single_use_value(_through_reshapes(probabilities, bindings), bindings, "relax.nn.softmax")
    if softmax is None:
        return None
    shape = tvm_shape(softmax)
    if shape is None or len(shape) < 2 or int(softmax.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    match = _Match(shape)
    x = _through_reshapes(softmax.args[0], bindings)
    where = _single_use_value(x, bindings, "relax.where")
    if where is not None:
        mask, kept, fill = where.args
        mask, fill = _constant(mask, bindings), _constant(fill, bindings)
        rows, keys = shape[-2], shape[-1]
        if mask is None or fill is None or fill.size != 1 or not float(fill.reshape(())) <= -1e30 \
                or mask.dtype != np.bool_ or rows != keys or mask.ndim > len(shape) \
                or math.prod(mask.shape[:-2]) != 1 or tuple(mask.shape[-2:]) != (rows, keys) \
                or tvm_shape(kept) != shape:
            return None
        if not np.array_equal(mask.reshape(rows, keys), np.tri(rows, keys, dtype=bool)):
            return None
        match.causal, x = True, _through_reshapes(kept, bindings)
    for op in ("relax.divide", "relax.multiply"):
        scaled = _single_use_value(x, bindings, op)
        if scaled is None:
            continue
        a, b = scaled.args
        c = _constant(b, bindings)
        if c is None and op == "relax.multiply":
            a, c = b, _constant(a, bindings)
        if c is None or c.size != 1 or tvm_shape(a) != tvm_shape(scaled):
            return None
        value = float(c.reshape(()))
        if value == 0 or not math.isfinite(value):
            return None
        match.alpha, x = (1.0 / value if op == "relax.divide" else value), a
        break
    qk = _single_use_value(_through_reshapes(x, bindings), bindings, "relax.matmul")
    if qk is None:
        return None
    match.q, match.kt = qk.args
    return match


class _Attention(NamedTuple):
    """One attention found: its operands (``Q``, ``K^T``, ``V``) and the kernel's arguments."""

    q: Any
    kt: Any
    v: Any
    heads: int
    rows: int
    keys: int
    depth: int
    value_depth: int
    alpha: float
    causal: bool

    def shapes(self) -> tuple[tuple[int, int, int], ...]:
        """The rank-3 shapes of ``q``, ``kt``, ``v`` and ``o`` as the kernel reads them."""
        return ((self.heads, self.rows, self.depth), (self.heads, self.depth, self.keys),
                (self.heads, self.keys, self.value_depth), (self.heads, self.rows, self.value_depth))


def _attention(expr: Any, bindings: Bindings) -> _Attention | None:
    """The attention whose ``P @ V`` is ``expr`` (a matmul), or None where the chain is not attention's."""
    probabilities, v = expr.args
    match = _scores(probabilities, bindings)
    if match is None:
        return None
    shapes = [tvm_shape(t) for t in (match.q, match.kt, v)]
    if any(s is None or len(s) < 3 for s in shapes) \
            or any(str(t.ty.dtype) != "float32" for t in (match.q, match.kt, v, expr)):
        return None
    (q_shape, kt_shape, v_shape), out_shape = shapes, tvm_shape(expr)
    heads = math.prod(q_shape[:-2])
    rows, depth = q_shape[-2:]
    keys, value_depth = kt_shape[-1], v_shape[-1]
    if q_shape[:-2] != kt_shape[:-2] or q_shape[:-2] != v_shape[:-2] or kt_shape[-2] != depth \
            or v_shape[-2] != keys or out_shape is None or math.prod(out_shape) != heads * rows * value_depth:
        return None
    # the reshapes around the softmax keep each row of keys a row: its last two axes are the scores'
    p_shape = tvm_shape(probabilities)
    if match.shape[-2:] != (rows, keys) or p_shape is None or p_shape[-2:] != (rows, keys) \
            or math.prod(match.shape) != heads * rows * keys:
        return None
    return _Attention(match.q, match.kt, v, heads, rows, keys, depth, value_depth, match.alpha, match.causal)


def fold_attention(mod: Any, heads_in_place: bool = True) -> tuple[Any, Counter]:
    """``mod`` with every ``softmax(Q @ K^T * alpha [causally masked]) @ V`` in ``main`` replaced by a call of
    :func:`attention_kernel`, and how many of each form were replaced (``"attention"``, ``"causal attention"``).

    The chain may hold reshapes between its operators (the importer's, between the 3-D matmuls and the 4-D
    softmax); ``Q``, ``K^T`` and ``V`` are float32, of rank 3 or more with the same leading axes (the heads,
    batch included); every value inside is read once. A mask is taken where it is a constant boolean equal to
    the lower triangle (a causal mask, broadcast over the heads) with a fill of at most -1e30 (PyTorch's
    ``finfo.min`` as GPT-2 writes it, or ``-inf``); any other mask leaves the chain to the mapping.

    ``heads_in_place``: the kernel reads ``Q``, ``K^T`` and ``V`` where the reshapes, permutations and split parts
    before them found them (the projections' results, a token a row) and writes its result where the views after
    it (the heads joined: a permutation and reshapes, each read once) put it; those copies are left out
    (:mod:`~schedule_gym.models.fixed.views`). Else it takes each operand copied to its own ``[heads, ., .]``.
    """
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    pending: dict[Any, tuple[_Attention, Strided]] = {}  # the last view after an attention: it, where it writes

    def call(found: _Attention, out_view: Strided | None, shape: tuple[int, ...], bindings: Bindings,
             kernels: KernelCache, counts: Counter) -> Any:
        q_shape, kt_shape, v_shape, o_shape = found.shapes()
        if heads_in_place:
            operands = [strided_view(found.q, bindings, q_shape), strided_view(found.kt, bindings, kt_shape),
                        strided_view(found.v, bindings, v_shape, unit_last=True)]
            views = (*(view for _, view in operands), out_view or Strided.contiguous(o_shape))
            args = [relax.op.reshape(base, (view.size,)) for base, view in operands]
            out_type = relax.TensorType((views[3].size,), "float32")
        else:
            views = None
            args = [relax.op.reshape(t, s) for t, s in ((found.q, q_shape), (found.kt, kt_shape), (found.v, v_shape))]
            out_type = relax.TensorType(o_shape, "float32")
        key = (found.heads, found.rows, found.keys, found.depth, found.value_depth, found.alpha, found.causal, views)
        kernel = kernels.get(key, "causal_attention" if found.causal else "attention",
                             lambda: attention_kernel(*key))
        counts["causal attention" if found.causal else "attention"] += 1
        return relax.op.reshape(relax.call_tir(kernel, args, out_type), shape)

    def rewrite(expr: Any, bindings: Bindings, kernels: KernelCache, counts: Counter) -> Any:
        if getattr(expr.op, "name", None) != "relax.matmul":  # a view: the last after an attention writes it
            var = bindings.bound.get(expr)
            if var is None or var not in pending:
                return expr
            found, view = pending.pop(var)
            return call(found, view, tvm_shape(expr), bindings, kernels, counts)
        found = _attention(expr, bindings)
        if found is None:
            return expr
        target = strided_target(expr, bindings, found.shapes()[3]) if heads_in_place else None
        if target is not None:  # the kernel writes the last view after it; this matmul is left unread
            pending[target[0]] = (found, target[1])
            return expr
        return call(found, None, tvm_shape(expr), bindings, kernels, counts)

    pattern = is_op("relax.matmul")(wildcard(), wildcard()) | is_op("relax.reshape")(wildcard(), wildcard()) \
        | is_op("relax.permute_dims")(wildcard())
    return fold_calls(mod, pattern, rewrite)
