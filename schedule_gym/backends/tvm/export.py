"""Exporting a tuned kernel: a checked shared library that any TVM runtime can load and call.

:class:`KernelTarget` is what a measuring backend tells callers about how it builds kernels
(:attr:`LatencyBackend.kernel_target <schedule_gym.backends.base.LatencyBackend.kernel_target>`), so that
a caller exports the kernel a search found for the same target and template without knowing the backend.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from schedule_gym.backends.tvm.builder import build_artifact
from schedule_gym.backends.tvm.runner import device_inputs, host_inputs, laid_out_args
from schedule_gym.backends.tvm.targets import device_of, resolve_target
from schedule_gym.backends.tvm.workers import IsolatedWorker
from schedule_gym.tasks.task import Task
from schedule_gym.templates import get_template, template_of
from schedule_gym.templates.layouts import tiled_shape
from schedule_gym.types import Config
from schedule_gym.operators import get_workload

__all__ = ["ExportedKernel", "KernelTarget", "check_artifact", "export_kernel", "kernel_signature"]


@dataclass(frozen=True)
class ExportedKernel:
    """A kernel written as a shared library by :func:`export_kernel`.

    Load it with ``tvm.runtime.load_module(path)`` and call ``module[function](*tensors)`` (see
    :attr:`signature`). ``max_abs_error`` is the check against NumPy after export (None: not checked).
    """

    path: str
    function: str
    signature: str
    target: dict
    template: str
    max_abs_error: float | None


@dataclass(frozen=True)
class KernelTarget:
    """How kernels are built: for which target, with which template, timed on how many threads, and
    whether they run on this machine. The defaults: this CPU, each operator's own template.

    Attributes:
        target: ``"llvm"`` (this CPU), ``"cuda"``, or a TVM target dict (:func:`resolve_target`).
        template: a template name, or ``"auto"`` (each task's template for the target kind).
        num_threads: threads of the TVM runtime the kernels are timed on (None: not set).
        remote: the kernels run on other machines (RPC devices): an export cannot be checked here.
    """

    target: str | dict = "llvm"
    template: str = "auto"
    num_threads: int | None = None
    remote: bool = False

    def export(self, task: Task, config: Config, path: str | os.PathLike) -> ExportedKernel:
        """:func:`export_kernel` of ``config`` for this target and template, checked unless :attr:`remote`."""
        return export_kernel(task, config, path, template=self.template, target=self.target, check=not self.remote)


def kernel_signature(task: Task, function: str = "main", layout: Sequence[tuple[int, int]] = ()) -> str:
    """How a kernel of ``task`` is called: destination passing, the output is written, nothing returned;
    ``layout``: the inputs it takes with their columns tiled (its template's ``input_layout``)."""
    workload = get_workload(task.op)
    names, shapes = [o.name for o in task.operands if not o.output], workload.input_shapes(task)
    laid_out = {i: (tiled_shape(shapes[i], tile), f"tile_columns({names[i]}, {tile})") for i, tile in layout}
    return workload.signature(task, function, laid_out)


def check_artifact(path: str, task: Task, device: str, layout: Sequence[tuple[int, int]] = ()) -> dict:
    """Load a kernel library, run it once on seeded inputs (those ``layout`` names laid out so) and compare with
    the reference (in a worker)."""
    import numpy as np
    import tvm

    dev = tvm.device(device, 0)
    host = host_inputs(task)
    args, expected, tol = device_inputs(task, dev, host)
    args = laid_out_args(args, host[0], layout, dev)
    tvm.runtime.load_module(path)["main"](*args)
    dev.sync()
    out = args[-1].numpy()
    problem = get_workload(task.op).check(task, out, expected, tol)
    return {"problem": problem, "max_abs_error": float(np.abs(out.astype(np.float64) - expected).max())}


def export_kernel(
    task: Task,
    config: Config,
    path: str | os.PathLike,
    template: str = "auto",
    target: str | dict = "llvm",
    check: bool = True,
) -> ExportedKernel:
    """Compile ``config`` of ``task`` and write it to ``path`` (``.so``; ``.tar`` also works), checked.

    The library exports one function, ``main`` (see :func:`kernel_signature`); its parallel loops run
    on TVM's runtime thread pool (``TVM_NUM_THREADS``). With ``check`` the library is loaded again in a
    worker process (the parent never runs generated code), run once and compared with NumPy; a wrong
    result raises ``RuntimeError``. A CUDA kernel is checked only where a GPU is present.
    """
    import tvm

    target_dict = resolve_target(target)
    chosen = template_of(task, target_dict["kind"]) if template == "auto" else get_template(template)
    chosen.check(task, target_dict["kind"])
    path = os.fspath(path)
    build_artifact(task, config, chosen.name, target_dict, path)
    device = device_of(target_dict)
    layout = chosen.input_layout(task, config)
    error = None
    if check and tvm.device(device, 0).exist:
        worker = IsolatedWorker()
        try:
            outcome = worker.call(check_artifact, (path, task, device, layout), 120.0)
        finally:
            worker.close()
        if outcome["problem"]:
            raise RuntimeError(f"the kernel exported to {path} is wrong: {outcome['problem']}")
        error = outcome["max_abs_error"]
    return ExportedKernel(path, "main", kernel_signature(task, "main", layout), target_dict, chosen.version, error)
