"""A task's kernel in a model's module: its global symbol (``sg_`` and the task's name, every character that
is not a letter, a digit or ``_`` replaced by ``_``) and its unscheduled definition added under that symbol.
One place for the mapping and the padding."""

from __future__ import annotations

import re
from typing import Any

from schedule_gym.operators import get_workload
from schedule_gym.tasks.task import Task

__all__ = ["OPAQUE", "add_kernel", "kernel_symbol"]

#: TVM's OpPatternKind for a function operator fusion must not merge with its neighbours
OPAQUE = 8


def kernel_symbol(task: Task) -> str:
    return "sg_" + re.sub(r"[^0-9A-Za-z_]", "_", task.name)


def add_kernel(builder: Any, task: Task) -> tuple[str, Any]:
    """``(symbol, GlobalVar)`` of ``task``'s unscheduled kernel, added to a Relax ``BlockBuilder``'s module."""
    symbol = kernel_symbol(task)
    prim = get_workload(task.op).prim_func(task).with_attr("global_symbol", symbol)
    return symbol, builder.add_func(prim, symbol)
