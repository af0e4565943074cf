"""2-D pooling (max and average; NHWC and NCHW; kernel, stride, padding; global average pooling as a kernel of
the input's size), with PyTorch's semantics: builder, name, workload, references, CUDA axes, model mapping
(``nn.MaxPool2d``, ``nn.AvgPool2d``, ``nn.AdaptiveAvgPool2d``, a mean over the spatial axes), environment.

Semantics are ``torch.nn.functional.max_pool2d`` / ``avg_pool2d`` with their defaults: max pooling pads with
``-inf`` (PyTorch allows at most half the kernel of padding, so every window holds an input element and the
padding never wins); average pooling pads with zeros and divides every window by the kernel's size
(``count_include_pad=True``). Loop dimensions: ``n, h, w, c`` (output, spatial; ``h, w`` output sizes) and
``rh, rw`` (the window, reductions), ordered ``n h w c | rh rw`` for NHWC (``c`` innermost, vectorised by the
CPU template) and ``n c h w | rh rw`` for NCHW. A point of the iteration space is one compare (max) or one add
(average): :attr:`~schedule_gym.tasks.Task.flops` counts one operation per point, not two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedule_gym.operators.base import (
    PAIR_PATTERN, REDUCTION_SPLITS, SPATIAL_SPLITS, CudaAxis, Operator, pair, pair_of_text, pair_text, split_tuple,
)
from schedule_gym.operators.graph import ANY, Refusal, check_float32, shape_of
from schedule_gym.operators.matmul import extents
from schedule_gym.operators.workload import Workload, dot_tolerance
from schedule_gym.tasks.task import LoopDim, Operand, Task, Term, check_positive_int

__all__ = ["POOL2D", "POOL_KINDS", "POOL_LAYOUTS", "Pool2dWorkload", "pool2d"]

POOL_KINDS = ("max", "avg")
POOL_LAYOUTS = ("NHWC", "NCHW")
#: a compare (max) or an add (average) per point of the iteration space
OPS_PER_POINT = 1


def pool2d(
    n: int,
    h: int,
    w: int,
    c: int,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    kind: str = "max",
    layout: str = "NHWC",
    splits: Sequence[int] | None = None,
    dtype: str = "float32",
    name: str | None = None,
) -> Task:
    """``kind`` (``"max"`` or ``"avg"``) pooling of an ``n x h x w x c`` input over ``kernel`` windows.

    ``stride`` defaults to the kernel (PyTorch's default); ``padding`` may be at most half the kernel
    (PyTorch's rule). Global average pooling is ``kernel=(h, w)`` with ``kind="avg"``. ``splits`` gives the
    loops of each dimension in the layout's order (default 4 per spatial dimension, 2 per reduction).

    >>> t = pool2d(1, 112, 112, 64, 3, stride=2, padding=1)
    >>> t.describe()
    'pool2d-max-1x112x112x64-k3-s2-p1 (pool2d{in_hw=112x112,kind=max,layout=NHWC,padding=1x1,stride=2x2} n=1 h=56 w=56 c=64 rh=3 rw=3, splits 4/4/4/4/2/2, float32)'
    >>> t.operands[0].describe(), t.flops == 56 * 56 * 64 * 9
    ('I[n, h*2 + rh, w*2 + rw, c]', True)
    """
    n, h, w, c = (check_positive_int(v, x) for v, x in ((n, "n"), (h, "h"), (w, "w"), (c, "c")))
    kh, kw = pair(kernel, "kernel", 1)
    sh, sw = pair((kh, kw) if stride is None else stride, "stride", 1)
    ph, pw = pair(padding, "padding", 0)
    if kind not in POOL_KINDS:
        raise ValueError(f"kind must be one of {POOL_KINDS}, got {kind!r}")
    if layout not in POOL_LAYOUTS:
        raise ValueError(f"layout must be one of {POOL_LAYOUTS}, got {layout!r}")
    if 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"padding {ph}x{pw} is more than half the {kh}x{kw} kernel (PyTorch's limit)")
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"the {kh}x{kw} kernel is larger than the {h}x{w} input padded by {ph}x{pw}")
    names = ("n", "h", "w", "c", "rh", "rw") if layout == "NHWC" else ("n", "c", "h", "w", "rh", "rw")
    sizes = {"n": n, "h": ho, "w": wo, "c": c, "rh": kh, "rw": kw}
    default = tuple(REDUCTION_SPLITS if x in ("rh", "rw") else SPATIAL_SPLITS for x in names)
    s = split_tuple(default if splits is None else splits, 6, f"pool2d splits ({' '.join(names)})")
    dims = tuple(LoopDim(x, sizes[x], sx, reduction=x in ("rh", "rw")) for x, sx in zip(names, s))
    row, col = (Term("h", sh), Term("rh")), (Term("w", sw), Term("rw"))
    if layout == "NHWC":
        operands = (Operand("I", ((Term("n"),), row, col, (Term("c"),))), Operand.of_dims("O", ("n", "h", "w", "c"), True))
    else:
        operands = (Operand("I", ((Term("n"),), (Term("c"),), row, col)), Operand.of_dims("O", ("n", "c", "h", "w"), True))
    label = f"pool2d-{kind}-{n}x{h}x{w}x{c}-k{pair_text((kh, kw))}-s{pair_text((sh, sw))}-p{pair_text((ph, pw))}"
    label += "" if layout == "NHWC" else f"-{layout.lower()}"
    params = (("layout", layout), ("kind", kind), ("in_hw", (h, w)), ("stride", (sh, sw)), ("padding", (ph, pw)))
    return Task(name=name or label, op="pool2d", dims=dims, operands=operands, dtype=dtype, params=params,
                ops_per_point=OPS_PER_POINT)


_NAME = re.compile(rf"^pool2d-(max|avg)-(\d+)x(\d+)x(\d+)x(\d+)-k{PAIR_PATTERN}-s{PAIR_PATTERN}-p{PAIR_PATTERN}(-nchw)?$")


def parse_name(name: str) -> dict[str, Any] | None:
    """``pool2d-max-1x112x112x64-k3-s2-p1`` (``-nchw`` for NCHW) -> the builder's arguments."""
    match = _NAME.match(name)
    if match is None:
        return None
    kind, n, h, w, c, k, st, p, nchw = match.groups()
    return {"n": int(n), "h": int(h), "w": int(w), "c": int(c), "kernel": pair_of_text(k, 1),
            "stride": pair_of_text(st, 1), "padding": pair_of_text(p, 0), "kind": kind,
            "layout": "NCHW" if nchw else "NHWC"}


class Pool2dWorkload(Workload):
    """Pooling (see :func:`pool2d`): padding is a ``pad`` stage the templates inline into the loads, the
    window's max or sum the main block ``C``, an average's scale by ``1 / (kh * kw)`` a write-back block ``O``.

    Tolerance: max pooling is exact (its result is one of its inputs), so the check asks for equality.
    Average pooling computes ``fl(fl(S) * fl(1/K))`` for the window sum ``S`` of ``K = kh * kw`` terms: the
    sum, in any order, is within ``gamma_{K-1} * sum |x_i|`` of ``S`` (Higham, Eq. 3.5 less the products'
    roundings), and the rounded reciprocal and the multiply add two relative roundings, so the result is
    within ``gamma_{K+1} * mean |x_i|`` of ``S / K``: :func:`dot_tolerance` of ``K`` terms with two epilogue
    roundings bounds it. A wrong kernel (a term missing or extra, another divisor, a shifted window) errs by
    about ``|x_i| / K``, orders of magnitude above that bound (tested).
    """

    op = "pool2d"

    def _geometry(self, task: Task) -> dict[str, Any]:
        n, ho, wo, c, kh, kw = extents(task, "n", "h", "w", "c", "rh", "rw")
        h, w = task.param("in_hw")  # type: ignore[misc]
        return dict(n=n, h=h, w=w, c=c, ho=ho, wo=wo, kh=kh, kw=kw, stride=task.param("stride"),
                    padding=task.param("padding"), nhwc=task.param("layout") == "NHWC", avg=task.param("kind") == "avg")

    def blocks_to_inline(self, task: Task) -> tuple[str, ...]:
        return ("pad",) if any(task.param("padding")) else ()  # type: ignore[arg-type]

    def epilogues(self, task: Task) -> tuple[str, ...]:
        return ("O",) if task.param("kind") == "avg" else ()

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te, tirx

        g = self._geometry(task)
        (sh, sw), (ph, pw) = g["stride"], g["padding"]
        inp = te.placeholder(self.input_shapes(task)[0], name="I", dtype=task.dtype)
        fill = te.const(0.0, task.dtype) if g["avg"] else tirx.min_value(task.dtype)
        if ph or pw:
            def pad_value(*idx: Any) -> Any:
                nn, c, y, x = (idx[0], idx[3], idx[1], idx[2]) if g["nhwc"] else idx
                inside = tirx.all(y >= ph, y < g["h"] + ph, x >= pw, x < g["w"] + pw)
                src = (nn, y - ph, x - pw, c) if g["nhwc"] else (nn, c, y - ph, x - pw)
                return tirx.if_then_else(inside, inp[src], fill)

            hp, wp = g["h"] + 2 * ph, g["w"] + 2 * pw
            padded = te.compute((g["n"], hp, wp, g["c"]) if g["nhwc"] else (g["n"], g["c"], hp, wp), pad_value, name="pad")
        else:
            padded = inp
        rh = te.reduce_axis((0, g["kh"]), name="rh")
        rw = te.reduce_axis((0, g["kw"]), name="rw")
        reduce = te.sum if g["avg"] else te.max
        if g["nhwc"]:
            def body(nn: Any, y: Any, x: Any, c: Any) -> Any:
                return reduce(padded[nn, y * sh + rh, x * sw + rw, c], axis=[rh, rw])
        else:
            def body(nn: Any, c: Any, y: Any, x: Any) -> Any:
                return reduce(padded[nn, c, y * sh + rh, x * sw + rw], axis=[rh, rw])

        pooled = te.compute(self.output_shape(task), body, name="C")
        if not g["avg"]:
            return [inp, pooled]
        scale = te.const(1.0 / (g["kh"] * g["kw"]), task.dtype)
        return [inp, te.compute(pooled.shape, lambda *idx: pooled(*idx) * scale, name="O")]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        g = self._geometry(task)
        return [(g["n"], g["h"], g["w"], g["c"]) if g["nhwc"] else (g["n"], g["c"], g["h"], g["w"])]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        g = self._geometry(task)
        return (g["n"], g["ho"], g["wo"], g["c"]) if g["nhwc"] else (g["n"], g["c"], g["ho"], g["wo"])

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        """NumPy pooling: a strided window view of the padded input (``-inf`` or zeros), its max or mean."""
        g = self._geometry(task)
        (inp,) = inputs
        if not g["nhwc"]:  # compute in NHWC, return NCHW
            inp = inp.transpose(0, 2, 3, 1)
        (sh, sw), (ph, pw) = g["stride"], g["padding"]
        padded = np.pad(inp, ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=0.0 if g["avg"] else -np.inf)
        s = padded.strides
        view = np.lib.stride_tricks.as_strided(
            padded, shape=(g["n"], g["ho"], g["wo"], g["kh"], g["kw"], g["c"]),
            strides=(s[0], s[1] * sh, s[2] * sw, s[1], s[2], s[3]), writeable=False,
        )
        out = view.sum(axis=(3, 4)) / (g["kh"] * g["kw"]) if g["avg"] else view.max(axis=(3, 4))
        return out if g["nhwc"] else out.transpose(0, 3, 1, 2)

    def tolerance(self, task: Task, wide_inputs: list[np.ndarray]) -> np.ndarray:
        if task.param("kind") == "max":
            return np.zeros(self.output_shape(task))
        return dot_tolerance(self.reduction_length(task), task.dtype, self.compute(task, [np.abs(wide_inputs[0])]),
                             epilogue_ops=2)

    def formula(self, task: Task) -> str:
        g = self._geometry(task)
        what = "max over" if task.param("kind") == "max" else "mean (sum / kh*kw, zero padding counted) over"
        return (f"{what} {g['kh']}x{g['kw']} windows of I, {task.param('layout')}, stride {g['stride']}, "
                f"padding {g['padding']}")


def torch_kernel(task: Task, inputs: Sequence[Any]) -> Any:
    """``F.max_pool2d`` / ``F.avg_pool2d``; an NHWC input is given in the ``channels_last`` memory format."""
    import torch.nn.functional as F

    (inp,) = inputs
    if task.param("layout") == "NHWC":  # NHWC data is NCHW in channels_last memory format
        inp = inp.permute(0, 3, 1, 2)
    kernel = (task.dim("rh").extent, task.dim("rw").extent)
    args = dict(kernel_size=kernel, stride=task.param("stride"), padding=task.param("padding"))
    if task.param("kind") == "max":
        return lambda: F.max_pool2d(inp, **args)
    return lambda: F.avg_pool2d(inp, **args, count_include_pad=True)


def cuda_axes(task: Task) -> tuple[CudaAxis, ...]:
    """As a convolution's: NHWC ``n·h·w`` on ``blockIdx.x`` and ``c`` on ``threadIdx.x``; NCHW ``n·c`` and ``h·w``."""
    if task.param("layout") == "NHWC":
        return (CudaAxis(("n", "h", "w"), "x", "y"), CudaAxis(("c",), "y", "x"))
    return (CudaAxis(("n", "c"), "y", "y"), CudaAxis(("h", "w"), "x", "x"))


def _pattern(name: str, kind: str, relax_op: str) -> dict[str, Any]:
    return {"name": name, "op_type": {"type": "pool2d", "kind": kind},
            "cell": [{"name": "main", "op": relax_op, "inputs": [ANY]}]}


#: what ``from_exported_program`` emits: ``MaxPool2d`` and ``AvgPool2d`` as the Relax pools,
#: ``AdaptiveAvgPool2d`` to a larger output than 1 x 1 as ``adaptive_avg_pool2d``, and to 1 x 1 (global average
#: pooling, as ``x.mean((2, 3))``) as a ``mean`` over the spatial axes
PATTERNS = (
    _pattern("pool2d-max", "max", "nn.max_pool2d"),
    _pattern("pool2d-avg", "avg", "nn.avg_pool2d"),
    _pattern("pool2d-adaptive-avg", "avg", "nn.adaptive_avg_pool2d"),
    _pattern("pool2d-global-mean", "avg", "mean"),
)


def implement(params: Mapping[str, Any], matches: Mapping[str, Any]) -> tuple[Task, tuple[Any, ...]]:
    """A matched pool (or spatial mean) of a 4-D NHWC or NCHW tensor with PyTorch's default semantics."""
    call = matches["main"]
    (data,) = call.args[:1]
    check_float32(data)
    shape = shape_of(data)
    if len(shape) != 4:
        raise Refusal(f"a pool of a rank-{len(shape)} tensor: pool2d takes 4-D NHWC or NCHW")
    attrs, kind = call.attrs, params["kind"]
    if call.op.name == "relax.mean":
        axes = sorted(int(a) % 4 for a in attrs.axis) if attrs.axis is not None else [0, 1, 2, 3]
        layouts = {(1, 2): "NHWC", (2, 3): "NCHW"}
        if tuple(axes) not in layouts:
            raise Refusal(f"a mean over axes {axes} is not one over the spatial axes of NHWC (1, 2) or NCHW (2, 3)")
        layout = layouts[tuple(axes)]
    else:
        layout = str(attrs.layout)
        if layout not in POOL_LAYOUTS or str(attrs.out_layout) != layout:
            raise Refusal(f"layouts {layout}/{attrs.out_layout}: pool2d takes NHWC or NCHW")
    n, h, w, c = shape if layout == "NHWC" else (shape[0], shape[2], shape[3], shape[1])
    padding = (0, 0)
    if call.op.name == "relax.mean":
        kernel = stride = (h, w)
    elif call.op.name == "relax.nn.adaptive_avg_pool2d":
        out = (h, w) if attrs.output_size is None else tuple(int(s) for s in attrs.output_size)
        out = out * 2 if len(out) == 1 else out
        if h % out[0] or w % out[1]:
            raise Refusal(f"adaptive pooling of {h}x{w} to {out[0]}x{out[1]}: windows of unequal sizes")
        kernel = stride = (h // out[0], w // out[1])
    else:
        kernel, stride = tuple(int(k) for k in attrs.pool_size), tuple(int(s) for s in attrs.strides)
        pad = [int(p) for p in attrs.padding]
        if pad[0] != pad[2] or pad[1] != pad[3]:
            raise Refusal(f"asymmetric padding {pad}")
        padding = (pad[0], pad[1])
        if any(int(d) != 1 for d in attrs.dilation):
            raise Refusal(f"dilation {[int(d) for d in attrs.dilation]}: pool2d windows are dense")
        if bool(attrs.ceil_mode):
            raise Refusal("ceil_mode: pool2d rounds its output size down, as PyTorch does by default")
        if kind == "avg" and any(padding) and not bool(attrs.count_include_pad):
            raise Refusal("average pooling with count_include_pad=False: pool2d divides by the kernel's size")
    return pool2d(n, h, w, c, kernel, stride, padding, kind, layout), (data,)


POOL2D = Operator(
    name="pool2d",
    build=pool2d,
    parse_name=parse_name,
    workload=Pool2dWorkload(),
    templates={"llvm": "pool2d-cpu", "cuda": "pool2d-cuda"},
    ops_per_point=OPS_PER_POINT,
    cuda_axes=cuda_axes,
    torch_kernel=torch_kernel,
    patterns=PATTERNS,
    implement=implement,
    # ResNet's 3x3 stride-2 max pool after its stem
    env_id="schedule_gym/Pool2d-v0",
    env_kwargs={"n": 1, "h": 112, "w": 112, "c": 64, "kernel": 3, "stride": 2, "padding": 1, "kind": "max"},
)
