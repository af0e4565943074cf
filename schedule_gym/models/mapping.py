"""Optimization mapping (Xiao et al., "Optimization Mapping for Deep Learning", Section 2).

Sub-graphs of a model's data-flow graph (a canonical Relax module, :mod:`~schedule_gym.models.importer`)
are found by **pattern** and mapped to an **implementation**. A pattern is data, as the paper's
Figure 3b: a ``cell`` (operators and their topology; inputs name other nodes of the cell, ``"*"`` any
value, ``"const"`` a constant), an ``op_type`` (the implementation and its parameters) and, for recurrent
patterns, a ``cell_input``. Users add patterns with :meth:`Pattern.from_dict`; an unknown operator in a
pattern is an error naming it.

Matching works on canonical forms (the importer folds batch norm and constants), and commutative
operators (``add``, ``multiply``) match either operand order, so ``add(bias, matmul)`` (what the PyTorch
frontend emits for ``Linear``) and ``add(matmul, bias)`` are one pattern. Matching runs from each
candidate output back to its inputs (TVM's ``relax.dpl``), largest patterns first. A match whose inner
values are also used outside it is not mapped (it would compute them twice).

The implementations are schedule-gym operators: each operator's module in :mod:`schedule_gym.operators`
states its patterns (as plain data) and its implementation, which maps a match to a task and its kernel's
arguments (``conv2d`` and ``dense`` with bias and activation, ``batch_matmul`` of two computed operands...).
Each match becomes a ``call_tir`` of the task's own kernel (its workload's definition, scheduled later by
the template with the tuned config); reshapes adapt leading dimensions. A few operators that TVM lowers
poorly and that have nothing to tune get a fixed kernel instead (:mod:`schedule_gym.models.fixed`). What is
not mapped is left to TVM, and the :class:`MappingReport` says which operators those are and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from schedule_gym.errors import TaskError
from schedule_gym.models.bindings import Bindings
from schedule_gym.models.fixed import DEFAULT_FOLDS, fold_fixed
from schedule_gym.models.symbols import add_kernel
from schedule_gym.operators import OPERATORS, get_workload, packed_task
from schedule_gym.operators.graph import ANY, CONST, Refusal, shape_of
from schedule_gym.tasks.task import Task
from schedule_gym.templates import has_packed_template

__all__ = [
    "DEFAULT_PATTERNS",
    "IMPLEMENTATIONS",
    "MappedModel",
    "MappingReport",
    "ModelTask",
    "OpNode",
    "Pattern",
    "PatternError",
    "map_model",
]

#: operators whose two operands may come in either order
COMMUTATIVE = frozenset({"add", "multiply"})


class PatternError(ValueError):
    """A pattern that cannot be used (an unknown operator or node, a malformed cell)."""


@dataclass(frozen=True)
class OpNode:
    """One operator of a cell: a Relax operator (``"nn.conv2d"``, ``"add"``...) applied to ``inputs``."""

    op: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Pattern:
    """A sub-graph to find and the implementation that replaces it (the paper's Figure 3b).

    Args:
        name: the pattern's name (reports, errors).
        cell: ``(node name, OpNode)`` pairs in topological order; the last node is the cell's output.
        op_type: the implementation: an operator's name (a key of :data:`IMPLEMENTATIONS`).
        params: the implementation's parameters (``(("activation", "relu"),)``).
        cell_input: for recurrent patterns, the nodes that take another cell's output (used by the
            recurrent mappings, e.g. :mod:`schedule_gym.models.lstm`); empty for a fixed operator set.
    """

    name: str
    cell: tuple[tuple[str, OpNode], ...]
    op_type: str
    params: tuple[tuple[str, Any], ...] = ()
    cell_input: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.cell:
            raise PatternError(f"pattern {self.name!r} has an empty cell")
        known: set[str] = set()
        for node_name, node in self.cell:
            if node_name in (ANY, CONST) or node_name in known:
                raise PatternError(f"pattern {self.name!r}: node name {node_name!r} is reserved or repeated")
            _check_op(self.name, node.op)
            for arg in node.inputs:
                if arg not in (ANY, CONST) and arg not in known:
                    raise PatternError(f"pattern {self.name!r}: node {node_name!r} reads {arg!r}, which is not an "
                                       f"earlier node of the cell (nor {ANY!r} or {CONST!r})")
            known.add(node_name)
        for name in self.cell_input:
            if name not in known:
                raise PatternError(f"pattern {self.name!r}: cell_input {name!r} is not a node of the cell")

    @property
    def output(self) -> str:
        return self.cell[-1][0]

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pattern:
        """A pattern from plain data, as the paper's Figure 3b::

            {"name": "conv-relu", "op_type": {"type": "conv2d", "activation": "relu"},
             "cell": [{"name": "conv", "op": "nn.conv2d", "inputs": ["*", "const"]},
                      {"name": "act", "op": "nn.relu", "inputs": ["conv"]}],
             "cell_input": []}
        """
        if not isinstance(data, Mapping):
            raise PatternError(f"a pattern must be a mapping, got {type(data).__name__}")
        missing = [k for k in ("name", "op_type", "cell") if k not in data]
        if missing:
            raise PatternError(f"pattern {data.get('name', '?')!r} lacks {missing}")
        op_type = data["op_type"]
        if isinstance(op_type, str):
            op_type = {"type": op_type}
        if not isinstance(op_type, Mapping) or "type" not in op_type:
            raise PatternError(f"pattern {data['name']!r}: op_type must be a name or a mapping with 'type'")
        try:
            cell = tuple((str(n["name"]), OpNode(str(n["op"]), tuple(str(i) for i in n["inputs"]))) for n in data["cell"])
        except (KeyError, TypeError) as exc:
            raise PatternError(f"pattern {data['name']!r}: every cell node needs name, op and inputs ({exc})") from None
        params = tuple(sorted((str(k), v) for k, v in op_type.items() if k != "type"))
        return cls(str(data["name"]), cell, str(op_type["type"]), params, tuple(data.get("cell_input", ())))

    def compile(self, constant_nodes: Sequence[str] = (), name_inputs: bool = False) -> tuple[Any, dict[str, Any]]:
        """The ``relax.dpl`` pattern of the cell's output, and the pattern of every node by name; the nodes
        named in ``constant_nodes`` may also be a constant (a recurrent input folded at the first step). With
        ``name_inputs``, the ``i``-th :data:`ANY` input of node ``x`` is there too, as ``"x:i"`` (the value it
        matched, in either order of a commutative node's operands)."""
        from tvm.relax.dpl import is_const, is_op, wildcard

        nodes: dict[str, Any] = {}
        for node_name, node in self.cell:
            args = [wildcard() if a == ANY else is_const() if a == CONST else nodes[a] for a in node.inputs]
            if name_inputs:
                nodes.update((f"{node_name}:{i}", arg) for i, arg in enumerate(args) if node.inputs[i] == ANY)
            op = is_op(f"relax.{node.op}")
            pat = op(*args)
            if node.op in COMMUTATIVE and len(args) == 2:
                pat = pat | op(args[1], args[0])
            if node_name in constant_nodes:
                pat = pat | is_const()
            nodes[node_name] = pat
        return nodes[self.output], nodes


def _check_op(pattern: str, op: str) -> None:
    import tvm

    try:
        tvm.ir.Op.get(f"relax.{op}")
    except Exception:
        raise PatternError(f"pattern {pattern!r} refers to unknown operator {op!r} (no relax.{op} in TVM)") from None


# ----------------------------------------------------------------------------- the operators' patterns
#: op_type -> ``implement(pattern parameters, matched Relax calls by node name) -> (task, kernel arguments)``:
#: the implementation of every operator that states one
IMPLEMENTATIONS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[Task, tuple[Any, ...]]]] = {
    op.name: op.implement for op in OPERATORS.values() if op.implement is not None
}

