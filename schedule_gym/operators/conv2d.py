"""2-D convolution (NHWC/NCHW, stride, padding, dilation, groups, a bias and activation epilogue): builder, name,
workload, packed form, references, CUDA axes, model mapping (``nn.conv2d``), environment.

Default splits follow MetaSchedule's CPU structure "SSRSRS" (4 loops per spatial dimension, 2 per reduction);
they contain the register tile of TVM's former x86 schedule (``ow`` unrolled by ``reg_n`` times ``oc``
vectorised by ``oc_bn``, kernel loops unsplit) as the configs whose outer factors are 1. The last spatial
dimension is the innermost loop (vectorised by the CPU template): ``co`` for NHWC, ``w`` for NCHW.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedule_gym.operators.base import (
    PAIR_PATTERN, REDUCTION_SPLITS, SPATIAL_SPLITS, CudaAxis, Operator, PackedForm, pair, pair_of_text, pair_text,
    split_tuple,
)
from schedule_gym.operators.epilogue import ACTIVATION_PATTERN, Epilogue, check_epilogue, epilogue_suffix
from schedule_gym.operators.graph import (
    ANY, Refusal, activation_of, bias_operand, bias_vector, check_float32, epilogue_patterns, residual_operand,
    shape_of,
)
from schedule_gym.operators.matmul import extents
from schedule_gym.operators.workload import Workload
from schedule_gym.tasks.task import LoopDim, Operand, Task, Term, check_positive_int

__all__ = ["CONV2D", "CONV_LAYOUTS", "Conv2dWorkload", "conv2d", "conv2d_output_hw", "is_depthwise"]

CONV_LAYOUTS = ("NHWC", "NCHW")


def conv2d_output_hw(
    h: int, w: int, kh: int, kw: int, stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int]
) -> tuple[int, int]:
    """Output height and width of a convolution (PyTorch's formula); may be < 1 for impossible geometry."""
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return ho, wo


def conv2d(
    n: int,
    h: int,
    w: int,
    ci: int,
    co: int,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    layout: str = "NHWC",
    splits: Sequence[int] | None = None,
    dtype: str = "float32",
    name: str | None = None,
    bias: bool = False,
    activation: str = "none",
    residual: bool = False,
) -> Task:
    """2-D convolution of an ``n x h x w x ci`` input with ``co`` filters of ``kernel`` (PyTorch semantics).

    ``groups`` splits the channels: ``groups == ci == co`` is a depthwise convolution, any divisor of
    both a grouped one. Loop dimensions: ``n, h, w, co`` (output, spatial) and ``rh, rw, rc`` (kernel
    window and input channels per group, reductions); ``h, w`` are output sizes. Layouts:

    * ``"NHWC"``: input ``I[n, h, w, c]``, weight ``W[kh, kw, ci/groups, co]`` (HWIO), output
      ``O[n, h, w, co]``; dimensions ordered ``n h w co | rh rw rc`` (``co`` innermost);
    * ``"NCHW"``: input ``I[n, c, h, w]``, weight ``W[co, ci/groups, kh, kw]`` (OIHW, PyTorch's),
      output ``O[n, co, h, w]``; dimensions ordered ``n co h w | rc rh rw`` (``w`` innermost).

    The input is read at ``h*stride + rh*dilation - padding``; the padded border is zero. ``splits``
    gives the loops of each dimension in the layout's order (default 4 per spatial, 2 per reduction).
    ``bias`` adds an operand ``bias[co]`` and ``activation`` (one of
    :data:`~schedule_gym.operators.epilogue.ACTIVATIONS`) follows it: the epilogue of a convolution with
    batch norm folded in, as a model's graph has it (named ``+bias+relu``); ``residual`` adds an operand ``R`` of
    the output's shape before the activation, a residual block's identity branch (named ``+bias+res+relu``).

    >>> t = conv2d(1, 56, 56, 64, 64, 3, padding=1)
    >>> t.describe()
    'conv2d-1x56x56x64-64-k3-s1-p1 (conv2d{dilation=1x1,groups=1,in_hw=56x56,layout=NHWC,padding=1x1,stride=1x1} n=1 h=56 w=56 co=64 rh=3 rw=3 rc=64, splits 4/4/4/4/2/2/2, float32)'
    >>> t.operands[0].describe()
    'I[n, h + rh, w + rw, rc]'
    """
    n, h, w, ci, co = (check_positive_int(v, x) for v, x in ((n, "n"), (h, "h"), (w, "w"), (ci, "ci"), (co, "co")))
    kh, kw = pair(kernel, "kernel", 1)
    sh, sw = pair(stride, "stride", 1)
    ph, pw = pair(padding, "padding", 0)
    dh, dw = pair(dilation, "dilation", 1)
    groups = check_positive_int(groups, "groups")
    check_epilogue(bias, activation, residual)
    if layout not in CONV_LAYOUTS:
        raise ValueError(f"layout must be one of {CONV_LAYOUTS}, got {layout!r}")
    if ci % groups or co % groups:
        raise ValueError(f"groups={groups} must divide both input channels ci={ci} and output channels co={co}")
    ho, wo = conv2d_output_hw(h, w, kh, kw, (sh, sw), (ph, pw), (dh, dw))
    if ho < 1 or wo < 1:
        raise ValueError(
            f"the {kh}x{kw} kernel (dilation {dh}x{dw}) is larger than the {h}x{w} input padded by {ph}x{pw}: "
            f"the output would be {ho}x{wo}"
        )
    cpg_in, cpg_out = ci // groups, co // groups
    spatial, reduce_ = ("n", "h", "w", "co"), ("rh", "rw", "rc")
    sizes = {"n": n, "h": ho, "w": wo, "co": co, "rh": kh, "rw": kw, "rc": cpg_in}
    names = spatial + reduce_ if layout == "NHWC" else ("n", "co", "h", "w", "rc", "rh", "rw")
    default = tuple(REDUCTION_SPLITS if x in reduce_ else SPATIAL_SPLITS for x in names)
    s = split_tuple(default if splits is None else splits, 7, f"conv2d splits ({' '.join(names)})")
    dims = tuple(LoopDim(x, sizes[x], sx, reduction=x in reduce_) for x, sx in zip(names, s))
    # the input channel read by output channel co: its group's first channel plus rc
    channel = (Term("co", cpg_in, cpg_out), Term("rc")) if groups > 1 else (Term("rc"),)
    row = (Term("h", sh), Term("rh", dh))
    col = (Term("w", sw), Term("rw", dw))
    if layout == "NHWC":
        inp = Operand("I", ((Term("n"),), row, col, channel))
        weight = Operand.of_dims("W", ("rh", "rw", "rc", "co"))
        out = Operand.of_dims("O", ("n", "h", "w", "co"), output=True)
    else:
        inp = Operand("I", ((Term("n"),), channel, row, col))
        weight = Operand.of_dims("W", ("co", "rc", "rh", "rw"))
        out = Operand.of_dims("O", ("n", "co", "h", "w"), output=True)
    extras = (Operand.of_dims("bias", ("co",)),) if bias else ()
    extras += (Operand.of_dims("R", out.dims),) if residual else ()
    operands = (inp, weight, *extras, out)
    label = f"conv2d-{n}x{h}x{w}x{ci}-{co}-k{pair_text((kh, kw))}-s{pair_text((sh, sw))}-p{pair_text((ph, pw))}"
    if (dh, dw) != (1, 1):
        label += f"-d{pair_text((dh, dw))}"
    if groups > 1:
        label += f"-g{groups}"
    if layout != "NHWC":
        label += f"-{layout.lower()}"
    label += epilogue_suffix(bias, activation, residual)
    params = (
        ("layout", layout), ("in_hw", (h, w)), ("stride", (sh, sw)), ("padding", (ph, pw)),
        ("dilation", (dh, dw)), ("groups", groups),
    )
    # only a convolution with an epilogue names it, so the keys (and records) of plain ones stay as they were
    params += (("bias", bias),) if bias else ()
    params += (("residual", residual),) if residual else ()
    params += (("activation", activation),) if activation != "none" else ()
    return Task(name=name or label, op="conv2d", dims=dims, operands=operands, dtype=dtype, params=params)


_NAME = re.compile(
    rf"^conv2d-(\d+)x(\d+)x(\d+)x(\d+)-(\d+)-k{PAIR_PATTERN}-s{PAIR_PATTERN}-p{PAIR_PATTERN}(?:-d{PAIR_PATTERN})?"
    rf"(?:-g(\d+))?(-nchw)?(\+bias)?(\+res)?(?:\+({ACTIVATION_PATTERN}))?$"
)


def parse_name(name: str) -> dict[str, Any] | None:
    """``conv2d-1x56x56x64-64-k3-s1-p1`` (and its ``-dD -gG -nchw +bias +res +act`` parts) -> the builder's
    arguments."""
    match = _NAME.match(name)
    if match is None:
        return None
    n, h, w, ci, co, k, st, p, d, g, nchw, bias, res, act = match.groups()
    return {"n": int(n), "h": int(h), "w": int(w), "ci": int(ci), "co": int(co), "kernel": pair_of_text(k, 1),
            "stride": pair_of_text(st, 1), "padding": pair_of_text(p, 0), "dilation": pair_of_text(d, 1),
            "groups": int(g or 1), "layout": "NCHW" if nchw else "NHWC", "bias": bias is not None,
            "residual": res is not None, "activation": act or "none"}


class Conv2dWorkload(Epilogue, Workload):
    """2-D convolution (see :func:`conv2d`): padding is a ``pad`` stage the templates inline into the
    convolution's loads; a bias, residual and activation are a write-back block ``O``."""

    op = "conv2d"
    out_name = "O"

    def bias_axis(self, task: Task) -> int:
        return 3 if task.param("layout") == "NHWC" else 1

    def _geometry(self, task: Task) -> dict[str, Any]:
        n, ho, wo, co, kh, kw, cpg_in = extents(task, "n", "h", "w", "co", "rh", "rw", "rc")
        groups = int(task.param("groups"))  # type: ignore[arg-type]
        h, w = task.param("in_hw")  # type: ignore[misc]
        return dict(
            n=n, h=h, w=w, ci=cpg_in * groups, co=co, ho=ho, wo=wo, kh=kh, kw=kw, groups=groups,
            cpg_in=cpg_in, cpg_out=co // groups, stride=task.param("stride"), padding=task.param("padding"),
            dilation=task.param("dilation"), nhwc=task.param("layout") == "NHWC",
        )

    def blocks_to_inline(self, task: Task) -> tuple[str, ...]:
        return ("pad",) if any(task.param("padding")) else ()  # type: ignore[arg-type]

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te, tirx

        g = self._geometry(task)
        (sh, sw), (ph, pw), (dh, dw) = g["stride"], g["padding"], g["dilation"]
        shape_i, shape_w = self.input_shapes(task)[:2]
        inp = te.placeholder(shape_i, name="I", dtype=task.dtype)
        wgt = te.placeholder(shape_w, name="W", dtype=task.dtype)
        zero = te.const(0.0, task.dtype)
        hp, wp = g["h"] + 2 * ph, g["w"] + 2 * pw
        if ph or pw:
            def pad_value(*idx: Any) -> Any:
                nn, c, y, x = (idx[0], idx[3], idx[1], idx[2]) if g["nhwc"] else idx
                inside = tirx.all(y >= ph, y < g["h"] + ph, x >= pw, x < g["w"] + pw)
                src = (nn, y - ph, x - pw, c) if g["nhwc"] else (nn, c, y - ph, x - pw)
                return tirx.if_then_else(inside, inp[src], zero)

            padded_shape = (g["n"], hp, wp, g["ci"]) if g["nhwc"] else (g["n"], g["ci"], hp, wp)
            padded = te.compute(padded_shape, pad_value, name="pad")
        else:
            padded = inp
        # reduction axes in task order: NHWC (rh, rw, rc), NCHW (rc, rh, rw)
        rh = te.reduce_axis((0, g["kh"]), name="rh")
        rw = te.reduce_axis((0, g["kw"]), name="rw")
        rc = te.reduce_axis((0, g["cpg_in"]), name="rc")
        axes = [rh, rw, rc] if g["nhwc"] else [rc, rh, rw]
        cpg_in, cpg_out = g["cpg_in"], g["cpg_out"]

        def channel(co: Any) -> Any:
            return rc if g["groups"] == 1 else (co // cpg_out) * cpg_in + rc

        if g["nhwc"]:
            def body(nn: Any, y: Any, x: Any, co: Any) -> Any:
                return te.sum(padded[nn, y * sh + rh * dh, x * sw + rw * dw, channel(co)] * wgt[rh, rw, rc, co], axis=axes)
        else:
            def body(nn: Any, co: Any, y: Any, x: Any) -> Any:
                return te.sum(padded[nn, channel(co), y * sh + rh * dh, x * sw + rw * dw] * wgt[co, rc, rh, rw], axis=axes)

        conv = te.compute(self.output_shape(task), body, name="C")
        extras, out = self.epilogue_te(task, conv, g["co"])
        return [inp, wgt, *extras, out]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        g = self._geometry(task)
        extras = [(g["co"],)] if task.param("bias", False) else []
        extras += [self.output_shape(task)] if task.param("residual", False) else []
        if g["nhwc"]:
            return [(g["n"], g["h"], g["w"], g["ci"]), (g["kh"], g["kw"], g["cpg_in"], g["co"]), *extras]
        return [(g["n"], g["ci"], g["h"], g["w"]), (g["co"], g["cpg_in"], g["kh"], g["kw"]), *extras]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        g = self._geometry(task)
        return (g["n"], g["ho"], g["wo"], g["co"]) if g["nhwc"] else (g["n"], g["co"], g["ho"], g["wo"])

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self.activate(task, self._biased(task, inputs))

    def before_activation(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self._biased(task, inputs)

    def magnitude(self, task: Task, abs_inputs: list[np.ndarray]) -> np.ndarray:
        return self.activation_slope(task) * self._biased(task, abs_inputs)

    def _biased(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self.add_epilogue_inputs(task, self._convolve(task, inputs[:2]), inputs[2:])

    def _convolve(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        """NumPy convolution: a strided window view of the padded input, contracted per group."""
        g = self._geometry(task)
        inp, wgt = inputs
        if not g["nhwc"]:  # compute in NHWC / HWIO, return NCHW
            inp, wgt = inp.transpose(0, 2, 3, 1), wgt.transpose(2, 3, 1, 0)
        (sh, sw), (ph, pw), (dh, dw) = g["stride"], g["padding"], g["dilation"]
        padded = np.pad(inp, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        n, _, _, ci = padded.shape
        s = padded.strides
        view = np.lib.stride_tricks.as_strided(
            padded,
            shape=(n, g["ho"], g["wo"], g["kh"], g["kw"], ci),
            strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
            writeable=False,
        )
        groups, cpg_in, cpg_out = g["groups"], g["cpg_in"], g["cpg_out"]
        view = view.reshape(n, g["ho"], g["wo"], g["kh"], g["kw"], groups, cpg_in)
        wgt = wgt.reshape(g["kh"], g["kw"], cpg_in, groups, cpg_out)
        out = np.einsum("nyxhwgc,hwcgo->nyxgo", view, wgt, optimize=True).reshape(n, g["ho"], g["wo"], g["co"])
        return out if g["nhwc"] else out.transpose(0, 3, 1, 2)

    def formula(self, task: Task) -> str:
        g = self._geometry(task)
        return self.epilogue_formula(task, "conv2d(I, W)") + (f" {task.param('layout')}, stride {g['stride']}, padding {g['padding']}, "
                f"dilation {g['dilation']}, groups {g['groups']}")


#: The fewest output channels a group may have for the packed form: a micro-tile's columns keep to one group
#: (they read that group's input channels), so fewer leave less than half a vector of FP32 lanes per FMA. A depthwise
#: convolution (one input and one output channel a group) is the exception: its output channel ``co`` reads input
#: channel ``co``, so a micro-tile's columns load adjacent input channels as one vector (:func:`is_depthwise`).
MIN_PACKED_GROUP_CHANNELS = 4


def is_depthwise(task: Task) -> bool:
    """Whether ``task`` is a depthwise convolution: as many groups as input and output channels (a channel
    multiplier of 1), so output channel ``co`` reads input channel ``co`` alone."""
    groups = int(task.param("groups"))  # type: ignore[arg-type]
    return groups > 1 and task.extent_of["co"] == groups and task.extent_of["rc"] == 1


def _refuse_packed(task: Task) -> None:
    groups = int(task.param("groups"))  # type: ignore[arg-type]
    group_channels = task.extent_of["co"] // groups
    few = groups > 1 and group_channels < MIN_PACKED_GROUP_CHANNELS and not is_depthwise(task)
    if task.param("layout") != "NHWC" or few:
        raise ValueError(
            f"the packed conv2d form (templates conv2d-cpu-v5, -v3, -v2) builds NHWC convolutions whose groups have at "
            f"least {MIN_PACKED_GROUP_CHANNELS} output channels, or depthwise ones (v5); {task.name!r} has layout "
            f"{task.param('layout')} and {group_channels} output channel(s) and {task.extent_of['rc']} input "
            f"channel(s) in each of {groups} group(s) (tune it with conv2d-cpu)"
        )


#: The packed form ``conv2d-cpu-v5`` (and ``-v3``, ``-v2``) builds (an implicit GEMM: output pixels ``w`` inside ``h`` are
#: its rows, ``co`` its columns, ``rh rw rc`` its reduction): the block loops, the input-channel blocks, the
#: micro-tiles, the micro-kernel's window and channel steps, its register tile ``w2 x co2``.
PACKED = PackedForm(
    "conv2d-cpu-v5",
    {"n": 1, "h": 2, "w": 3, "co": 3, "rh": 1, "rw": 1, "rc": 2},
    (("n", 0), ("h", 0), ("w", 0), ("co", 0),
     ("rc", 0), ("co", 1), ("h", 1), ("w", 1), ("rh", 0), ("rw", 0), ("rc", 1), ("w", 2), ("co", 2)),
    _refuse_packed,
)


def torch_kernel(task: Task, inputs: Sequence[Any]) -> Any:
    """``F.conv2d``; an NHWC task's tensors are given in the ``channels_last`` memory format, its native layout."""
    import torch
    import torch.nn.functional as F

    inp, wgt = inputs[:2]
    kwargs = dict(stride=task.param("stride"), padding=task.param("padding"), dilation=task.param("dilation"),
                  groups=task.param("groups"))
    if task.param("layout") == "NHWC":  # NHWC data is NCHW in channels_last memory format
        inp = inp.permute(0, 3, 1, 2)
        wgt = wgt.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    return lambda: F.conv2d(inp, wgt, **kwargs)


def cuda_axes(task: Task) -> tuple[CudaAxis, ...]:
    """NHWC: the fused ``n·h·w`` on ``blockIdx.x`` (the one grid axis allowing more than 65,535 blocks) and
    ``co`` on ``threadIdx.x`` (coalesced stores); NCHW: ``n·co`` and ``h·w``."""
    if task.param("layout") == "NHWC":
        return (CudaAxis(("n", "h", "w"), "x", "y"), CudaAxis(("co",), "y", "x"))
    return (CudaAxis(("n", "co"), "y", "y"), CudaAxis(("h", "w"), "x", "x"))


def implement(params: Mapping[str, Any], matches: Mapping[str, Any]) -> tuple[Task, tuple[Any, ...]]:
    """A matched ``nn.conv2d`` (its weight a constant or computed) in NCHW/OIHW or NHWC/HWIO with symmetric
    padding."""
    call = matches["main"]
    data, weight = call.args
    attrs = call.attrs
    check_float32(data, weight)
    layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    if (layout, kernel_layout) not in (("NCHW", "OIHW"), ("NHWC", "HWIO")) or str(attrs.out_layout) != layout:
        raise Refusal(f"layouts {layout}/{kernel_layout}/{attrs.out_layout}: the conv2d task takes NCHW/OIHW or NHWC/HWIO")
    n, *rest = shape_of(data)
    if layout == "NCHW":
        ci, h, w = rest
        co, _, kh, kw = shape_of(weight)
    else:
        h, w, ci = rest
        kh, kw, _, co = shape_of(weight)
    pad = [int(p) for p in attrs.padding]
    if pad[0] != pad[2] or pad[1] != pad[3]:
        raise Refusal(f"asymmetric padding {pad}")
    bias, residual = bool(params.get("bias", False)), bool(params.get("residual", False))
    task = conv2d(n, h, w, ci, co, (kh, kw), tuple(int(s) for s in attrs.strides), (pad[0], pad[1]),
                  tuple(int(d) for d in attrs.dilation), int(attrs.groups), layout, bias=bias,
                  activation=activation_of(params, matches), residual=residual)
    args: tuple[Any, ...] = (data, weight)
    if bias:
        args += (bias_vector(bias_operand(matches), co, 1 if layout == "NCHW" else 3, 4),)
    if residual:
        args += (residual_operand(matches, CONV2D.workload.output_shape(task)),)
    return task, args


CONV2D = Operator(
    name="conv2d",
    build=conv2d,
    parse_name=parse_name,
    workload=Conv2dWorkload(),
    templates={"llvm": "conv2d-cpu", "cuda": "conv2d-cuda"},
    packed=PACKED,
    cuda_axes=cuda_axes,
    torch_kernel=torch_kernel,
    # any weight: a constant, or one the importer computed (a squeeze-and-excitation gate folded into it)
    patterns=tuple(epilogue_patterns("conv2d", {"op": "nn.conv2d", "inputs": [ANY, ANY]}, residual=True)),
    implement=implement,
    # ResNet-50's second convolution
    env_id="schedule_gym/Conv2d-v0",
    env_kwargs={"n": 1, "h": 56, "w": 56, "ci": 64, "co": 64, "kernel": 3, "padding": 1},
)
