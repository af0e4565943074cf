"""A ``torch.compile`` backend: every graph TorchDynamo captures runs as a tuned TVM build.

Two spellings, the same backend::

    fast = torch.compile(model, backend=torch_backend(budget=64, records="runs/model.jsonl"), dynamic=False)
    fast = torch.compile(model, backend="schedule_gym", options={"budget": 64, "records": "runs/model.jsonl"},
                         dynamic=False)

(the name is registered through the ``torch_dynamo_backends`` entry point of the installed package).
The options are :func:`~schedule_gym.models.compiled.compile_torch`'s keywords. Each graph is compiled
by :func:`~schedule_gym.models.compiled.compile_torch` on the example inputs Dynamo hands over: tuned
within ``budget`` measurements (the budget is per graph; graphs share the record file, so a second run,
or a second graph with the same layers, measures nothing again), compiled and checked against the graph
run eagerly on those inputs (a wrong build raises).

How a Dynamo graph is imported: Dynamo passes parameters and buffers to the graph as inputs (static
inputs), while the mapping's patterns need weights as constants. The backend binds the static inputs'
values at compile time into a module around the graph and imports that module with ``torch.export``
and TVM's ``from_exported_program``, the importer ``compile_torch`` uses (TVM's ``from_fx``, which
``tvm.relax.frontend.torch.relax_dynamo`` uses, would keep weights as inputs and produce a graph the
canonical form was not written for). Weights are therefore read once: a call whose static inputs are
other tensors, or were changed in place, runs eagerly (with a warning); ``torch._dynamo.reset()``
compiles again.

A graph runs in eager PyTorch, with a warning naming why, when it cannot be compiled: ``torch.export``
or the Relax frontend refuses it, a dtype or device outside the model contract, symbolic (dynamic)
shapes (pass ``dynamic=False``), a graph that needs gradients (compile for inference: call the model
under ``torch.no_grad()`` or ``torch.inference_mode()``), or a TVM build failure.
"""

from __future__ import annotations

import inspect
import itertools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from schedule_gym.models.compiled import CompiledModel, check_compile_options, compile_torch
from schedule_gym.models.importer import ModelImportError
from schedule_gym.models.pipeline import OutputMismatchError

__all__ = ["schedule_gym_backend", "torch_backend"]

_GRAPHS = itertools.count()