DEFAULT_PATTERNS: tuple[Pattern, ...] = ()  # filled on first use (building patterns needs TVM)


def default_patterns() -> tuple[Pattern, ...]:
    """Every operator's patterns, in registry order (:func:`map_model` tries larger cells first, and among cells
    of one size the earlier operators': a matmul by a constant is a dense layer before it is a batch matmul)."""
    global DEFAULT_PATTERNS
    if not DEFAULT_PATTERNS:
        DEFAULT_PATTERNS = tuple(Pattern.from_dict(p) for op in OPERATORS.values() for p in op.patterns)
    return DEFAULT_PATTERNS


# ----------------------------------------------------------------------------- the mapped model
@dataclass
class ModelTask:
    """A task of a model: its kernel's global name in the module and how many times the model runs it."""

    task: Task
    function: str
    weight: int
    patterns: list[str] = field(default_factory=list)


@dataclass
class MappingReport:
    """Which sub-graphs were mapped (pattern -> count), which operators are left to TVM and why."""

    matched: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)  # (pattern, reason) -> count
    left: Counter = field(default_factory=Counter)  # operator -> count of calls left to TVM
    fixed: Counter = field(default_factory=Counter)  # form -> count of sub-graphs given a fixed kernel
    winograd: Counter = field(default_factory=Counter)  # form -> count of convolutions made Winograd's three steps

    def lines(self) -> list[str]:
        out = [f"mapped   {count:>4} x {name}" for name, count in sorted(self.matched.items())]
        out += [f"fixed    {count:>4} x {form}: one vectorised kernel, not tuned"
                for form, count in sorted(self.fixed.items())]
        out += [f"winograd {count:>4} x {form}: F(4x4, 3x3), fixed transforms around a batch matmul"
                for form, count in sorted(self.winograd.items())]
        out += [f"refused  {count:>4} x {pat}: {why}" for (pat, why), count in sorted(self.refused.items())]
        for op, count in sorted(self.left.items()):
            why = "a match no pattern took (see refused)" if op in _MATCHED_OPS else "no pattern maps it (TVM default lowering)"
            out.append(f"left     {count:>4} x {op}: {why}")
        return out


