"""What runs inside the runner process: the task's inputs, loading a kernel, its first run, the check and
the timing under the :class:`~schedule_gym.backends.tvm.protocol.MeasureProtocol`.

The functions here are sent by reference to a runner process (:class:`~schedule_gym.backends.tvm.workers.
ForkedWorker`) or, for a remote device, called with an RPC session's module and device
(:func:`check_and_time`). The parent process never runs generated code. A runner keeps its state in this
module: the task's host arrays (:func:`host_inputs`, inherited from the zygote that forked it), its device
buffers and the kernel loaded last.
"""

from __future__ import annotations

import math
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from schedule_gym.backends.memory import operand_bytes, operand_elements
from schedule_gym.backends.tvm.protocol import censor_bound_s
from schedule_gym.tasks.task import Task
from schedule_gym.operators import get_workload

__all__ = [
    "check_and_time",
    "device_exists",
    "device_inputs",
    "first_run",
    "first_run_loaded",
    "finish_loaded",
    "host_inputs",
    "laid_out_args",
    "load_artifact",
    "prepare_runner",
    "runner_facts",
    "task_memory_bytes",
    "upload_bytes",
    "warm_up",
]

#: In a runner process: its device inputs (``"inputs"``, for ``"inputs_key"``), those of them the loaded kernel
#: takes in another layout (``"laid_out"``: the layout and the device arrays), the loaded kernel (``"module"``,
#: with its arguments) and whether it warmed up (``"warm"``)
_RUNNER_STATE: dict[Any, Any] = {}

#: In the zygote and the runners forked from it: ``(task key, inputs, expected, tolerance, pid that made
#: them)`` of the last task :func:`host_inputs` made (NumPy arrays; a forked runner shares the zygote's
#: copy until it writes to it)
_HOST_INPUTS: tuple[str, list[Any], Any, Any, int] | None = None


def task_memory_bytes(task: Task) -> int:
    """About how many bytes measuring ``task`` allocates: inputs and output in the task's dtype, their
    float64 copies, and the float64 reference and tolerance (:meth:`Workload.reference`)."""
    inputs, output = operand_elements(task)
    itemsize = task.dtype_bytes
    return inputs * (2 * itemsize + 2 * 8) + output * (2 * itemsize + 3 * 8)


def upload_bytes(task: Task) -> int:
    """Bytes of ``task``'s inputs and output in its dtype (what a device's first run of the task receives)."""
    return operand_bytes(task)


def host_inputs(task: Task) -> tuple[list[Any], Any, Any]:
    """The workload's seeded inputs with the float64 reference output and its per-output tolerance
    (:meth:`Workload.reference`), as NumPy arrays: made once per task in a process (the zygote makes them
    before forking a runner for the task, which then has them without the reference's matmuls)."""
    global _HOST_INPUTS
    if _HOST_INPUTS is None or _HOST_INPUTS[0] != task.key:
        _HOST_INPUTS = None  # the previous task's arrays are freed before the new ones are made
        _HOST_INPUTS = (task.key, *_make_host_inputs(task), os.getpid())
    return _HOST_INPUTS[1], _HOST_INPUTS[2], _HOST_INPUTS[3]


def _make_host_inputs(task: Task) -> tuple[list[Any], Any, Any]:
    workload = get_workload(task.op)
    inputs = workload.inputs(task)
    return (inputs, *workload.reference(task, inputs))


def device_exists(device: str) -> bool:
    """Whether this process sees device 0 of kind ``device`` (``"cpu"``, ``"cuda"``): where kernels would run."""
    import tvm

    return bool(tvm.device(device, 0).exist)


def runner_facts() -> dict:
    """What a runner process says of itself (tests, diagnostics): its pid, the task whose inputs it holds
    and the pid of the process that made them (the zygote's when inherited), whether it warmed up, its
    OpenBLAS thread setting, and whether its imports asked torch about CUDA (which must not happen in
    the zygote: see :data:`~schedule_gym.backends.tvm.workers.RUNNER_ENV`)."""
    return {
        "pid": os.getpid(),
        "inputs_key": None if _HOST_INPUTS is None else _HOST_INPUTS[0],
        "inputs_made_by": None if _HOST_INPUTS is None else _HOST_INPUTS[4],
        "warm": bool(_RUNNER_STATE.get("warm")),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "asked_torch_about_cuda": _asked_torch_about_cuda(),
    }


