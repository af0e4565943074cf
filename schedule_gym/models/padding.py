"""Padding a model's odd-sized dense layers and batch matmuls, so that the packed template can choose its
register tiles.

The tile spaces split each extent into divisors. An extent with no small divisor leaves the packed templates
(``dense-cpu-v4``, ``batch_matmul-cpu-v4``) only poor register tiles. ViT-B/16's 197 tokens (a prime) allow one
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
* the result is sliced back to ``[M, N]`` (``strided_slice``).

The padded rows and columns cost their share of the work (197 -> 200 rows: 1.5%; 50,257 -> 50,304 columns:
0.09%) plus the copies of the operands and of the result. The other tasks are left as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schedule_gym.models.symbols import add_kernel, kernel_symbol
from schedule_gym.tasks import batch_matmul, dense
from schedule_gym.tasks.task import Task

__all__ = ["PADDED_OPS", "pad_odd_extents", "padded_extents"]

#: rows: the register-tile heights that make a good micro-kernel, and the multiple to pad to otherwise
ROW_DIVISORS, ROW_MULTIPLE = (4, 6, 8), 8
#: columns: a vector of 8 lanes (AVX2) at least; the multiple to pad to, below and from 1,024 columns
COLUMN_DIVISOR, COLUMN_MULTIPLE, WIDE_COLUMN_MULTIPLE, WIDE = 8, 16, 64, 1024


def _round_up(extent: int, multiple: int) -> int:
    return -(-extent // multiple) * multiple


#: the operators whose tasks are padded
PADDED_OPS = ("dense", "batch_matmul")


def padded_extents(task: Task) -> tuple[int, int] | None:
    """``(M', N')``, the padded rows and columns of a dense or batch-matmul ``task``, or None where it needs no
    padding (or is of another operator)."""
    if task.op not in PADDED_OPS:
        return None
    m, n = task.extent_of["m"], task.extent_of["n"]
    rows = m if m < ROW_MULTIPLE or any(m % d == 0 for d in ROW_DIVISORS) else _round_up(m, ROW_MULTIPLE)
    multiple = WIDE_COLUMN_MULTIPLE if n >= WIDE else COLUMN_MULTIPLE
    columns = n if n < COLUMN_MULTIPLE or n % COLUMN_DIVISOR == 0 else _round_up(n, multiple)
    if task.op == "batch_matmul" and columns == n:  # rows alone: measured not to pay (module docstring)
        return None
    return None if (rows, columns) == (m, n) else (rows, columns)


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


def pad_odd_extents(mapped: Any) -> Any:
    """``mapped`` (a :class:`~schedule_gym.models.mapping.MappedModel`) with every dense or batch-matmul task that
    :func:`padded_extents` pads replaced by its padded task, and each call of its kernel rewritten to pad the
    operands and slice the result (module docstring). The other kernels, and the model's outputs, are
    unchanged."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_call_tir, rewrite_call

    plans = {t.function: padded_extents(t.task) for t in mapped.tasks}
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
        task, (rows, columns) = model_task.task, plan
        padded = _padded_task(task, rows, columns)
        symbol = kernel_symbol(padded)
        if symbol not in gvars:  # two layers may pad to one task
            gvars[symbol] = add_kernel(builder, padded)[1]
        batch = (task.extent_of["b"],) if task.op == "batch_matmul" else ()
        axes = [len(batch), len(batch) + 1]  # the result's rows and columns

        def rewrite(expr: Any, _matched: Any, gvar: Any = gvars[symbol], widths: list = _pad_widths(task, rows, columns),
                    shape: tuple = (*batch, rows, columns), end: list = [task.extent_of["m"], task.extent_of["n"]],
                    axes: list = axes, dtype: str = padded.dtype) -> Any:
            operands = [_padded_operand(arg, width) for arg, width in zip(expr.args[1].fields, widths)]
            call = relax.call_tir(gvar, operands, relax.TensorType(shape, dtype))
            return relax.op.strided_slice(call, axes=axes, begin=[0, 0], end=end)

        func = rewrite_call(is_call_tir(model_task.function), rewrite, func)
        tasks[symbol] = _merged(tasks.get(symbol), dataclasses.replace(model_task, task=padded, function=symbol))
    module = builder.get()
    replaced = {t.function for t in mapped.tasks if plans[t.function]} - set(tasks)
    kept = {gv: f for gv, f in module.functions_items() if gv.name_hint not in replaced}
    module = tvm.IRModule(kept, attrs=module.attrs, global_infos=module.global_infos)
    module["main"] = func
    return dataclasses.replace(mapped, mod=relax.transform.Normalize()(module), tasks=list(tasks.values()))


def _merged(first: Any, second: Any) -> Any:
    """One kernel's :class:`~schedule_gym.models.mapping.ModelTask` with the call sites of both (``first`` may be
    None)."""
    if first is None:
        return second
    patterns = first.patterns + [p for p in second.patterns if p not in first.patterns]
    return dataclasses.replace(first, weight=first.weight + second.weight, patterns=patterns)
