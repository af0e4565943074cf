"""Workloads: what each operator *is* to a measurement — its TVM definition, inputs, reference and tolerance.

One :class:`Workload` per operator (``task.op``), found with :func:`get_workload`:

* :meth:`~Workload.prim_func`: the operator as a TE-built PrimFunc named ``main`` (TVM imported lazily);
  its main block (``"C"``) is what the templates tile, its loops are the task's spatial dimensions then
  its reduction dimensions, each in task order; ``inline_blocks`` are folded into it (a convolution's
  padding) and ``epilogue_blocks`` into its write-back (a dense layer's bias and activation);
* :meth:`~Workload.inputs`: seeded random inputs (uniform in [-1, 1]) in the kernel's argument order;
* :meth:`~Workload.reference`: the output computed in float64 with NumPy;
* :meth:`~Workload.check`: the output against the reference, within a tolerance from an error
  analysis (:func:`dot_tolerance`), or why not;
* :meth:`~Workload.signature`: how the compiled kernel is called.

The TVM backends, the RPC backend, kernel export and the MetaSchedule baseline all go through this; no
other module knows an operator's arguments.
"""

from __future__ import annotations

from schedule_gym.workloads.base import Workload, dot_tolerance
from schedule_gym.workloads.operators import BatchMatmulWorkload, Conv2dWorkload, DenseWorkload, GemmWorkload

__all__ = ["WORKLOADS", "BatchMatmulWorkload", "Conv2dWorkload", "DenseWorkload", "GemmWorkload", "Workload",
           "dot_tolerance", "get_workload"]

#: The workload of every operator, by ``Task.op``.
WORKLOADS: dict[str, Workload] = {
    w.op: w for w in (GemmWorkload(), BatchMatmulWorkload(), DenseWorkload(), Conv2dWorkload())
}


def get_workload(op: str) -> Workload:
    if op not in WORKLOADS:
        raise ValueError(f"no workload for operator {op!r}; known operators: {', '.join(WORKLOADS)}")
    return WORKLOADS[op]
