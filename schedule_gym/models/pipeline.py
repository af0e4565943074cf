"""A model from import to a checked, timed, tuned build: what ``tune-model``, ``compile_torch`` and the
benchmark run.

* :func:`prepare_model`: any ``nn.Module`` with example inputs, checked against the contract below,
  imported (canonical Relax), its LSTM grid mapped to the fused form (:mod:`~schedule_gym.models.lstm`,
  where the model has one) and its sub-graphs mapped to tasks (:func:`~schedule_gym.models.mapping.map_model`).
* :func:`load_model`: the same for a zoo name (:mod:`~schedule_gym.models.zoo`) or a factory reference
  ``package.module:factory`` (:func:`model_from_factory`).
* :func:`reference_outputs` / :func:`check_outputs`: PyTorch's outputs, and a compiled model's against them.
* :func:`torch_latency`: PyTorch eager latency with a given number of threads.

The model contract: a ``torch.nn.Module`` (run in ``eval()`` mode: inference graphs are imported) and
its positional example inputs, a tensor or a tuple of tensors, all on the CPU; they fix every shape and
dtype. Floating-point inputs, parameters, buffers and outputs are ``float32`` (the dtype the templates
tune and :data:`RELATIVE_TOLERANCE` is set for); integer and bool inputs (token ids, masks) are allowed.
The outputs are a tensor or any nesting of tuples, lists and dicts of tensors. A value outside the
contract raises ``TypeError`` (not a tensor) or :class:`~schedule_gym.models.importer.ModelImportError`
(dtype, device, layout; what ``torch.export`` or the Relax frontend refused), naming the value.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedule_gym.models.fixed import ATTENTION_FOLDS, DEFAULT_FOLDS
from schedule_gym.models.importer import ModelImportError, import_model
from schedule_gym.models.mapping import MappedModel, map_model

__all__ = [
    "SUPPORTED_DTYPES",
    "MAX_SPREAD",
    "RETIMES",
    "LoadedModel",
    "OutputMismatchError",
    "check_outputs",
    "example_inputs_of",
    "interleaved",
    "load_model",
    "model_from_factory",
    "output_errors",
    "prepare_model",
    "reference_outputs",
    "spread",
    "summary",
    "torch_latency",
    "torch_outputs",
]

#: seconds :func:`torch_latency` sleeps before it times PyTorch, so that TVM's thread-pool workers, which spin
#: (yielding) for a while once idle, are asleep and leave the cores to PyTorch
SETTLE_S = 1.0

#: the tensor dtypes a model may have: float32 for every floating-point tensor, integers and bool for inputs
SUPPORTED_DTYPES = ("float32", "int32", "int64", "bool")

#: outputs must agree with PyTorch's to this fraction of the largest |output| (float32 kernels that sum
#: thousands of products in another order differ by ~1e-6 relative; a wrong kernel differs by O(1))
RELATIVE_TOLERANCE = 1e-4


class OutputMismatchError(RuntimeError):
    """A compiled model whose outputs differ from PyTorch's; the message names the output and its error."""


@dataclass
class LoadedModel:
    """A model ready to tune: its spec (module, inputs), canonical module, mapping and LSTM report."""

    spec: Any
    canonical: Any  # the canonical Relax module before mapping (the "TVM default" baseline builds it)
    mapped: MappedModel
    premapped: Any  # the module that was mapped: the canonical one, with the LSTM cells mapped if any
    lstm: Any = None  # the LSTM mapping's report, if the model has LSTM cells

    def remap(self, **options: Any) -> MappedModel:
        """The model mapped again with other :func:`~schedule_gym.models.mapping.map_model` options
        (``winograd=True``, ``residual=False``), its LSTM cells mapped as before."""
        return map_model(self.premapped, **options)

    def report_lines(self) -> list[str]:
        lines = []
        if self.lstm is not None:
            lines += [f"lstm     {line}" for line in _lines(self.lstm)]
        return lines + self.mapped.report.lines()


