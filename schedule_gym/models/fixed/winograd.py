"""Winograd's minimal filtering for 3x3 convolutions: F(m x m, 3 x 3) as two fixed transforms around a tuned
batched GEMM (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016, section 4).

A direct 3x3 convolution spends ``9 m^2`` multiplications per input-output channel pair on an ``m x m`` output
tile; Winograd spends ``(m + 2)^2`` (4x fewer at ``m = 4``) in three steps:

1. **input transform** (:func:`input_transform`): each ``(m + 2) x (m + 2)`` tile ``d`` of the padded input
   (tiles overlap by 2) becomes ``B^T d B``, stored as ``V[(m + 2)^2, P, C]`` for the ``P`` tiles;
2. **a batched GEMM** per position of the tile, ``M[e] = V[e] @ U[e]``, with the weights transformed once when
   the model is built, ``U[e] = (G g G^T)[e]`` (:func:`weight_transform`, ``[C, K]`` each): a plain ``relax``
   matmul, which the mapping makes a ``batch_matmul`` task, tuned as any other;
3. **output transform** (:func:`output_transform`): ``Y = A^T M A`` per tile, cut to the image, plus the bias
   and the ReLU of the convolution's epilogue.

``A, B, G`` are TVM's (``tvm.topi.nn.winograd_util``, Cook-Toom on the points 0, +-1, +-1/2, ...). The transforms
are bound by memory: tiles in parallel, channels in 16-lane vectors, the matrices' constants unrolled and their
zeros skipped. The price is rounding: the transforms' constants grow with ``m`` (at ``m = 4`` the outputs of
3x3 convolutions over 64-512 channels differ from float64 by 2-5e-6 of their largest value, within the models'
check of 1e-4), and more memory traffic (``(m + 2)^2 / m^2`` times the activations, ``(m + 2)^2 / 9`` times
the weights).

:func:`fold_winograd` rewrites a module's eligible convolutions before the mapping's patterns run (the GEMM it
leaves is then mapped like any other matmul): ``map_model(..., winograd=True)``.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Any

import numpy as np

from schedule_gym.models.fixed.common import LANES, KernelCache, kernel_attrs
from schedule_gym.models.importer import tvm_shape
from schedule_gym.tasks.task import Task

__all__ = ["MIN_TILES", "TILE", "fold_winograd", "foldable_task", "input_transform", "matrices", "output_transform",
           "weight_transform"]

#: the output tile ``m`` of F(m x m, 3 x 3) the fold uses
TILE = 4
#: the fewest output tiles (``ceil(h / TILE) x ceil(w / TILE)``) of a convolution the fold takes. Each of the 36
#: transformed weight matrices (4 times the direct weight's bytes) serves as many rows of its matmul as the map has
#: tiles, once a pass: at 7 x 7 (4 tiles) ResNet-50's 512-channel 3x3 layer ran Winograd's steps 2.7x slower than its
#: direct kernel on a Zen 4 and 1.2x slower on a Zen 3 (its quiet run of two), at 14 x 14 (16 tiles) its 256-channel
#: one 2.3x and 2.5x faster (``examples/benchmarks/resnet50_layers.py``); no map in between was measured, so the line
#: is at the measured win
MIN_TILES = 16


@lru_cache(maxsize=None)
def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TVM's ``A (m+2 x m)``, ``B (m+2 x m+2)``, ``G (m+2 x 3)`` of F(m, 3): ``y = A^T [(G g) * (B^T d)]``."""
    if not 2 <= m <= 6:
        raise ValueError(f"the Winograd output tile m must be 2 to 6, got {m!r}")
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(m + 1), m, 3)
    return np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(g, np.float64)


def _combination(terms: list[tuple[float, Any]]) -> Any:
    """``sum c * x`` over the nonzero ``c`` as one TIR expression (0 if none)."""
    from tvm.tirx.script.builder import ir as T

    out = None
    for c, x in terms:
        if c == 0:
            continue
        term = x if c == 1 else (-x if c == -1 else T.float32(float(c)) * x)
        out = term if out is None else out + term
    return T.float32(0) if out is None else out


def _tiles(h: int, w: int, m: int) -> tuple[int, int]:
    return math.ceil(h / m), math.ceil(w / m)


def _check(h: int, w: int, channels: int, m: int, what: str) -> None:
    if h < 1 or w < 1 or channels < 1 or channels % LANES:
        raise ValueError(f"a Winograd {what} needs h, w >= 1 and channels a multiple of {LANES}, got h={h!r}, "
                         f"w={w!r}, channels={channels!r}")
    matrices(m)