def _asked_torch_about_cuda() -> bool:
    """Whether ``tvm_ffi``'s optional torch extension was loaded in this process: loading it asks
    ``torch.cuda.is_available()``, which initialises CUDA, after which a forked child cannot use the GPU."""
    module = sys.modules.get("tvm_ffi._optional_torch_c_dlpack")
    return module is not None and hasattr(module, "_LIB")


def device_inputs(task: Task, dev: Any, host: tuple[list[Any], Any, Any] | None = None) -> tuple[list[Any], Any, Any]:
    """The workload's seeded inputs and an output buffer on ``dev`` (local or RPC device), with the float64
    reference output and its per-output tolerance (:meth:`Workload.reference`); ``host``: those arrays
    already made (:func:`host_inputs`)."""
    import tvm

    workload = get_workload(task.op)
    inputs, expected, tol = _make_host_inputs(task) if host is None else host
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    args.append(tvm.runtime.empty(workload.output_shape(task), task.dtype, dev))
    return args, expected, tol


def laid_out_args(args: Sequence[Any], host: Sequence[Any], layout: Sequence[tuple[int, int]], dev: Any) -> list[Any]:
    """``args`` (the device inputs and output of :func:`device_inputs`) with each input that ``layout`` (a
    template's :meth:`~schedule_gym.templates.Template.input_layout`) names replaced by its ``host`` array so laid
    out, on ``dev``."""
    if not layout:
        return list(args)
    import tvm

    from schedule_gym.templates.layouts import kernel_inputs

    out, arrays = list(args), kernel_inputs(host, layout)
    for index, _ in layout:
        out[index] = tvm.runtime.tensor(arrays[index], dev)
    return out


def warm_up(seconds: float) -> float:
    """Keep every CPU thread of this process busy for ``seconds`` (NumPy matmuls); the seconds spent."""
    import numpy as np

    if seconds <= 0:
        return 0.0
    a = np.ones((512, 512), dtype=np.float32)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
    return time.perf_counter() - t0


def prepare_runner(task: Task, device: str, warmup_s: float) -> float:
    """Make the task's inputs in the runner process (once per task) and, in a new process, warm up
    (``warmup_s``, CPU only). Returns the warm-up seconds."""
    import tvm

    dev = tvm.device(device, 0)
    key = (task.key, device)
    if _RUNNER_STATE.get("inputs_key") != key:
        _RUNNER_STATE.pop("inputs", None)
        _RUNNER_STATE["inputs"] = device_inputs(task, dev, host_inputs(task))
        _RUNNER_STATE["inputs_key"] = key
    warmed = 0.0
    if not _RUNNER_STATE.get("warm"):
        warmed = warm_up(warmup_s) if device == "cpu" else 0.0
        _RUNNER_STATE["warm"] = True
    return warmed


def load_artifact(path: str, task: Task, device: str, warmup_s: float, fill_nan: bool = False,
                  layout: Sequence[tuple[int, int]] = ()) -> float:
    """Load a kernel in the runner process for the calls below, after :func:`prepare_runner`; ``layout``: the
    inputs it takes in another layout (:func:`laid_out_args`; made once per task and layout); with ``fill_nan``
    fill the output with NaN for the first run's check (here, so the first-run call runs the kernel and nothing
    else)."""
    import tvm

    warmed = prepare_runner(task, device, warmup_s)
    dev = tvm.device(device, 0)
    args = _RUNNER_STATE["inputs"][0]
    if layout:
        key = (_RUNNER_STATE["inputs_key"], tuple(layout))
        if _RUNNER_STATE.get("laid_out", (None,))[0] != key:
            _RUNNER_STATE.pop("laid_out", None)
            _RUNNER_STATE["laid_out"] = (key, laid_out_args(args, host_inputs(task)[0], layout, dev))
        args = _RUNNER_STATE["laid_out"][1]
    _RUNNER_STATE["module"] = (tvm.runtime.load_module(path), dev, args)
    if fill_nan:
        _fill_with_nan(args[-1], task.dtype)
    return warmed


def first_run_loaded(task: Task, check: bool) -> float:
    """The first run of the loaded kernel (:func:`first_run`; ``check``: fill the output with NaN first)."""
    module, dev, args = _RUNNER_STATE["module"]
    return first_run(module["main"], dev, args, task, check)


