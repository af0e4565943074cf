"""The operators: builders of :class:`~schedule_gym.tasks.Task` descriptions (pure data, no TVM).

Every builder checks its arguments and names the bad value. Default split counts follow TVM
MetaSchedule's CPU multi-level tiling structure "SSRSRS": every spatial dimension split into 4 loops,
every reduction dimension into 2, ordered ``S0 S1 R0 S2 R1 S3`` (which is exactly what
:func:`~schedule_gym.tasks.task.default_loop_order` builds from 4/2 splits). For GEMM this is Zhang et
al.'s 4/2/4 (their Section 5); for conv2d it contains the register tile of TVM's former x86 schedule
(``ow`` unrolled by ``reg_n`` times ``oc`` vectorised by ``oc_bn``, kernel loops unsplit) as the configs
whose outer factors are 1.

Dimension order matters: the last spatial dimension is the innermost loop (vectorised by the CPU
template), so each operator lists the dimension that is contiguous in its output last:
``co`` for NHWC, ``w`` for NCHW, ``n`` for (batch) matmul.
"""

from __future__ import annotations

from collections.abc import Sequence

from schedule_gym.tasks.task import LoopDim, Operand, Task, Term, check_positive_int

__all__ = ["ACTIVATIONS", "CONV_LAYOUTS", "batch_matmul", "conv2d", "conv2d_output_hw", "dense", "gemm"]

#: Epilogue activations of dense and conv2d: none, ReLU, ReLU6 (MobileNet-V2's ``clip(x, 0, 6)``), GELU (the
#: exact erf form, as BERT's ``nn.GELU()``; the tanh form of ``approximate="tanh"`` is not used).
ACTIVATIONS = ("none", "relu", "relu6", "gelu")
CONV_LAYOUTS = ("NHWC", "NCHW")
SPATIAL_SPLITS = 4
REDUCTION_SPLITS = 2


def _splits(value: object, what: str) -> int:
    return check_positive_int(value, f"split count {what}")


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

    The defaults (4, 2, 4) are the paper's (Zhang et al., Section 5).

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
    for what, flag in (("transpose_a", transpose_a), ("transpose_b", transpose_b)):
        if not isinstance(flag, bool):
            raise TypeError(f"{what} must be a bool, got {flag!r}")
    s = _split_tuple(splits, 4, "batch_matmul splits (b, m, k, n)")
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
    :data:`ACTIVATIONS`. ``splits`` gives the loops of ``m, k, n``.
    """
    _check_epilogue(bias, activation)
    s = _split_tuple(splits, 3, "dense splits (m, k, n)")
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
        name=name or f"dense-{m}x{k}x{n}{_epilogue_suffix(bias, activation)}", op="dense", dims=dims, operands=tuple(operands), dtype=dtype,
        params=(("bias", bias), ("activation", activation)),
    )


def _pair(value: object, what: str, minimum: int) -> tuple[int, int]:
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {value!r}")
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            kind = "positive" if minimum > 0 else "non-negative"
            raise ValueError(f"{what} must be {kind} integers, got {value!r}")
        out.append(int(v))
    return out[0], out[1]


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
    ``bias`` adds an operand ``bias[co]`` and ``activation`` (one of :data:`ACTIVATIONS`) follows it: the
    epilogue of a convolution with batch norm folded in, as a model's graph has it (named ``+bias+relu``).

    >>> t = conv2d(1, 56, 56, 64, 64, 3, padding=1)
    >>> t.describe()
    'conv2d-1x56x56x64-64-k3-s1-p1 (conv2d{dilation=1x1,groups=1,in_hw=56x56,layout=NHWC,padding=1x1,stride=1x1} n=1 h=56 w=56 co=64 rh=3 rw=3 rc=64, splits 4/4/4/4/2/2/2, float32)'
    >>> t.operands[0].describe()
    'I[n, h + rh, w + rw, rc]'
    """
    n, h, w, ci, co = (check_positive_int(v, x) for v, x in ((n, "n"), (h, "h"), (w, "w"), (ci, "ci"), (co, "co")))
    kh, kw = _pair(kernel, "kernel", 1)
    sh, sw = _pair(stride, "stride", 1)
    ph, pw = _pair(padding, "padding", 0)
    dh, dw = _pair(dilation, "dilation", 1)
    groups = check_positive_int(groups, "groups")
    _check_epilogue(bias, activation)
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
    extents = {"n": n, "h": ho, "w": wo, "co": co, "rh": kh, "rw": kw, "rc": cpg_in}
    names = spatial + reduce_ if layout == "NHWC" else ("n", "co", "h", "w", "rc", "rh", "rw")
    default = tuple(REDUCTION_SPLITS if x in reduce_ else SPATIAL_SPLITS for x in names)
    s = _split_tuple(default if splits is None else splits, 7, f"conv2d splits ({' '.join(names)})")
    dims = tuple(LoopDim(x, extents[x], sx, reduction=x in reduce_) for x, sx in zip(names, s))
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
    operands = (inp, weight, Operand.of_dims("bias", ("co",)), out) if bias else (inp, weight, out)
    label = f"conv2d-{n}x{h}x{w}x{ci}-{co}-k{kh if kh == kw else f'{kh}x{kw}'}-s{sh if sh == sw else f'{sh}x{sw}'}"
    label += f"-p{ph if ph == pw else f'{ph}x{pw}'}"
    if (dh, dw) != (1, 1):
        label += f"-d{dh if dh == dw else f'{dh}x{dw}'}"
    if groups > 1:
        label += f"-g{groups}"
    if layout != "NHWC":
        label += f"-{layout.lower()}"
    label += _epilogue_suffix(bias, activation)
    params = (
        ("layout", layout), ("in_hw", (h, w)), ("stride", (sh, sw)), ("padding", (ph, pw)),
        ("dilation", (dh, dw)), ("groups", groups),
    )
    # only a convolution with an epilogue names it, so the keys (and records) of plain ones stay as they were
    params += (("bias", bias),) if bias else ()
    params += (("activation", activation),) if activation != "none" else ()
    return Task(name=name or label, op="conv2d", dims=dims, operands=operands, dtype=dtype, params=params)


def _check_epilogue(bias: object, activation: object) -> None:
    if not isinstance(bias, bool):
        raise TypeError(f"bias must be a bool, got {bias!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def _epilogue_suffix(bias: bool, activation: str) -> str:
    return ("+bias" if bias else "") + ("" if activation == "none" else f"+{activation}")


def _split_tuple(splits: object, count: int, what: str) -> tuple[int, ...]:
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence) or len(splits) != count:
        raise ValueError(f"{what} must be {count} positive integers, got {splits!r}")
    return tuple(_splits(v, f"{i} of {what}") for i, v in enumerate(splits))