def torch_backend(budget: int, **options: Any) -> Callable[[Any, Sequence[Any]], Callable[..., Any]]:
    """A ``torch.compile`` backend that compiles each graph with ``compile_torch(graph, inputs, budget, **options)``.

    Bad options raise here (``ValueError``; an unknown option ``TypeError``), before any graph is captured.
    """
    if "name" in options:
        raise TypeError("torch_backend names its graphs itself; drop name=")
    try:
        given = inspect.signature(compile_torch).bind(None, None, budget, **options)
    except TypeError as exc:
        raise TypeError(f"bad torch_backend options {sorted(options)}: {exc}") from None
    given.apply_defaults()
    args = given.arguments
    check_compile_options(args["budget"], args["backend"], args["agent"], args["threads"])

    def backend(graph: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return _compile_graph(graph, list(example_inputs), budget, options)

    return backend


def schedule_gym_backend(graph: Any, example_inputs: Sequence[Any], *, options: dict[str, Any] | None = None,
                         mode: str | None = None) -> Callable[..., Any]:
    """The backend registered as ``"schedule_gym"``: ``torch.compile(model, backend="schedule_gym",
    options={"budget": 64, ...})``; ``options`` are :func:`torch_backend`'s (``budget`` is required)."""
    if mode is not None:
        raise ValueError(f"the schedule_gym backend has no modes, got mode={mode!r}; pass options={{'budget': ...}}")
    options = dict(options or {})
    if "budget" not in options:
        raise ValueError("the schedule_gym backend needs options={'budget': N}: N measurements per graph "
                         "(0 compiles with the calibrated mock's picks, measuring nothing)")
    return torch_backend(**options)(graph, example_inputs)


def _static_input(node: Any) -> bool:
    """Whether a placeholder is a parameter or buffer Dynamo passes as an input (its static-input mark)."""
    return bool(node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type"))


def _eager(graph: Any, why: str) -> Callable[..., Any]:
    warnings.warn(f"schedule_gym: a graph runs in eager PyTorch: {why}", RuntimeWarning, stacklevel=2)
    return graph.forward


def _unsupported(placeholders: list[Any], example_inputs: list[Any]) -> str | None:
    from torch._subclasses.fake_tensor import FakeTensor

    if len(placeholders) != len(example_inputs):
        return f"{len(example_inputs)} example inputs for {len(placeholders)} graph inputs"
    for node, x in zip(placeholders, example_inputs):
        if not isinstance(x, torch.Tensor):
            return f"graph input {node.name!r} is a {type(x).__name__} (symbolic shapes? pass dynamic=False)"
        if isinstance(x, FakeTensor):
            return f"graph input {node.name!r} is a fake tensor: compiling needs real example inputs"
        if any(not isinstance(d, int) for d in x.shape):
            return f"graph input {node.name!r} has a symbolic shape {tuple(x.shape)}: pass dynamic=False"
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return ("the graph needs gradients; schedule_gym compiles inference graphs (call the model under "
                "torch.no_grad() or torch.inference_mode())")
    return None


def _compile_graph(graph: Any, example_inputs: list[Any], budget: int, options: dict[str, Any]) -> Callable[..., Any]:
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    why = _unsupported(placeholders, example_inputs)
    if why is not None:
        return _eager(graph, why)
    static = {i: x for i, (node, x) in enumerate(zip(placeholders, example_inputs)) if _static_input(node)}
    inputs = tuple(x for i, x in enumerate(example_inputs) if i not in static)
    if not inputs:
        return _eager(graph, "the graph has no inputs besides parameters and buffers")
    name = f"dynamo graph {next(_GRAPHS)}"
    try:
        compiled = compile_torch(_BoundGraph(graph, static, len(example_inputs)), inputs, budget, name=name, **options)
    except OutputMismatchError:
        raise  # a wrong build is a bug to report, not a graph to run eagerly
    except (ModelImportError, TypeError, RuntimeError) as exc:  # TVM raises built-in types (RuntimeError)
        return _eager(graph, str(exc))  # the message names the graph
    return _GraphRunner(graph, compiled, static)


class _BoundGraph(torch.nn.Module):
    """A Dynamo graph with its static inputs bound as buffers: ``forward`` takes the other inputs."""

    def __init__(self, graph: Any, static: dict[int, Any], arity: int) -> None:
        super().__init__()
        self.graph_module, self.arity = graph, arity
        self.bound: dict[int, str] = {}
        for i, tensor in static.items():
            self.register_buffer(f"static_{i}", tensor.detach())
            self.bound[i] = f"static_{i}"

    def forward(self, *inputs: Any) -> Any:
        given = iter(inputs)
        return self.graph_module(*[getattr(self, self.bound[i]) if i in self.bound else next(given)
                                   for i in range(self.arity)])


class _GraphRunner:
    """Runs the compiled graph while its static inputs are the tensors bound at compile time, unchanged."""

    def __init__(self, graph: Any, compiled: CompiledModel, static: dict[int, Any]) -> None:
        self.graph, self.compiled = graph, compiled
        self.static = static
        self.versions = {i: t._version for i, t in static.items()}
        self.warned = False

    def __call__(self, *args: Any) -> Any:
        for i, tensor in self.static.items():
            if args[i] is not tensor or args[i]._version != self.versions[i]:
                if not self.warned:
                    self.warned = True
                    warnings.warn(f"schedule_gym: {self.compiled.report.model} runs in eager PyTorch: its weights "
                                  "changed after it was compiled (torch._dynamo.reset() compiles again)",
                                  RuntimeWarning, stacklevel=2)
                return self.graph(*args)
        return self.compiled(*[a for i, a in enumerate(args) if i not in self.static])