def finish_loaded(task: Task, protocol: dict, best_s: float | None, first_s: float, reference_s: float | None) -> dict:
    """:func:`check_and_time` of the loaded kernel after its first run."""
    (module, dev, args), (_, expected, tol) = _RUNNER_STATE.pop("module"), _RUNNER_STATE["inputs"]
    return check_and_time(module, dev, args, (expected, tol), task, protocol, best_s, first_s, reference_s)


def _fill_with_nan(out: Any, dtype: str) -> None:
    """Fill an output buffer with NaN, so a kernel that leaves any element unwritten fails the check."""
    import numpy as np

    out.copyfrom(np.full(tuple(out.shape), np.nan, dtype=dtype))


def first_run(kernel: Any, dev: Any, args: Sequence[Any], task: Task, check: bool) -> float:
    """Run ``kernel`` once (the output first filled with NaN when it is to be checked); its seconds."""
    if check:
        _fill_with_nan(args[-1], task.dtype)
    t0 = time.perf_counter()
    kernel(*args)
    dev.sync()
    return time.perf_counter() - t0


def check_and_time(
    module: Any,
    dev: Any,
    args: Sequence[Any],
    expected: tuple[Any, Any],
    task: Task,
    protocol: dict,
    best_s: float | None,
    first_s: float | None = None,
    reference_s: float | None = None,
    hold: Callable[[Any], Any] | None = None,
) -> dict:
    """Run ``module``'s kernel once (unless ``first_s`` says it just ran) and check it, then time it under
    ``protocol`` (local or RPC module). ``best_s`` is the best precise latency so far (the early-stop
    rule's), ``reference_s`` the best exact one (the censor bound's; default ``best_s``). ``hold`` is given
    each object made from ``module`` (the kernel, the timer) before it is used: an RPC device keeps its own
    reference to each (:class:`~schedule_gym.backends.tvm.rpc_device.RemoteRefs`).

    Returns ``{"costs": [...], "coarse": bool}``, ``{"censored_s": bound}`` (the first run passed the
    censor bound: not checked, not timed) or ``{"error": ..., "kind": "wrong_result"}``.
    """
    hold = hold or (lambda obj: obj)
    kernel = hold(module["main"])
    out = args[-1]
    reference, tol = expected
    if first_s is None:
        first_s = first_run(kernel, dev, args, task, protocol["check_correctness"])
    bound = censor_bound_s(protocol, best_s if reference_s is None else reference_s)
    if bound is not None and first_s > bound:
        return {"censored_s": bound}
    if protocol["check_correctness"]:
        problem = get_workload(task.op).check(task, out.numpy(), reference, tol)
        if problem:
            return {"error": problem, "kind": "wrong_result"}
    ratio, ceiling = protocol["early_stop_ratio"], protocol["coarse_above_s"]
    floor = protocol["early_stop_floor_s"]
    if ceiling is not None and first_s > ceiling:
        return {"costs": [first_s], "coarse": True}
    slow_s = None if ratio is None or best_s is None else max(ratio * best_s, floor)
    if slow_s is not None and first_s > slow_s:
        # A first run can be slow for reasons of its own (a cold cache, a thread pool waking on a
        # loaded machine): a second run confirms the verdict before a fast kernel is reported slow.
        first_s = min(first_s, first_run(kernel, dev, args, task, check=False))
        if first_s > slow_s:
            return {"costs": [first_s], "coarse": True}
    for _ in range(max(0, protocol["warmup"] - 1)):
        kernel(*args)
    dev.sync()
    return {"costs": _time(module, dev, args, protocol, hold), "coarse": False}


def _time(module: Any, dev: Any, args: Sequence[Any], protocol: dict, hold: Callable[[Any], Any]) -> list[float]:
    """``protocol["repeat"]`` timings of ``module``'s kernel by TVM's time evaluator (what
    ``Module.time_evaluator`` makes, with its defaults, called here so that ``hold`` sees the timer)."""
    import tvm

    timer = hold(tvm.get_global_func("runtime.RPCTimeEvaluator")(
        module, "main", dev.dlpack_device_type(), dev.index, protocol["number"], protocol["repeat"],
        int(math.ceil(protocol["min_repeat_ms"])),
        100,  # limit_zero_time_iterations
        0,  # cooldown_interval_ms
        1,  # repeats_to_cooldown
        0,  # cache_flush_bytes
        "cache_flush_cpu_non_first_arg" if protocol["cache_flush"] else "",
    ))
    blob = timer(*args)
    return [float(x) for x in struct.unpack("@" + "d" * protocol["repeat"], blob)]
