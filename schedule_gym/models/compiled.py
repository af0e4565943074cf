"""Any PyTorch model in, a tuned and checked callable out, in one call: :func:`compile_torch`.

:func:`compile_torch` chains the whole-model steps: the model is checked against the model contract
and imported (:func:`~schedule_gym.models.pipeline.prepare_model`), its sub-graphs mapped to tasks,
the tasks tuned within ``budget`` measurements (:func:`~schedule_gym.models.tuning.tune_model`; a
record file makes it resumable: what the file holds is not measured again), every kernel scheduled,
the model compiled (:mod:`~schedule_gym.models.build`) and its outputs checked against PyTorch's on the
example inputs. A build whose outputs differ raises :class:`~schedule_gym.models.pipeline.OutputMismatchError`
naming the largest error. The result, a :class:`CompiledModel`, is called like the module::

    compiled = compile_torch(model, (x,), budget=64, backend="tvm", records="runs/model.jsonl")
    y = compiled(x)          # torch tensors in, torch tensors out, in the module's output structure
    print("\\n".join(compiled.report.lines()))

Its :class:`CompileReport` lists the tasks with their weights and measurements (all, and new to the
record file), the mapping (what was mapped, what is left to TVM and why), the check's error and, with
``compare=True``, the compiled model's latency next to PyTorch eager's.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedule_gym.models.pipeline import (
    RELATIVE_TOLERANCE,
    LoadedModel,
    OutputMismatchError,
    check_outputs,
    output_errors,
    prepare_model,
    reference_outputs,
    torch_latency,
)
from schedule_gym.models.tuning import TaskOutcome, tune_model

__all__ = ["CompileReport", "CompiledModel", "check_compile_options", "compile_torch"]


@dataclass
class CompileReport:
    """What :func:`compile_torch` did: tasks, mapping, the output check and (if asked) the latencies."""

    model: str
    budget: int
    backend: str
    agent: str
    records: str | None
    tasks: list[TaskOutcome]  # weight, measurements the agent used (from the records or new), best latency and config
    new_measurements: dict[str, int]  # task name -> measurements taken in this call (appended to the records)
    mapping: list[str]  # the mapping report: mapped / refused / left lines
    left_to_tvm: dict[str, int]  # Relax operator -> calls left to TVM's default lowering
    max_abs_error: float = 0.0  # the largest |compiled - PyTorch| over all outputs on the example inputs
    max_relative_error: float = 0.0  # the largest of |error| / max |output| per output (checked against tolerance)
    tolerance: float = RELATIVE_TOLERANCE
    latency_s: dict[str, float] = field(default_factory=dict)  # median seconds per run: "compiled", "torch eager"

    @property
    def measurements(self) -> int:
        return sum(t.measurements for t in self.tasks)

    @property
    def new_measurement_count(self) -> int:
        return sum(self.new_measurements.values())

    def lines(self) -> list[str]:
        out = [f"model {self.model}: {len(self.tasks)} tasks, budget {self.budget} ({self.agent} on {self.backend}), "
               f"{self.measurements} measurements, {self.new_measurement_count} new"
               + (f"; records {self.records}" if self.records else "")]
        out += [f"  {line}" for line in self.mapping]
        for t in self.tasks:
            best = "untuned (the mock's pick)" if t.best_latency_s is None else f"best {t.best_latency_s * 1e3:.4f} ms"
            out.append(f"  task {t.name} x{t.weight}: {t.measurements} measurements "
                       f"({self.new_measurements.get(t.name, 0)} new), {best}")
        out.append(f"outputs equal PyTorch's: max |error| {self.max_abs_error:.3g}, {self.max_relative_error:.3g} of "
                   f"the largest output (tolerance {self.tolerance:g})")
        out += [f"latency {name}: {seconds * 1e3:.3f} ms (median)" for name, seconds in self.latency_s.items()]
        return out

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["tasks"] = [t.to_dict() for t in self.tasks]
        data["measurements"], data["new_measurement_count"] = self.measurements, self.new_measurement_count
        return data


class CompiledModel:
    """A compiled model, called like its module on inputs of the example inputs' shapes and dtypes.

    ``compiled(*inputs)`` takes torch tensors or NumPy arrays and returns the module's output structure
    (tuples, lists, dicts) of torch tensors, or of NumPy arrays when the first input is an array. The
    outputs carry no autograd history (inference only).
    """

    def __init__(self, executable: Any, loaded: LoadedModel, structure: Any, report: CompileReport, target: Any) -> None:
        from schedule_gym.models.build import virtual_machine

        self.executable, self.loaded, self.report, self.target = executable, loaded, report, target
        self.mapped = loaded.mapped
        self._structure = structure
        self._vm = virtual_machine(executable)
        self.input_shapes = [tuple(x.shape) for x in loaded.spec.inputs]
        self.input_dtypes = [_dtype_name(x.dtype) for x in loaded.spec.inputs]

    def _arrays(self, inputs: tuple[Any, ...]) -> list[np.ndarray]:
        import torch

        if len(inputs) != len(self.input_shapes):
            raise TypeError(f"the model was compiled for {len(self.input_shapes)} inputs, got {len(inputs)}")
        arrays = []
        for i, (x, shape, dtype) in enumerate(zip(inputs, self.input_shapes, self.input_dtypes)):
            if isinstance(x, torch.Tensor):
                x = x.detach().cpu().numpy()
            elif not isinstance(x, np.ndarray):
                raise TypeError(f"input {i} is a {type(x).__name__}, not a torch.Tensor or a NumPy array")
            if tuple(x.shape) != shape or _dtype_name(x.dtype) != dtype:
                raise ValueError(f"input {i} is {_dtype_name(x.dtype)}{list(x.shape)}; the model was compiled for "
                                 f"{dtype}{list(shape)} (compile it again for other shapes)")
            arrays.append(x)
        return arrays

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """The outputs as a flat list of NumPy arrays (the order of ``torch.utils._pytree.tree_flatten``)."""
        from schedule_gym.models.build import run_model

        return run_model(self._vm, self._arrays(inputs))

    def __call__(self, *inputs: Any) -> Any:
        import torch
        from torch.utils import _pytree as pytree

        leaves = self.run(*inputs)
        if not inputs or isinstance(inputs[0], torch.Tensor):
            leaves = [torch.from_numpy(a) for a in leaves]
        return pytree.tree_unflatten(leaves, self._structure)

    def __repr__(self) -> str:
        return f"CompiledModel({self.report.model!r}, {len(self.report.tasks)} tasks, inputs {self.input_shapes})"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _records_per_task(records: str | os.PathLike | None) -> Counter:
    """How many records the file holds per task key (empty if there is no file yet)."""
    from schedule_gym.records import RecordStore

    if records is None or not os.path.exists(records):
        return Counter()
    store = RecordStore(records)
    try:
        return Counter(r.task.key for r in store)
    finally:
        store.close()


def check_compile_options(budget: Any, backend: Any, agent: Any, threads: Any) -> None:
    """Raise ``ValueError`` naming a bad ``budget``, ``backend``, ``agent`` or ``threads`` of :func:`compile_torch`."""
    from schedule_gym.agents import AGENTS, SCHEDULE_AGENTS
    from schedule_gym.backends import BACKENDS

    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a number of measurements >= 0, got {budget!r}")
    if not isinstance(backend, str) or backend not in BACKENDS or BACKENDS[backend].serves_records:
        measuring = [n for n, spec in BACKENDS.items() if not spec.serves_records]
        raise ValueError(f"backend must be one of {', '.join(measuring)}, got {backend!r} (records= replays)")
    if agent not in AGENTS or agent in SCHEDULE_AGENTS:
        tile_agents = [a for a in AGENTS if a not in SCHEDULE_AGENTS]
        raise ValueError(f"agent must be a tile agent ({', '.join(tile_agents)}), got {agent!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive number or None, got {threads!r}")


def compile_torch(
    module: Any,
    example_inputs: Any,
    budget: int,
    backend: str = "tvm",
    agent: str = "xgb",
    records: str | os.PathLike | None = None,
    packed: bool = False,
    threads: int | None = None,
    seed: int = 0,
    *,
    name: str | None = None,
    round_measurements: int = 16,
    backend_options: dict[str, Any] | None = None,
    agent_params: dict[str, Any] | None = None,
    compare: bool = False,
    repeat: int = 10,
    progress: Callable[[dict], None] | None = None,
    fast_math: bool = False,
    finalists: int = 3,
    winograd: bool = False,
    attention: bool = False,
) -> CompiledModel:
    """``module`` imported, tuned within ``budget``, compiled for this CPU and checked against PyTorch.

    Args:
        module: a ``torch.nn.Module`` (put in ``eval()`` mode; the model contract is in
            :mod:`~schedule_gym.models.pipeline`: float32, CPU tensors, outputs tensors).
        example_inputs: its positional inputs, a tensor or a tuple of tensors; they fix shapes and dtypes
            and are the inputs of the output check.
        budget: new measurements in all over the model's tasks (spread by the gradient task scheduler);
            0 tunes nothing (every kernel gets the calibrated mock's pick, no measurement).
        backend: ``"tvm"`` (real kernels on this CPU), ``"mock"`` (the calibrated model: quick, no
            hardware) or ``"rpc"``; the model is compiled with TVM whichever measured it.
        agent: a tile agent (:data:`schedule_gym.agents.AGENTS`).
        records: a record file read and appended to: a second call with it measures nothing it holds.
        packed: tune tasks that have a packed template (``batch_matmul-cpu-v4``, ``dense-``, ``conv2d-cpu-v5``,
            ``gemm-cpu-v6``) in that form (each first measures the configs BLIS's analytical model picks for this
            CPU: ``tune_model``'s ``analytical``).
        threads: threads of the kernels, of the measurements and of TVM's runtime (``TVM_NUM_THREADS``
            is set if it is not yet); None keeps the backends' and TVM's defaults.
        seed: the agents' and the task scheduler's seed.
        name: the model's name in messages and the report (default: the module's class name).
        round_measurements: measurements per scheduler round.
        backend_options, agent_params: options of the backend made by name, and of the agent.
        compare: time the compiled model and PyTorch eager on the example inputs (``repeat`` times
            each) and put the medians in ``report.latency_s``.
        progress: called after every tuning round with the scheduler's row.
        finalists: on hardware, each task's this many fastest configs are timed again after tuning and the lowest
            median is built (``tune_model``'s ``finalists``; 0: the fastest tuned measurement, as the records say).
        fast_math: build the softmax, ``exp``, ``tanh``, ``erf`` and GELUs left to TVM with TVM's vectorisable
            approximations (:mod:`~schedule_gym.models.fast_math`); the outputs are checked all the same.
        winograd: compute the 3x3 convolutions (stride 1, padding 1, channels in multiples of 16) as Winograd's
            F(4x4, 3x3): fixed transforms around a tuned batched GEMM, 4x fewer multiplications
            (:mod:`~schedule_gym.models.fixed.winograd`; its rounding stays within the output check).
        attention: compute each ``softmax(Q @ K^T * alpha) @ V`` (causally masked or not) as one fixed kernel
            from the scores to the output (:mod:`~schedule_gym.models.fixed.attention`) instead of two tuned
            batch matmuls with the scaling, mask and softmax between them, and each layer norm with the residual
            sum before it as another (:mod:`~schedule_gym.models.fixed.layer_norm`).

    Raises:
        TypeError: a module or an input that is not a tensor (named).
        ModelImportError: a dtype, device or layout outside the contract, or a module that
            ``torch.export`` or TVM's Relax frontend cannot take (their message, in one line).
        OutputMismatchError: the compiled model's outputs differ from PyTorch's (the largest error named).
    """
    from schedule_gym.backends import BACKENDS
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, schedule_kernels, time_model

    check_compile_options(budget, backend, agent, threads)
    loaded = prepare_model(module, example_inputs, name=name, winograd=winograd, attention=attention)
    label = loaded.spec.name
    if packed:
        loaded = dataclasses.replace(loaded, mapped=loaded.mapped.packed())
    reference, structure = reference_outputs(loaded.spec.module, loaded.spec.inputs, label)
    if threads is not None:
        os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # read once, when TVM's thread pool starts
    options = dict(backend_options or {})
    if threads is not None and BACKENDS[backend].measures_hardware:
        options.setdefault("num_threads", threads)

    mapped = loaded.mapped
    tasks = [TaskOutcome(t.task.name, t.weight, t.task.flops) for t in mapped.tasks]
    new: dict[str, int] = {}
    if budget > 0 and mapped.tasks:
        before = _records_per_task(records)
        result = tune_model(mapped, budget, agent=agent, backend=backend, backend_options=options,
                            records=None if records is None else os.fspath(records), seed=seed,
                            round_measurements=round_measurements, agent_params=agent_params, progress=progress,
                            finalists=finalists)
        after = _records_per_task(records)
        tasks = result.tasks
        for model_task, outcome in zip(mapped.tasks, tasks):
            key = model_task.task.key
            new[outcome.name] = after[key] - before[key] if records is not None else outcome.measurements

    target = host_llvm_target(threads)
    report = CompileReport(label, budget, backend, agent, None if records is None else os.fspath(records), tasks, new,
                           loaded.report_lines(), dict(mapped.report.left))
    configs = {t.name: t.best_config for t in tasks if t.best_config is not None}
    executable = compile_model(schedule_kernels(mapped, configs), target, fast_math=fast_math)
    compiled = CompiledModel(executable, loaded, structure, report, target)
    errors = _checked_errors(label, compiled.run(*loaded.spec.inputs), reference)
    report.max_abs_error = max((e for e, _ in errors), default=0.0)
    report.max_relative_error = max((e / s for e, s in errors), default=0.0)
    if compare:
        import torch

        eager_threads = threads or torch.get_num_threads()
        report.latency_s["compiled"] = float(np.median(time_model(compiled.executable, loaded.spec.inputs, repeat)))
        report.latency_s["torch eager"] = float(np.median(torch_latency(loaded.spec, eager_threads, repeat)))
    return compiled


def _checked_errors(label: str, outputs: list[np.ndarray], reference: list[np.ndarray]) -> list[tuple[float, float]]:
    """Each output's (max |error|, max |output|); raises if the outputs differ from PyTorch's beyond tolerance."""
    wrong = check_outputs(outputs, reference)
    if wrong is None:
        return output_errors(outputs, reference)
    if len(outputs) == len(reference) and all(o.shape == r.shape for o, r in zip(outputs, reference)):
        errors = output_errors(outputs, reference)
        worst = max(range(len(errors)), key=lambda i: errors[i][0] / errors[i][1])
        err, scale = errors[worst]
        wrong = (f"output {worst}: max |error| {err:.3g} is {err / scale:.3g} of its largest value {scale:.3g} "
                 f"(tolerance {RELATIVE_TOLERANCE:g})")
    raise OutputMismatchError(f"model {label!r}: the compiled model's outputs differ from PyTorch's on the example "
                              f"inputs: {wrong}")
