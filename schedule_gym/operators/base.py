"""The operator interface: one :class:`Operator` per operator states everything the package knows about it.

An operator module (``gemm.py``, ``conv2d.py``...) holds its builder, the parsing of its builder's task names,
its :class:`~schedule_gym.operators.workload.Workload`, its packed form, its PyTorch reference, its CUDA
axes, its model-mapping patterns and implementation and its registered environment, and ends with one
``Operator`` gathering them; the registry (:mod:`schedule_gym.operators`) lists the modules. Everything
above this layer (task names, templates, backends, the model mapping, environments) reads the registry
instead of naming operators.

This module also holds the argument checks the builders share. Nothing here imports TVM or PyTorch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedule_gym.operators.workload import Workload
from schedule_gym.tasks.task import Task, check_positive_int

__all__ = [
    "PAIR_PATTERN",
    "REDUCTION_SPLITS",
    "SPATIAL_SPLITS",
    "CudaAxis",
    "Operator",
    "PackedForm",
    "check_bool",
    "pair",
    "pair_of_text",
    "pair_text",
    "split_tuple",
]

#: Default loops per spatial and per reduction dimension: TVM MetaSchedule's CPU structure "SSRSRS"
#: (spatial dimensions split in 4, reductions in 2), which the CPU template's loop order follows.
SPATIAL_SPLITS = 4
REDUCTION_SPLITS = 2


@dataclass(frozen=True)
class CudaAxis:
    """Spatial dimensions fused on one CUDA axis: their block loops on ``blockIdx.<block>``, their
    virtual-thread and thread loops on ``vthread.<thread>`` and ``threadIdx.<thread>``."""

    dims: tuple[str, ...]
    block: str
    thread: str


@dataclass(frozen=True)
class PackedForm:
    """The form of an operator's tasks that its packed CPU template builds: the split count of every
    dimension and the loop order; ``refuse`` raises ValueError naming why a task has no packed form
    (None: every task of the operator has one)."""

    template: str
    splits: Mapping[str, int]
    loop_order: tuple[tuple[str, int], ...]
    refuse: Callable[[Task], None] | None = None

    def accepts(self, task: Task) -> bool:
        """Whether :meth:`apply` can make a packed form of ``task``."""
        try:
            self.check_operator(task)
        except ValueError:
            return False
        return True

    def check_operator(self, task: Task) -> None:
        """Raise ValueError naming why ``task`` has no packed form."""
        if self.refuse is not None:
            self.refuse(task)

    def check_form(self, task: Task, template: str, meaning: str) -> None:
        """Raise ValueError naming the difference if ``task`` (of this operator) is not in this form: its split
        counts (``meaning``: what the factors of each dimension are, for the message) or its loop order."""
        if task.splits != tuple(self.splits.get(d) for d in task.dim_names):
            have = "/".join(map(str, task.splits))
            need = "/".join(str(self.splits.get(d, "?")) for d in task.dim_names)
            raise ValueError(f"template {template!r} needs splits {need} ({meaning}); task {task.name!r} has splits "
                             f"{have}: build it with schedule_gym.operators.packed_task(task)")
        if tuple(task.loop_order) != self.loop_order:
            order = " ".join(f"{d}{level}" for d, level in task.loop_order)
            need = " ".join(f"{d}{level}" for d, level in self.loop_order)
            raise ValueError(f"template {template!r} builds the loop order {need}; task {task.name!r} has {order} "
                             "(build it with schedule_gym.operators.packed_task(task))")

    def apply(self, task: Task) -> Task:
        """``task`` with the packed splits and loop order, named ``<name>-packed`` (idempotent)."""
        self.check_operator(task)
        dims = tuple(dataclasses.replace(d, splits=self.splits[d.name]) for d in task.dims)
        name = task.name if task.name.endswith("-packed") else f"{task.name}-packed"
        return dataclasses.replace(task, name=name, dims=dims, loop_order=self.loop_order)


@dataclass(frozen=True)
class Operator:
    """Everything about one operator (see the module docstring).

    Attributes:
        name: the operator's name, ``Task.op`` of its tasks.
        build: the builder (``conv2d(n, h, w, ci, co, kernel, ...)``); its default task name is the one
            ``parse_name`` reads.
        parse_name: a task name -> the builder's keyword arguments that give a task of that name, or None
            if the name is not one of this operator's.
        workload: the definition a measurement builds, runs and checks.
        ops_per_point: operations per point of the iteration space (what ``Task.flops`` counts): 2 for a
            multiply-add, 1 for a compare or an add.
        templates: the default template name per target kind (``{"llvm": "conv2d-cpu", ...}``).
        packed: the form of the operator's tasks that its packed CPU template builds, or None.
        cuda_axes: the CUDA axes of a task's spatial dimensions (for the CUDA template), or None.
        torch_kernel: ``(task, inputs as torch tensors) -> callable`` computing the task as PyTorch does;
            it imports torch itself.
        patterns: model-mapping patterns as plain data (the paper's Figure 3b form, which
            ``schedule_gym.models.mapping.Pattern.from_dict`` reads), each with ``op_type`` this operator.
        implement: ``(pattern parameters, matched Relax calls by node name) -> (task, kernel arguments)``;
            raises :class:`~schedule_gym.operators.graph.Refusal` for a match it cannot take.
        env_id: the registered environment of the operator (``schedule_gym/Conv2d-v0``), or None.
        env_kwargs: that environment's default builder arguments (plain data).
    """

    name: str
    build: Callable[..., Task]
    parse_name: Callable[[str], dict[str, Any] | None]
    workload: Workload
    templates: Mapping[str, str]
    ops_per_point: int = 2
    packed: PackedForm | None = None
    cuda_axes: Callable[[Task], tuple[CudaAxis, ...]] | None = None
    torch_kernel: Callable[[Task, Sequence[Any]], Callable[[], Any]] | None = None
    patterns: tuple[Mapping[str, Any], ...] = ()
    implement: Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[Task, tuple[Any, ...]]] | None = None
    env_id: str | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workload.op != self.name:
            raise ValueError(f"operator {self.name!r} has the workload of {self.workload.op!r}")
        check_positive_int(self.ops_per_point, f"ops_per_point of operator {self.name!r}")
        for pattern in self.patterns:
            op_type = pattern["op_type"]
            if (op_type if isinstance(op_type, str) else op_type["type"]) != self.name:
                raise ValueError(f"operator {self.name!r} lists pattern {pattern['name']!r} of another operator")

    def task_of_name(self, name: str, **build_kwargs: Any) -> Task | None:
        """The task a name of this operator's builder stands for (``build_kwargs``: e.g. ``dtype``), or None."""
        args = self.parse_name(name)
        return None if args is None else self.build(**args, **build_kwargs)