#: the Relax operators that the operators' patterns map (their cells' main node)
_MATCHED_OPS = frozenset(f"relax.{node['op']}" for op in OPERATORS.values() for p in op.patterns for node in p["cell"]
                         if node["name"] == "main")


@dataclass
class MappedModel:
    """A canonical Relax module whose mapped sub-graphs call the tasks' kernels (not yet scheduled)."""

    mod: Any
    tasks: list[ModelTask]
    report: MappingReport

    def task_weights(self) -> dict[str, int]:
        return {t.task.name: t.weight for t in self.tasks}

    @property
    def flops(self) -> int:
        """The floating-point operations of one pass in the tasks' kernels (:attr:`Task.flops` times the calls):
        the arithmetic that bounds the model's latency from below at the machine's FMA peak (the operators left
        to TVM are not counted; in a :meth:`packed` model, the padded extents are)."""
        return sum(t.task.flops * t.weight for t in self.tasks)

    def kernel_tasks(self) -> dict[str, str]:
        """The task each kernel function is scheduled for, by the function's symbol."""
        return {t.function: t.task.name for t in self.tasks}

    def packed(self, pad: bool = True, views: bool = True) -> MappedModel:
        """The same model with every task that has a packed form (GEMM, dense, batch matmul, NHWC conv2d with
        at least four output channels a group or depthwise: :func:`schedule_gym.operators.packed_task`) in it, so
        that tuning and building use its packed CPU template. With ``pad``, dense layers and batch matmuls whose rows or
        columns have no small divisor are first given padded extents, and pointwise convolutions on maps of an odd
        width become one row of pixels (:func:`schedule_gym.models.padding.pad_odd_extents`: their kernels are
        new functions, called on reshaped and padded operands; ``views``: results whose padded rows alone are dropped
        are views, not copies); the other kernels keep their names."""
        mapped = self
        if pad:
            from schedule_gym.models.padding import pad_odd_extents

            mapped = pad_odd_extents(self, views)
        tasks = [dataclasses.replace(t, task=packed_task(t.task)) if has_packed_template(t.task) else t
                 for t in mapped.tasks]
        return dataclasses.replace(mapped, tasks=tasks)


