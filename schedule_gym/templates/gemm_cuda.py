"""CUDA schedule template: the paper's GPU setting (Zhang et al., Section 5; TVM's classic GEMM schedule).

Splits (4, 2, 4): ``m = (block, virtual thread, thread, inner)``, ``k = (outer, inner)``,
``n = (block, virtual thread, thread, inner)``. Loop order
``m0 n0 | m1 n1 | m2 n2 | k0 k1 | m3 n3`` with ``m0/n0`` bound to ``blockIdx.y/x``, ``m1/n1`` to
``vthread.y/x`` and ``m2/n2`` to ``threadIdx.y/x``; each thread accumulates an ``m3 x n3`` tile in
registers (``local``); A and B tiles of one ``k0`` step are staged in shared memory, loaded cooperatively
by all threads of the block. Configs that ask for more threads or shared memory than the device has fail
to build or to launch: failed measurements, as in the paper (its legality bit ``J``).

The schedule is the shared CUDA template's (:mod:`schedule_gym.templates.cuda`), which builds batch
matmul and conv2d the same way.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.tasks import Task
from schedule_gym.templates.cuda import MAX_THREADS_PER_BLOCK, schedule_cuda
from schedule_gym.types import Config

__all__ = ["MAX_THREADS_PER_BLOCK", "TEMPLATE_VERSION", "schedule_gemm_cuda"]

TEMPLATE_VERSION = "gemm-cuda-v1"


def schedule_gemm_cuda(task: Task, config: Config) -> Any:
    if task.op != "gemm":
        raise ValueError(f"the GEMM CUDA template builds gemm tasks, not {task.op!r} ({task.name})")
    return schedule_cuda(task, config)
