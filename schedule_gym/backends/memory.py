"""What a task's kernel needs in memory: the elements of its operands (inputs and output), counted exactly.

The backends read it to refuse, up front, a task whose kernel could never be allocated (the TVM backend against
this machine's available memory, the mock against a fixed cap) and to size what they upload.
"""

from __future__ import annotations

import math

from schedule_gym.tasks.task import Task
from schedule_gym.operators import get_workload

__all__ = ["operand_bytes", "operand_elements"]


def operand_elements(task: Task) -> tuple[int, int]:
    """Elements of ``task``'s inputs (together) and of its output, exactly (Python integers: a product of
    extents past 2**63 is not wrapped round to a small number, as a NumPy product would be)."""
    workload = get_workload(task.op)
    return sum(math.prod(shape) for shape in workload.input_shapes(task)), math.prod(workload.output_shape(task))


def operand_bytes(task: Task) -> int:
    """Bytes of ``task``'s inputs and output in its dtype."""
    inputs, output = operand_elements(task)
    return (inputs + output) * task.dtype_bytes