def _lines(report: Any) -> list[str]:
    if hasattr(report, "lines"):
        return list(report.lines())
    return [str(report)]


def load_model(name: str, seed: int = 0, map_lstm: bool = True, winograd: bool = False,
               attention: bool = False) -> LoadedModel:
    """Build, import and map a zoo model (see :data:`schedule_gym.models.zoo.MODELS`), or a model of your
    own named ``package.module:factory`` (:func:`model_from_factory`; ``seed`` is then unused); ``winograd``
    and ``attention``: :func:`prepare_model`'s."""
    if ":" in name:
        spec = model_from_factory(name)
    else:
        from schedule_gym.models.zoo import MODELS, build_model

        if name not in MODELS:
            raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}, "
                             "or package.module:factory for a model of your own")
        spec = build_model(name, seed=seed)
    return prepare_model(spec.module, spec.inputs, name=spec.name, map_lstm=map_lstm, description=spec.description,
                         winograd=winograd, attention=attention)


def model_from_factory(reference: str) -> Any:
    """The :class:`~schedule_gym.models.zoo.ModelSpec` of ``reference``, ``"package.module:factory"``:
    ``factory`` is a callable of no arguments that returns ``(module, example_inputs)`` (the module
    contract). The current directory is searched first (a ``mymodels.py`` next to you is found)."""
    from schedule_gym.models.zoo import ModelSpec

    module_name, _, attr = reference.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"model reference {reference!r} is not package.module:factory")
    path = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        py_module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"model reference {reference!r}: cannot import {module_name!r} ({exc})") from None
    finally:
        sys.path[:] = path
    factory = py_module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ValueError(f"model reference {reference!r}: {module_name!r} has no attribute {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise TypeError(f"model reference {reference!r}: {attr!r} is a {type(factory).__name__}, not a callable")
    made = factory()
    if not isinstance(made, tuple) or len(made) != 2:
        raise TypeError(f"model reference {reference!r}: the factory returned a {type(made).__name__}; "
                        "it must return (module, example_inputs)")
    module, inputs = made
    return ModelSpec(reference, module, example_inputs_of(inputs), f"{type(module).__name__} from {reference}")


def example_inputs_of(example_inputs: Any) -> tuple[Any, ...]:
    """``example_inputs`` (a tensor, or a tuple or list of tensors) as a tuple; ``TypeError`` names the first
    value that is not a tensor."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError(f"example_inputs must be a tensor or a tuple of tensors (the positional inputs), got a "
                        f"{type(example_inputs).__name__}")
    if not example_inputs:
        raise TypeError("example_inputs is empty: the model needs at least one tensor input")
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"example_inputs[{i}] is a {type(x).__name__}, not a torch.Tensor")
    return tuple(example_inputs)


def _check_tensor(label: str, what: str, t: Any) -> None:
    import torch

    dtype = str(t.dtype).removeprefix("torch.")
    if t.layout != torch.strided or t.is_quantized:
        raise ModelImportError(f"model {label!r}: {what} is a {t.layout} {'quantized ' if t.is_quantized else ''}"
                               "tensor; schedule-gym compiles dense tensors")
    if t.device.type != "cpu":
        raise ModelImportError(f"model {label!r}: {what} is on {t.device}; schedule-gym compiles for this CPU "
                               "(move the model and its inputs with .cpu())")
    allowed = ("float32",) if t.is_floating_point() or t.is_complex() else SUPPORTED_DTYPES
    if dtype not in allowed:
        raise ModelImportError(f"model {label!r}: {what} has dtype {dtype}; schedule-gym compiles float32 models "
                               "(integer and bool inputs allowed): convert with .float()")


def prepare_model(module: Any, example_inputs: Any, name: str | None = None, map_lstm: bool = True,
                  description: str | None = None, winograd: bool = False, attention: bool = False) -> LoadedModel:
    """Check ``module`` and ``example_inputs`` against the model contract (module docstring), import and map
    them; ``name`` (default: the module's class name) and ``description`` label the model in messages;
    ``winograd`` maps the 3x3 convolutions as Winograd's F(4x4, 3x3) (``map_model``'s); ``attention`` makes each
    ``softmax(Q @ K^T * alpha) @ V`` one fixed kernel (:mod:`~schedule_gym.models.fixed.attention`) instead of
    two batch-matmul tasks and the operators between them, and each layer norm with the residual sum before it
    another (:data:`~schedule_gym.models.fixed.ATTENTION_FOLDS`)."""
    import torch

    from schedule_gym.models.zoo import ModelSpec

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got a {type(module).__name__}")
    inputs = example_inputs_of(example_inputs)
    label = name or type(module).__name__
    for i, x in enumerate(inputs):
        _check_tensor(label, f"input {i}", x)
    for what, tensors in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for key, t in tensors:
            if t.is_floating_point() or t.is_complex() or t.device.type != "cpu":
                _check_tensor(label, f"{what} {key!r}", t)
    spec = ModelSpec(label, module.eval(), inputs, description or type(module).__name__)
    canonical = import_model(spec.module, spec.inputs, name=label)
    mod, lstm_report = canonical, None
    if map_lstm:
        from schedule_gym.models import lstm

        cells = lstm.find_lstm_cells(canonical)
        if cells:
            mod, lstm_report = lstm.map_lstm(canonical)
    folds = ATTENTION_FOLDS if attention else DEFAULT_FOLDS
    return LoadedModel(spec, canonical, map_model(mod, winograd=winograd, fixed_kernels=folds), mod, lstm_report)


def reference_outputs(module: Any, inputs: tuple[Any, ...], label: str = "model") -> tuple[list[np.ndarray], Any]:
    """PyTorch's outputs of ``module(*inputs)`` flattened to arrays, and their structure (a pytree spec);
    an output outside the contract raises, naming it."""
    import torch
    from torch.utils import _pytree as pytree

    with torch.no_grad():
        out = module(*inputs)
    leaves, structure = pytree.tree_flatten(out)
    arrays = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"model {label!r}: output {i} is a {type(leaf).__name__}; schedule-gym compiles models "
                            "whose outputs are tensors (in tuples, lists or dicts)")
        _check_tensor(label, f"output {i}", leaf)
        arrays.append(leaf.detach().numpy())
    return arrays, structure


def torch_outputs(spec: Any) -> list[np.ndarray]:
    """PyTorch's outputs of a model spec (``module``, ``inputs``), flattened to arrays."""
    return reference_outputs(spec.module, spec.inputs, spec.name)[0]


def output_errors(outputs: list[np.ndarray], reference: list[np.ndarray]) -> list[tuple[float, float]]:
    """(max |error|, max |output|) of each output against PyTorch's (the shapes must agree)."""
    errors = []
    for out, ref in zip(outputs, reference):
        scale = float(np.max(np.abs(ref), initial=0.0)) or 1.0
        err = float(np.max(np.abs(out.astype(np.float64) - ref), initial=0.0))
        errors.append((err, scale))
    return errors


def check_outputs(outputs: list[np.ndarray], reference: list[np.ndarray]) -> str | None:
    """None if every output matches PyTorch's within :data:`RELATIVE_TOLERANCE` of its largest value."""
    if len(outputs) != len(reference):
        return f"{len(outputs)} outputs, PyTorch gives {len(reference)}"
    for i, (out, ref) in enumerate(zip(outputs, reference)):
        if out.shape != ref.shape:
            return f"output {i}: shape {out.shape}, PyTorch's {ref.shape}"
    for i, (err, scale) in enumerate(output_errors(outputs, reference)):
        if not err <= RELATIVE_TOLERANCE * scale:
            return f"output {i}: max |error| {err:.3g} exceeds {RELATIVE_TOLERANCE:g} x max |output| {scale:.3g}"
    return None


def torch_latency(spec: Any, threads: int, repeat: int = 10, min_seconds: float = 0.2,
                  settle_s: float = SETTLE_S) -> list[float]:
    """Seconds per forward pass of PyTorch eager with ``threads`` threads: ``repeat`` means over at
    least ``min_seconds`` each, after one warm-up run.

    It first sleeps ``settle_s``: after a TVM run in this process TVM's idle thread-pool workers spin before they
    sleep, and PyTorch timed among them ran up to twice as slow as alone (ResNet-18 on a Zen 3:
    ``examples/benchmarks/torch_after_tvm.py``). Stopping their spinning instead (``TVM_THREAD_POOL_SPIN_COUNT=0``)
    made TVM's own builds of small kernels twice as slow (BERT-tiny), so TVM keeps its default and PyTorch waits.
    """
    import torch

    time.sleep(settle_s)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            spec.module(*spec.inputs)
            out = []
            for _ in range(repeat):
                n, start = 0, time.perf_counter()
                while True:
                    spec.module(*spec.inputs)
                    n += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= min_seconds:
                        break
                out.append(elapsed / n)
        return out
    finally:
        torch.set_num_threads(before)


def summary(times: list[float]) -> tuple[float, float]:
    """(min, median) of repeated timings."""
    return min(times), statistics.median(times)


#: a set of timings is disturbed where some label's median exceeds its minimum this much (quiet runs of the models
#: benchmark stay within 1.07, up to 1.23 on the smallest models); :func:`interleaved` times it again, at most
#: :data:`RETIMES` more times
MAX_SPREAD, RETIMES = 1.25, 2


def spread(times: list[float]) -> float:
    """Median over min of repeated timings: near 1 on a quiet machine, large where something disturbed them."""
    return statistics.median(times) / min(times)


def interleaved(timers: Mapping[str, Callable[[], float]], rounds: int, max_spread: float | None = None,
                retries: int = 0) -> tuple[dict[str, list[float]], int]:
    """``rounds`` timings of each ``timers[label]()`` (seconds), one of each per round, the order rotated each
    round, so a slow phase of the machine falls on every label alike; and how many times the set was timed.

    Side-by-side ratios are only as good as the quietest set: with ``max_spread``, a set in which some label's
    :func:`spread` exceeds it (another job, a frequency change) is timed again, at most ``retries`` more times,
    and the set whose worst spread is smallest is returned.

    >>> calls = []
    >>> interleaved({"a": lambda: calls.append("a") or 1.0, "b": lambda: calls.append("b") or 2.0}, 3), calls
    (({'a': [1.0, 1.0, 1.0], 'b': [2.0, 2.0, 2.0]}, 1), ['a', 'b', 'b', 'a', 'a', 'b'])
    >>> noisy = iter([3.0, 3.0, 1.0] + [1.0, 1.1, 1.0])  # the first set's median is 3x its min
    >>> interleaved({"a": lambda: next(noisy)}, 3, max_spread=1.25, retries=2)
    ({'a': [1.0, 1.1, 1.0]}, 2)
    """
    if rounds < 1 or retries < 0 or (max_spread is not None and not max_spread >= 1):
        raise ValueError(f"rounds must be >= 1, retries >= 0 and max_spread >= 1 (or None), got rounds={rounds!r}, "
                         f"retries={retries!r}, max_spread={max_spread!r}")
    labels = list(timers)
    best: dict[str, list[float]] = {}
    for attempt in range(1, retries + 2):
        out: dict[str, list[float]] = {label: [] for label in labels}
        for turn in range(rounds):
            shift = turn % len(labels)
            for label in labels[shift:] + labels[:shift]:
                out[label].append(timers[label]())
        worst = max(spread(ts) for ts in out.values())
        if not best or worst < max(spread(ts) for ts in best.values()):
            best = out
        if max_spread is None or worst <= max_spread:
            break
    return best, attempt
