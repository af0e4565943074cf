"""What a task's kernel needs in memory: the elements of its operands (inputs and output), counted exactly.

The backends read it to refuse, up front, a task whose kernel could never be allocated (the TVM backend against
this machine's available memory, the mock against a fixed cap) and to size what they upload.
"""

from __future__ import annotations

import math

from schedule_gym.tasks.task import Task
from schedule_gym.operators import OPERATORS, get_workload

__all__ = ["operand_bytes", "operand_elements"]


def operand_elements(task: Task) -> tuple[int, int]:
    """Elements of ``task``'s inputs (together) and of its output, exactly (Python integers: a product of
    extents past 2**63 is not wrapped round to a small number, as a NumPy product would be).

    A registered operator's workload gives the shapes; a task of an operator not (yet) in the registry, which
    the mock can score from the task alone, counts what its index expressions reach (each axis from 0 to
    the sum of its terms at the dimensions' last values: a padded input counted padded)."""
    if task.op in OPERATORS:
        workload = get_workload(task.op)
        return sum(math.prod(shape) for shape in workload.input_shapes(task)), math.prod(workload.output_shape(task))
    extent = {d.name: d.extent for d in task.dims}
    counts = {False: 0, True: 0}
    for operand in task.operands:
        shape = [1 + sum(t.stride * ((extent[t.dim] - 1) // t.div) for t in axis) for axis in operand.index]
        counts[operand.output] += math.prod(shape)
    return counts[False], counts[True]


def operand_bytes(task: Task) -> int:
    """Bytes of ``task``'s inputs and output in its dtype."""
    inputs, output = operand_elements(task)
    return (inputs + output) * task.dtype_bytes