def input_transform(h: int, w: int, c: int, m: int = TILE) -> Any:
    """The PrimFunc ``(x [h, w, c], v [(m+2)^2, P, c])`` writing ``v[:, p, :] = B^T d B`` for each tile ``p`` (row
    major over the ``ceil(h/m) x ceil(w/m)`` tiles), ``d`` the input from one row and column before the tile's
    outputs (padding 1), zero outside the image."""
    _check(h, w, c, m, "input transform")
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx import And
    from tvm.tirx.script.builder import ir as T

    _, bm, _ = matrices(m)
    alpha, (th, tw) = m + 2, _tiles(h, w, m)
    with IRBuilder() as ib:
        with T.prim_func():
            x = T.arg("x", T.buffer((h, w, c), "float32"))
            v = T.arg("v", T.buffer((alpha * alpha, th * tw, c), "float32"))
            T.func_attr(kernel_attrs("winograd_input"))
            # one opaque block around the loops: Relax's reshape analysis reads every one-input kernel's body as a
            # block (TVM's own imperative kernels do the same)
            with T.sblock("winograd_input"), T.parallel(0, th * tw) as p:
                d = T.alloc_buffer((alpha * alpha * LANES,), "float32", scope="local")
                t = T.alloc_buffer((alpha * alpha * LANES,), "float32", scope="local")
                with T.serial(0, c // LANES) as piece:
                    for i in range(alpha):
                        for j in range(alpha):
                            row, col = p // tw * m + (i - 1), p % tw * m + (j - 1)
                            inside = And(And(row >= 0, row < h), And(col >= 0, col < w))
                            with T.vectorized(0, LANES) as lane:
                                T.buffer_store(d, T.if_then_else(inside, x[row, col, piece * LANES + lane], T.float32(0)),
                                               [(i * alpha + j) * LANES + lane])
                    for i in range(alpha):  # t = d B
                        for e2 in range(alpha):
                            with T.vectorized(0, LANES) as lane:
                                T.buffer_store(t, _combination([(bm[j, e2], d[(i * alpha + j) * LANES + lane])
                                                                for j in range(alpha)]), [(i * alpha + e2) * LANES + lane])
                    for e1 in range(alpha):  # v = B^T t
                        for e2 in range(alpha):
                            with T.vectorized(0, LANES) as lane:
                                T.buffer_store(v, _combination([(bm[i, e1], t[(i * alpha + e2) * LANES + lane])
                                                                for i in range(alpha)]),
                                               [e1 * alpha + e2, p, piece * LANES + lane])
    return ib.get()


def output_transform(h: int, w: int, k: int, m: int = TILE, relu: bool = False) -> Any:
    """The PrimFunc ``(mm [(m+2)^2, P, k], bias [k], y [h, w, k])`` writing ``y = A^T M A + bias`` per tile (then
    ``max(y, 0)`` if ``relu``), the outputs past the image's edge dropped."""
    _check(h, w, k, m, "output transform")
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx import And
    from tvm.tirx.script.builder import ir as T

    am, _, _ = matrices(m)
    alpha, (th, tw) = m + 2, _tiles(h, w, m)
    with IRBuilder() as ib:
        with T.prim_func():
            mm = T.arg("mm", T.buffer((alpha * alpha, th * tw, k), "float32"))
            bias = T.arg("bias", T.buffer((k,), "float32"))
            y = T.arg("y", T.buffer((h, w, k), "float32"))
            T.func_attr(kernel_attrs("winograd_output"))
            with T.sblock("winograd_output"), T.parallel(0, th * tw) as p:
                t = T.alloc_buffer((m * alpha * LANES,), "float32", scope="local")
                with T.serial(0, k // LANES) as piece:
                    for a in range(m):  # t = A^T M
                        for e2 in range(alpha):
                            with T.vectorized(0, LANES) as lane:
                                T.buffer_store(t, _combination([(am[e1, a], mm[e1 * alpha + e2, p, piece * LANES + lane])
                                                                for e1 in range(alpha)]), [(a * alpha + e2) * LANES + lane])
                    for a in range(m):  # y = t A
                        for b in range(m):
                            row, col = p // tw * m + a, p % tw * m + b
                            with T.If(And(row < h, col < w)):
                                with T.Then():
                                    with T.vectorized(0, LANES) as lane:
                                        value = _combination([(am[e2, b], t[(a * alpha + e2) * LANES + lane])
                                                              for e2 in range(alpha)]) + bias[piece * LANES + lane]
                                        T.buffer_store(y, T.max(value, T.float32(0)) if relu else value,
                                                       [row, col, piece * LANES + lane])
    return ib.get()


def weight_transform(weights: np.ndarray, m: int = TILE) -> np.ndarray:
    """HWIO ``[3, 3, C, K]`` weights as ``U [(m+2)^2, C, K]`` (composed in float64, rounded once)."""
    if weights.ndim != 4 or weights.shape[:2] != (3, 3):
        raise ValueError(f"Winograd's weight transform takes HWIO 3x3 weights [3, 3, C, K], got {weights.shape}")
    _, _, g = matrices(m)
    u = np.einsum("ai,ijck,bj->abck", g, weights.astype(np.float64), g)
    return u.reshape(-1, *weights.shape[2:]).astype(np.float32)


def _foldable(n: int, h: int, w: int, c: int, kernel: tuple[int, ...], strides: tuple[int, ...],
              dilation: tuple[int, ...], padding: tuple[int, ...], groups: int) -> tuple[int, int, int, int] | None:
    """The fold's rules on a convolution's geometry (``kernel`` its HWIO weight's shape, ``padding`` on every
    side): ``(h, w, c, k)`` if it is batch 1, 3x3, stride 1, dilation 1, padding 1, one group, channels in whole
    vectors, at least :data:`MIN_TILES` output tiles; else None."""
    if n != 1 or tuple(kernel[:3]) != (3, 3, c) or tuple(strides) != (1, 1) or tuple(dilation) != (1, 1) \
            or set(padding) != {1} or groups != 1:
        return None
    if math.ceil(h / TILE) * math.ceil(w / TILE) < MIN_TILES:
        return None
    k = kernel[3]
    return (h, w, c, k) if c % LANES == 0 and k % LANES == 0 else None


def _eligible(conv: Any) -> tuple[int, int, int, int] | None:
    """``(h, w, c, k)`` of a convolution the fold takes: NHWC/HWIO, float32, a constant weight, and the rules of
    :func:`_foldable`; else None."""
    import tvm

    attrs = conv.attrs
    data, weight = conv.args
    shape, wshape = tvm_shape(data), tvm_shape(weight)
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != ("NHWC", "HWIO", "NHWC"):
        return None
    if not isinstance(weight, tvm.ir.expr.Constant) or shape is None or wshape is None or len(shape) != 4:
        return None
    if len(wshape) != 4 or str(data.ty.dtype) != "float32" or str(weight.ty.dtype) != "float32":
        return None
    return _foldable(*shape, wshape, tuple(int(s) for s in attrs.strides), tuple(int(d) for d in attrs.dilation),
                     tuple(int(p) for p in attrs.padding), int(attrs.groups))


def foldable_task(task: Task) -> tuple[int, int, int, int] | None:
    """``(h, w, c, k)`` of a conv2d task (NHWC, float32) whose convolution :func:`fold_winograd` would take in a
    model, else None: a layer benchmark times the same layers as Winograd's that a model build folds."""
    if task.op != "conv2d" or task.param("layout") != "NHWC" or task.dtype != "float32":
        return None
    (h, w), groups, per_group = task.param("in_hw"), task.param("groups"), task.dim("rc").extent
    kernel = (task.dim("rh").extent, task.dim("rw").extent, per_group, task.dim("co").extent)  # HWIO
    return _foldable(task.dim("n").extent, h, w, per_group * groups, kernel, task.param("stride"),
                     task.param("dilation"), tuple(task.param("padding")) * 2, groups)


def fold_winograd(mod: Any, m: int = TILE) -> tuple[Any, Counter]:
    """``mod`` with every eligible 3x3 convolution in ``main`` (:func:`_eligible`), with the constant bias added
    after it and the ReLU after that where there are, replaced by F(m x m, 3 x 3): the input transform, a matmul by
    the transformed weights, the output transform with the bias and ReLU; and how many of each form were replaced
    (``"conv2d3x3"``, ``"+bias"``, ``"+relu"`` appended)."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

    matrices(m)
    builder = relax.BlockBuilder(mod)
    kernels = KernelCache(builder)
    counts: Counter = Counter()
    conv_pat = is_op("relax.nn.conv2d")(wildcard(), is_const())
    biased = is_op("relax.add")(conv_pat, is_const())
    relued = is_op("relax.nn.relu")(biased)
    alpha = m + 2

    def rewriter(relu: bool, with_bias: bool):
        def rewrite(expr: Any, matched: Any) -> Any:
            conv = matched[conv_pat]
            found = _eligible(conv)
            if found is None:
                return expr
            h, w, c, k = found
            bias = np.zeros(k, np.float32)
            if with_bias:
                constant = matched[biased].args[1]
                values = constant.value.numpy()
                if values.size != k or values.shape[-1] != k or str(values.dtype) != "float32":
                    return expr
                bias = values.reshape(k).astype(np.float32)
            th, tw = _tiles(h, w, m)
            tiles = th * tw
            weights = conv.args[1].value.numpy()
            x = relax.op.reshape(conv.args[0], (h, w, c))
            transform_in = kernels.get(("in", h, w, c, m), "winograd_input", lambda: input_transform(h, w, c, m))
            v = relax.call_tir(transform_in, [x], relax.TensorType((alpha * alpha, tiles, c), "float32"))
            product = relax.op.matmul(v, relax.const(weight_transform(weights, m)))
            transform_out = kernels.get(("out", h, w, k, m, relu), "winograd_output_relu" if relu else "winograd_output",
                                        lambda: output_transform(h, w, k, m, relu))
            y = relax.call_tir(transform_out, [product, relax.const(bias)], relax.TensorType((h, w, k), "float32"))
            counts["conv2d3x3" + ("+bias" if with_bias else "") + ("+relu" if relu else "")] += 1
            return relax.op.reshape(y, (1, h, w, k))
        return rewrite

    func = mod["main"]
    for pattern, relu, with_bias in ((relued, True, True), (biased, False, True), (conv_pat, False, False)):
        func = rewrite_call(pattern, rewriter(relu, with_bias), func)
    if not counts:
        return mod, counts
    out = builder.get()
    out["main"] = func
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.Normalize()])(out), counts