# ------------------------------------------------------------------------------ shared argument checks
def check_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, got {value!r}")
    return value


def pair(value: object, what: str, minimum: int) -> tuple[int, int]:
    """``value`` (an int or a pair of ints, each at least ``minimum``) as a pair, else raise naming it."""
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{what} must be an int or a pair of ints, got {value!r}")
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            kind = "positive" if minimum > 0 else "non-negative"
            raise ValueError(f"{what} must be {kind} integers, got {value!r}")
        out.append(int(v))
    return out[0], out[1]


def pair_text(values: tuple[int, int]) -> str:
    """``3`` for ``(3, 3)``, ``3x1`` for ``(3, 1)``: a pair in a task name."""
    return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"


def pair_of_text(text: str | None, default: int) -> tuple[int, int]:
    """The pair a task name writes as ``3`` or ``3x1`` (:func:`pair_text`); ``default`` twice if absent."""
    if text is None:
        return default, default
    parts = [int(x) for x in text.split("x")]
    return (parts[0], parts[0]) if len(parts) == 1 else (parts[0], parts[1])


#: a pair in a task name's regular expression (:func:`pair_of_text` reads it)
PAIR_PATTERN = r"(\d+(?:x\d+)?)"


def split_tuple(splits: object, count: int, what: str) -> tuple[int, ...]:
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence) or len(splits) != count:
        raise ValueError(f"{what} must be {count} positive integers, got {splits!r}")
    return tuple(check_positive_int(v, f"split count {i} of {what}") for i, v in enumerate(splits))
