"""Padding a model's odd-sized dense layers and batch matmuls, and flattening its pointwise convolutions on maps
of an odd width, so that the packed templates can choose their register tiles.

The tile spaces split each extent into divisors. An extent with no small divisor leaves the packed templates
(``dense-cpu-v8``, ``batch_matmul-cpu-v4``) only poor register tiles. ViT-B/16's 197 tokens (a prime) allow one
row per micro-kernel (``MR = 1``), and in its attention's ``Q K^T`` (12 x 197 x 64 x 197) one or 197 columns, no
whole vector. GPT-2's LM head, 50,257 wide (29 x 1,733), allows ``NR = 1`` or 29.

:func:`pad_odd_extents` gives each such task the task of padded extents, and rewrites each call of its kernel:

* the rows ``M`` go up to a multiple of 8, where ``M`` has none of the divisors 4, 6 and 8;
* the columns ``N`` go up to a multiple of 16 (of 64 from 1,024 up), where 8 does not divide ``N``;
* a batch matmul is padded only where its columns are: padding ViT-B/16's ``P V`` (12 x 197 x 197 x 64) by its
  rows alone made it slower, copies included, where padding ``Q K^T`` made it several times faster (measured in
  ``docs/results/models.md``);
* the operand holding the rows gets zero rows and the one holding the columns zero columns (``nn.pad``, on the
  axis the operand stores them on: a batch matmul's operands may be stored transposed); a constant operand is
  padded once, when the module is built; the reduction ``K`` is not padded (a micro-kernel's depth may be any
  divisor);
* the result is taken back to ``[M, N]``: where only the rows were padded, its first ``M`` rows are the first
  ``M * N`` elements of the padded result, and a ``memory.view`` of them is taken (no copy: TVM's memory planner
  keeps the padded result alive while the view is read); where the columns were, a ``strided_slice`` copies them;
* a dense layer whose input is the padded result of another, its rows taken off and padded again (ViT-B/16's
  FFN-down after its FFN-up), reads that padded result itself: a row of a dense layer's result depends on the same
  row of its input alone, so what the padded rows hold stays in padded rows, which the view (or slice) after drops.

A pointwise convolution (1x1, stride 1, no padding, NHWC, one group) is a GEMM whose rows are the output pixels, but
the packed conv2d template takes its register tile's rows from one output row (``w2`` divides ``w``): a 7 x 7 map
allows ``MR = 7`` or 1, a 14 x 14 one 2, 7 or 14. Where ``w`` has none of the divisors 4, 6 and 8, the convolution
becomes one of ``1 x P`` pixels: its input (and residual) reshaped to one row of ``h * w`` pixels, padded to a
multiple of 8 where ``h * w`` has none of those divisors (49 -> 56, Inception-v3's 289 -> 296), the result's first
``h * w`` pixels taken (a view at batch 1, a slice above) and reshaped back. The weight, bias and activation are
unchanged.

The padded rows and columns cost their share of the work (197 -> 200 rows: 1.5%; 50,257 -> 50,304 columns:
0.09%; 49 -> 56 pixels: 14%) plus the copies of the operands (and of a result whose columns were padded, or a
flattened one above batch 1). The other tasks are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from schedule_gym.models.symbols import add_kernel, kernel_symbol
from schedule_gym.operators import get_workload
from schedule_gym.tasks import batch_matmul, conv2d, dense
from schedule_gym.tasks.task import Task

__all__ = ["PADDED_OPS", "flattened_pixels", "flattened_task", "pad_odd_extents", "padded_extents"]

#: rows: the register-tile heights that make a good micro-kernel, and the multiple to pad to otherwise
ROW_DIVISORS, ROW_MULTIPLE = (4, 6, 8), 8
#: columns: a vector of 8 lanes (AVX2) at least; the multiple to pad to, below and from 1,024 columns
COLUMN_DIVISOR, COLUMN_MULTIPLE, WIDE_COLUMN_MULTIPLE, WIDE = 8, 16, 64, 1024


def _round_up(extent: int, multiple: int) -> int:
    return -(-extent // multiple) * multiple


#: the most padding a pointwise convolution's pixels are given, a fraction of them (7 x 7 = 49 -> 56 is 1/7; a 3 x 3
#: map's 9 -> 16 would nearly double the work)
MAX_PIXEL_PADDING = 0.15

#: the operators whose extents :func:`padded_extents` pads (a pointwise convolution is flattened instead:
#: :func:`flattened_pixels`)
PADDED_OPS = ("dense", "batch_matmul")


def padded_extents(task: Task) -> tuple[int, int] | None:
    """``(M', N')``, the padded rows and columns of a dense or batch-matmul ``task``, or None where it needs no
    padding (or is of another operator)."""
    if task.op not in PADDED_OPS:
        return None
    m, n = task.extent_of["m"], task.extent_of["n"]
    rows = _padded_rows(m)
    multiple = WIDE_COLUMN_MULTIPLE if n >= WIDE else COLUMN_MULTIPLE
    columns = n if n < COLUMN_MULTIPLE or n % COLUMN_DIVISOR == 0 else _round_up(n, multiple)
    if task.op == "batch_matmul" and columns == n:  # rows alone: measured not to pay (module docstring)
        return None
    return None if (rows, columns) == (m, n) else (rows, columns)


def _padded_rows(rows: int) -> int:
    """``rows``, or the next multiple of ``ROW_MULTIPLE`` where it has none of the ``ROW_DIVISORS``."""
    return rows if rows < ROW_MULTIPLE or any(rows % d == 0 for d in ROW_DIVISORS) else _round_up(rows, ROW_MULTIPLE)


def flattened_pixels(task: Task) -> int | None:
    """``P``, the pixels of the one output row a pointwise convolution ``task`` becomes (``h * w``, padded), or None
    where it stays as it is (another operator or convolution, or an output width with a register tile's divisor)."""
    if task.op != "conv2d" or (task.extent_of["rh"], task.extent_of["rw"]) != (1, 1):
        return None
    form = (task.param("layout"), task.param("groups"), tuple(task.param("stride")),  # type: ignore[arg-type]
            tuple(task.param("padding")))  # type: ignore[arg-type]
    if form != ("NHWC", 1, (1, 1), (0, 0)):
        return None
    h, w = task.extent_of["h"], task.extent_of["w"]
    if any(w % d == 0 for d in ROW_DIVISORS):
        return None
    pixels = _padded_rows(h * w)
    if (h, pixels) == (1, w) or pixels > (1 + MAX_PIXEL_PADDING) * h * w:
        return None
    return pixels


def _padded_task(task: Task, rows: int, columns: int) -> Task:
    splits = tuple(d.splits for d in task.dims)
    if task.op == "batch_matmul":
        return batch_matmul(task.extent_of["b"], rows, task.extent_of["k"], columns,
                            transpose_a=bool(task.param("transpose_a", False)),
                            transpose_b=bool(task.param("transpose_b", False)), splits=splits, dtype=task.dtype)
    return dense(rows, task.extent_of["k"], columns, bias=bool(task.param("bias", False)),
                 activation=task.param("activation", "none"), splits=splits, dtype=task.dtype)


def _pad_widths(task: Task, rows: int, columns: int) -> list[list[int]]:
    """Per operand of ``task``'s kernel, the zeros (before, after per axis) that take it to ``rows`` x ``columns``:
    dense's ``X [M, K]``, ``W [K, N]`` and bias ``[N]``; a batch matmul's ``A [B, M, K]`` (``[B, K, M]``
    transposed) and ``B [B, K, N]`` (``[B, N, K]``)."""
    dm, dn = rows - task.extent_of["m"], columns - task.extent_of["n"]
    if task.op == "dense":
        return [[0, dm, 0, 0], [0, 0, 0, dn]] + ([[0, dn]] if task.param("bias", False) else [])
    a = [0, 0, 0, 0, 0, dm] if task.param("transpose_a", False) else [0, 0, 0, dm, 0, 0]
    b = [0, 0, 0, dn, 0, 0] if task.param("transpose_b", False) else [0, 0, 0, 0, 0, dn]
    return [a, b]


def _padded_operand(arg: Any, pad_width: list[int]) -> Any:
    """``arg`` with ``pad_width`` zeros (before, after per axis): folded into a constant, else a ``pad`` call."""
    import numpy as np
    import tvm
    from tvm import relax

    if not any(pad_width):
        return arg
    if isinstance(arg, tvm.ir.expr.Constant):
        data = arg.value.numpy()
        return relax.const(np.pad(data, list(zip(pad_width[::2], pad_width[1::2]))), str(data.dtype))
    return relax.op.nn.pad(arg, pad_width)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How the calls of one task's kernel are rewritten: the task of padded extents, the call's operands for it
    (``operands(args)``), and the padded result taken back to the original's shape (``result(call)``)."""

    task: Task
    operands: Callable[[Sequence[Any]], list[Any]]
    result: Callable[[Any], Any]


def _leading_part(padded: Any, shape: Sequence[int], kept: Sequence[int], views: bool) -> Any:
    """The first ``kept`` of each axis of ``padded`` (a row-major tensor of ``shape``): a ``memory.view`` where those
    elements are the tensor's first ones (every axis after the first cut kept whole, every axis before it of
    extent 1) and ``views``, else a ``strided_slice`` (a copy)."""
    from tvm import relax

    cut = [axis for axis, (extent, k) in enumerate(zip(shape, kept)) if k != extent]
    if not cut:
        return padded
    if views and len(cut) == 1 and all(shape[axis] == 1 for axis in range(cut[0])):
        return relax.op.memory.view(padded, relax.ShapeExpr(list(kept)))
    return relax.op.strided_slice(padded, axes=cut, begin=[0] * len(cut), end=[kept[axis] for axis in cut])


def _matmul_plan(task: Task, views: bool) -> _Plan | None:
    """A dense layer's or batch matmul's: operands padded, the result taken back to ``[M, N]``."""
    extents = padded_extents(task)
    if extents is None:
        return None
    rows, columns = extents
    widths = _pad_widths(task, rows, columns)
    m, n = task.extent_of["m"], task.extent_of["n"]
    lead = [task.extent_of["b"]] if task.op == "batch_matmul" else []
    return _Plan(_padded_task(task, rows, columns),
                 lambda args: [_padded_operand(arg, width) for arg, width in zip(args, widths)],
                 lambda call: _leading_part(call, [*lead, rows, columns], [*lead, m, n], views))


def flattened_task(task: Task) -> Task | None:
    """The convolution of ``1 x P`` pixels a pointwise convolution ``task`` becomes (:func:`flattened_pixels`; its
    epilogue and split counts kept), or None where it stays as it is."""
    pixels = flattened_pixels(task)
    if pixels is None:
        return None
    return conv2d(task.extent_of["n"], 1, pixels, task.extent_of["rc"], task.extent_of["co"], 1, splits=task.splits,
                  dtype=task.dtype, bias=bool(task.param("bias", False)),
                  activation=str(task.param("activation", "none")), residual=bool(task.param("residual", False)))


def _pointwise_plan(task: Task, views: bool) -> _Plan | None:
    """A pointwise convolution's: the input (and residual) as one padded row of pixels, the result back to
    ``[n, h, w, co]``."""
    from tvm import relax

    padded = flattened_task(task)
    if padded is None:
        return None
    n, h, w, co = (task.extent_of[d] for d in ("n", "h", "w", "co"))
    residual = bool(padded.param("residual", False))
    extra = padded.extent_of["w"] - h * w

    def row(arg: Any, channels: int) -> Any:  # [n, h, w, channels] -> [n, 1, pixels, channels]
        return _padded_operand(relax.op.reshape(arg, (n, 1, h * w, channels)), [0, 0, 0, 0, 0, extra, 0, 0])

    def operands(args: Sequence[Any]) -> list[Any]:
        data, *rest = args  # I, W, [bias], [R]: the weight and bias as they are
        data = row(data, task.extent_of["rc"])
        return [data, *rest[:-1], row(rest[-1], co)] if residual else [data, *rest]

    def result(call: Any) -> Any:
        part = _leading_part(call, [n, 1, h * w + extra, co], [n, 1, h * w, co], views)
        return relax.op.reshape(part, (n, h, w, co))

    return _Plan(padded, operands, result)


def pad_odd_extents(mapped: Any, views: bool = True) -> Any:
    """``mapped`` (a :class:`~schedule_gym.models.mapping.MappedModel`) with every dense or batch-matmul task that
    :func:`padded_extents` pads, and every pointwise convolution :func:`flattened_pixels` flattens, replaced by its
    padded task, and each call of its kernel rewritten to pad the operands and take the result back to its shape
    (module docstring). The other kernels, and the model's outputs, are unchanged. ``views=False`` takes every
    result back by a ``strided_slice`` copy, as before the views (for comparisons: ``padded_views.py``)."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_call_tir, rewrite_call

    plans = {t.function: _matmul_plan(t.task, views) or _pointwise_plan(t.task, views) for t in mapped.tasks}
    if not any(plans.values()):
        return mapped
    builder = relax.BlockBuilder(mapped.mod)
    func = mapped.mod["main"]
    tasks: dict[str, Any] = {}  # kernel symbol -> task (two layers may pad to one task)
    gvars = {gv.name_hint: gv for gv in mapped.mod.get_global_vars()}
    for model_task in mapped.tasks:
        plan = plans[model_task.function]
        if plan is None:
            tasks[model_task.function] = _merged(tasks.get(model_task.function), model_task)
            continue
        symbol = kernel_symbol(plan.task)
        if symbol not in gvars:  # two layers may pad to one task
            gvars[symbol] = add_kernel(builder, plan.task)[1]
        shape = get_workload(plan.task.op).output_shape(plan.task)

        def rewrite(expr: Any, _matched: Any, gvar: Any = gvars[symbol], plan: _Plan = plan,
                    shape: tuple = shape) -> Any:
            call = relax.call_tir(gvar, plan.operands(expr.args[1].fields), relax.TensorType(shape, plan.task.dtype))
            return plan.result(call)

        func = rewrite_call(is_call_tir(model_task.function), rewrite, func)
        tasks[symbol] = _merged(tasks.get(symbol), dataclasses.replace(model_task, task=plan.task, function=symbol))
    originals = {t.function for t in mapped.tasks}
    func = _padded_rows_reused(func, {s for s, t in tasks.items() if t.task.op == "dense" and s not in originals})
    module = builder.get()
    replaced = {t.function for t in mapped.tasks if plans[t.function]} - set(tasks)
    kept = {gv: f for gv, f in module.functions_items() if gv.name_hint not in replaced}
    module = tvm.IRModule(kept, attrs=module.attrs, global_infos=module.global_infos)
    module["main"] = func
    return dataclasses.replace(mapped, mod=relax.transform.Normalize()(module), tasks=list(tasks.values()))


def _ints(expr: Any) -> tuple[int, ...] | None:
    """The integers of a Relax tuple of ``PrimValue``s (or of an array of them), or None."""
    try:
        return tuple(int(getattr(v, "value", v)) for v in getattr(expr, "fields", expr))
    except (TypeError, ValueError):
        return None


def _rows_before_pad(pad: Any, bindings: Any) -> Any:
    """``y`` where ``pad`` (a ``nn.pad`` call) gives back to a tensor of ``y``'s shape ``[M', n]`` the rows that a
    view of its first rows or a strided slice took off it, with reshapes between that end in their ``[m, n]``; else
    None."""
    from tvm import relax

    from schedule_gym.models.importer import tvm_shape

    shape, data = tvm_shape(pad), pad.args[0]
    width = [int(w) for w in pad.attrs.pad_width]
    if shape is None or len(shape) != 2 or width[0] or width[2:] != [0, 0] or float(pad.attrs.pad_value) != 0:
        return None
    value = bindings.value_of.get(data)
    while isinstance(value, relax.Call) and value.op.name == "relax.reshape":
        value = bindings.value_of.get(value.args[0])
    kept = (shape[0] - width[1], shape[1])
    if not isinstance(value, relax.Call) or tvm_shape(value) != kept or tvm_shape(data) != kept \
            or tvm_shape(value.args[0]) != shape:
        return None
    if value.op.name == "relax.memory.view":  # the first rows (_leading_part): no dtype, no offset given
        dtype, offset = (bindings.value_of.get(a, a) for a in value.args[2:4])
        plain = getattr(getattr(dtype, "op", None), "name", None) == "relax.null_value" \
            and isinstance(offset, relax.Tuple) and not offset.fields
        return value.args[0] if plain else None
    if value.op.name != "relax.strided_slice":
        return None
    axes, begin, end = (_ints(a) for a in value.args[1:4])
    strides = _ints(value.args[4]) if len(value.args) > 4 else None
    if axes != (0, 1) or begin != (0, 0) or end != kept or strides not in (None, (), (1, 1)):
        return None
    return value.args[0]


def _padded_rows_reused(func: Any, symbols: set[str]) -> Any:
    """``func`` with each padding of a dense layer's input ``pad(view(y))`` (or ``pad(slice(y))``) where ``y`` holds
    the padded rows (a padded dense layer's result, its rows taken off and padded again for the next: ViT-B/16's
    FFN-up before its FFN-down) replaced by ``y``: a dense layer's row depends on the same row of its input alone,
    and the padded layer's result is taken back to its rows, so what the padded rows hold never reaches the model.
    Only a ``pad`` read once, as the input (first operand) of a kernel in ``symbols`` (dense tasks of padded rows)."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    from schedule_gym.models.bindings import Bindings

    bindings = Bindings(func)
    rows_read = {call.args[1].fields[0] for call in bindings.value_of.values()  # the inputs of those kernels
                 if getattr(getattr(call, "op", None), "name", None) == "relax.call_tir"
                 and call.args[0].name_hint in symbols}

    def rewrite(expr: Any, _matched: Any) -> Any:
        var = bindings.bound.get(expr)
        if var is None or bindings.uses[var] != 1 or var not in rows_read:
            return expr
        y = _rows_before_pad(expr, bindings)
        return expr if y is None else y

    return relax.analysis.remove_all_unused(rewrite_call(is_op("relax.nn.pad")(wildcard()), rewrite, func))


def _merged(first: Any, second: Any) -> Any:
    """One kernel's :class:`~schedule_gym.models.mapping.ModelTask` with the call sites of both (``first`` may be
    None)."""
    if first is None:
        return second
    patterns = first.patterns + [p for p in second.patterns if p not in first.patterns]
    return dataclasses.replace(first, weight=first.weight + second.weight, patterns=patterns)
