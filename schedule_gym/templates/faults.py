"""Deliberately broken GEMM "templates" that fail the way real kernels do (for fault-injection tests).

* :func:`build_failure`: the schedule is invalid (vectorising a reduction loop) and raises while building;
* :func:`crashing_kernel`: writes far outside C (a segmentation fault in the process that runs it);
* :func:`hanging_kernel`: loops forever;
* :func:`wrong_kernel`: builds and runs but computes ``A @ B + 1``.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.operators import get_workload
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config


def _shape(task: Task) -> tuple[int, int, int]:
    return task.dim("m").extent, task.dim("k").extent, task.dim("n").extent


def build_failure(task: Task, config: Config) -> Any:
    import tvm
    import tvm.s_tir as s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": get_workload("gemm").prim_func(task)}))
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    sch.vectorize(k)  # a reduction loop cannot be vectorised: raises ScheduleError
    return sch.mod


def crashing_kernel(task: Task, config: Config) -> Any:
    import tvm
    from tvm.script import tirx as T

    m, k, n = _shape(task)
    far = (1 << 30) // n  # rows past the end: about 4 GiB beyond C, still an int32 index

    @T.prim_func
    def main(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(m):
            C[i + far, 0] = A[i, 0]

    return tvm.IRModule({"main": main})


def hanging_kernel(task: Task, config: Config) -> Any:
    import tvm
    from tvm.script import tirx as T

    m, k, n = _shape(task)

    @T.prim_func
    def main(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        while A[0, 0] < A[0, 0] + T.float32(1.0):  # A holds small finite values: never returns
            C[0, 0] = C[0, 0] + T.float32(1.0)

    return tvm.IRModule({"main": main})


def wrong_kernel(task: Task, config: Config) -> Any:
    import tvm
    from tvm import te

    m, k, n = _shape(task)
    a = te.placeholder((m, k), name="A", dtype=task.dtype)
    b = te.placeholder((k, n), name="B", dtype=task.dtype)
    r = te.reduce_axis((0, k), name="k")
    acc = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="acc")
    c = te.compute((m, n), lambda i, j: acc[i, j] + 1.0, name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})
