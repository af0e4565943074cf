"""The operator registry: every operator schedule-gym tunes, one module each, listed once below.

An operator module states everything about its operator in one :class:`~schedule_gym.operators.base.Operator`
(builder, task names, workload, packed form, references, CUDA axes, model-mapping patterns, environment);
task names, templates, backends, the model mapping and the environments read this registry. Adding an
operator is adding its module and its line here.

* :func:`get_operator`: an operator by name (``Task.op``), :func:`operator_names`: all of them in order;
* :func:`get_workload`: an operator's :class:`~schedule_gym.operators.workload.Workload`;
* :func:`packed_task`: a task in the form of its operator's packed CPU template.
"""

from __future__ import annotations

from schedule_gym.operators.base import CudaAxis, Operator, PackedForm
from schedule_gym.operators.workload import Workload, dot_tolerance
from schedule_gym.tasks.task import Task

from schedule_gym.operators.gemm import GEMM
from schedule_gym.operators.conv2d import CONV2D
from schedule_gym.operators.dense import DENSE
from schedule_gym.operators.batch_matmul import BATCH_MATMUL
from schedule_gym.operators.pool2d import POOL2D

__all__ = ["OPERATORS", "CudaAxis", "Operator", "PackedForm", "Workload", "dot_tolerance", "get_operator",
           "get_workload", "operator_names", "packed_task"]

#: Every operator by name, in registration order. The order is the model mapping's among patterns of one size
#: (dense's ``matmul`` by a constant before batch matmul's ``matmul`` of any two values); new operators go last.
OPERATORS: dict[str, Operator] = {op.name: op for op in (GEMM, CONV2D, DENSE, BATCH_MATMUL, POOL2D)}


def operator_names() -> tuple[str, ...]:
    return tuple(OPERATORS)


def get_operator(op: str) -> Operator:
    """The operator named ``op`` (a ``Task.op``)."""
    if not isinstance(op, str) or op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}; known operators: {', '.join(OPERATORS)}")
    return OPERATORS[op]


def get_workload(op: str) -> Workload:
    """The workload of the operator named ``op``."""
    return get_operator(op).workload


def packed_task(task: Task) -> Task:
    """``task`` in the splits and loop order of its operator's packed CPU template, named ``<name>-packed``
    (idempotent); raises ValueError naming why ``task`` has none.

    >>> from schedule_gym.tasks import dense
    >>> packed_task(dense(128, 768, 3072, activation="gelu")).describe()
    'dense-128x768x3072+bias+gelu-packed (dense{activation=gelu,bias=True} m=128 k=768 n=3072, splits 3/2/3, float32)'
    """
    form = get_operator(task.op).packed
    if form is None:
        have = ", ".join(name for name, op in OPERATORS.items() if op.packed is not None)
        raise ValueError(f"operator {task.op!r} ({task.name}) has no packed form; operators with one: {have}")
    return form.apply(task)