def map_model(mod: Any, patterns: Sequence[Pattern] | None = None,
              fixed_kernels: bool | Sequence[str] = True, winograd: bool = False,
              residual: bool = True) -> MappedModel:
    """Map the sub-graphs of ``mod``'s ``main`` that ``patterns`` find (default: :func:`default_patterns`).

    Every match an implementation takes becomes a ``call_tir`` of its task's kernel; identical tasks share
    one kernel (its weight counts the call sites). Patterns are tried largest first. Then the operators
    :mod:`schedule_gym.models.fixed` has a kernel for become calls of those kernels: ``fixed_kernels`` names the
    folds (``("concat", "layer_norm", "attention")``; True: :data:`~schedule_gym.models.fixed.DEFAULT_FOLDS`, the
    concatenations with the affine map and ReLU after them; False: none, TVM's default lowering); the attention's
    applies before the patterns, which would otherwise take its matmuls.
    ``winograd`` first rewrites the 3x3 convolutions :func:`~schedule_gym.models.fixed.winograd.fold_winograd`
    takes as Winograd's F(4x4, 3x3), whose batched GEMM the patterns then map (a ``batch_matmul`` task).
    ``residual=False`` leaves out the patterns that take a residual add (and the activation after it) into a
    convolution's epilogue: the add is then left to TVM.
    """
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    pats = list(default_patterns() if patterns is None else patterns)
    for p in pats:
        if not isinstance(p, Pattern):
            raise TypeError(f"patterns must be Pattern objects, got {type(p).__name__}")
        if p.op_type not in IMPLEMENTATIONS:
            raise PatternError(f"pattern {p.name!r}: unknown op_type {p.op_type!r}; known: {', '.join(IMPLEMENTATIONS)}")
    if not residual:
        pats = [p for p in pats if not p.param("residual", False)]
    pats.sort(key=lambda p: -len(p.cell))
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise TaskError("the module has no 'main' function to map")
    report = MappingReport()
    folds = DEFAULT_FOLDS if fixed_kernels is True else (fixed_kernels or ())
    mod, report.fixed = fold_fixed(mod, folds, before_mapping=True)
    if winograd:
        from schedule_gym.models.fixed.winograd import fold_winograd

        mod, report.winograd = fold_winograd(mod)
    func = mod["main"]
    kernels: dict[str, tuple[Any, ModelTask]] = {}  # task name -> (GlobalVar, ModelTask)
    builder = relax.BlockBuilder(mod)  # adds the kernels, giving their GlobalVars the PrimFunc's type
    for pattern in pats:
        root, nodes = pattern.compile(name_inputs=True)
        bindings = Bindings(func)

        def rewriter(expr: Any, matched: Mapping[Any, Any], pattern: Pattern = pattern, nodes: dict = nodes,
                     bindings: Bindings = bindings) -> Any:
            # a named input ("node:i") matched through a binding is its value: the kernel takes the variable
            by_name = {name: bindings.bound.get(matched[pat], matched[pat]) if ":" in name else matched[pat]
                       for name, pat in nodes.items() if pat in matched}
            inner = [v for name, v in by_name.items() if name != pattern.output and ":" not in name]
            if bindings.used_elsewhere(inner):
                report.refused[(pattern.name, "an inner value is used outside the match")] += 1
                return expr
            try:
                task, args = IMPLEMENTATIONS[pattern.op_type](dict(pattern.params), by_name)
            except Refusal as why:
                report.refused[(pattern.name, str(why))] += 1
                return expr
            except (ValueError, TypeError) as exc:  # the task builder refused the shape
                report.refused[(pattern.name, str(exc))] += 1
                return expr
            name = task.name
            if name not in kernels:
                symbol, gvar = add_kernel(builder, task)
                kernels[name] = (gvar, ModelTask(task, symbol, 0))
            gvar, model_task = kernels[name]
            model_task.weight += 1
            if pattern.name not in model_task.patterns:
                model_task.patterns.append(pattern.name)
            report.matched[pattern.name] += 1
            out_shape = tuple(shape_of(expr))
            kernel_shape = get_workload(task.op).output_shape(task)
            call = relax.call_tir(gvar, list(args), relax.TensorType(kernel_shape, task.dtype))
            return call if tuple(kernel_shape) == out_shape else relax.op.reshape(call, out_shape)

        func = rewrite_call(root, rewriter, func)
    out = builder.get()
    out["main"] = func
    out = relax.transform.Normalize()(out)
    out, after = fold_fixed(out, folds)
    report.fixed.update(after)
    report.left.update(_left_ops(out["main"]))
    return MappedModel(out, [mt for _, mt in kernels.values()], report)


def _left_ops(func: Any) -> Counter:
    """Calls of Relax operators (not of our kernels) left in ``func``; shape-only ops are not counted."""
    from tvm import relax

    counts: Counter = Counter()
    free = {"relax.reshape", "relax.call_tir"}

    @relax.expr_functor.visitor
    class Ops(relax.PyExprVisitor):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> None:
            if isinstance(call.op, tvm_op_type()) and call.op.name not in free:
                counts[call.op.name] += 1
            super().visit_call_(call)

    Ops().visit_expr(func)
    return counts


def tvm_op_type() -> type:
    import tvm

    return tvm.ir.Op
