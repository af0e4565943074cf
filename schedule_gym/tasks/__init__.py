"""Tasks: the operators to tune (plain data), their builders, and named tasks and suites.

* :mod:`~schedule_gym.tasks.task`: :class:`Task`, :class:`LoopDim`, :class:`Operand`, :class:`Term`;
* :mod:`~schedule_gym.tasks.operators`: :func:`gemm`, :func:`batch_matmul`, :func:`dense` (with its
  bias and activation epilogue), :func:`conv2d` (NHWC/NCHW, stride, padding, dilation, groups);
* :mod:`~schedule_gym.tasks.suites`: GEMM presets and the layers of ResNet-18/50, MobileNet-V2,
  BERT-base and MetaSchedule's workloads, by name (:func:`get_task`, :func:`get_suite`).
"""

from schedule_gym.tasks.operators import ACTIVATIONS, CONV_LAYOUTS, batch_matmul, conv2d, dense, gemm
from schedule_gym.tasks.suites import PRESETS, SUITES, SuiteTask, get_suite, get_task, suite_names, task_names
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
    "batch_matmul",
    "check_positive_int",
    "conv2d",
    "default_loop_order",
    "dense",
    "gemm",
    "get_suite",
    "get_task",
    "suite_names",
    "task_names",
]
