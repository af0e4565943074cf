"""Tasks: the operators to tune (plain data), their builders, and named tasks and suites.

* :mod:`~schedule_gym.tasks.task`: :class:`Task`, :class:`LoopDim`, :class:`Operand`, :class:`Term`;
* the builders, each from its operator's module in :mod:`schedule_gym.operators`: :func:`gemm`,
  :func:`batch_matmul`, :func:`dense` (with its bias and activation epilogue), :func:`conv2d` (NHWC/NCHW,
  stride, padding, dilation, groups), :func:`pool2d` (max and average);
* :mod:`~schedule_gym.tasks.suites`: GEMM presets and the layers of ResNet-18/50, MobileNet-V2,
  BERT-base and MetaSchedule's workloads, by name (:func:`get_task`, :func:`get_suite`).
"""

from schedule_gym.operators.batch_matmul import batch_matmul
from schedule_gym.operators.conv2d import CONV_LAYOUTS, conv2d
from schedule_gym.operators.dense import dense
from schedule_gym.operators.epilogue import ACTIVATIONS
from schedule_gym.operators.gemm import gemm
from schedule_gym.operators.pool2d import pool2d
from schedule_gym.tasks.suites import (
    PRESETS, SUITES, V0_OPERATORS, SuiteTask, expand_suites, get_suite, get_task, parse_operators, suite_names, task_names,
)
from schedule_gym.tasks.task import DTYPE_BYTES, LoopDim, Operand, Task, Term, check_positive_int, default_loop_order

__all__ = [
    "ACTIVATIONS",
    "CONV_LAYOUTS",
    "DTYPE_BYTES",
    "LoopDim",
    "Operand",
    "PRESETS",
    "SUITES",
    "SuiteTask",
    "Task",
    "Term",
    "V0_OPERATORS",
    "batch_matmul",
    "check_positive_int",
    "conv2d",
    "default_loop_order",
    "dense",
    "expand_suites",
    "gemm",
    "get_suite",
    "get_task",
    "parse_operators",
    "pool2d",
    "suite_names",
    "task_names",
]
