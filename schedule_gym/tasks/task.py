"""Tasks: tensor operators described as named loop dimensions, each split into a fixed number of loops.

A :class:`Task` is plain, hashable data (no TVM types) so it can be a dictionary key, cross process
boundaries and be written into measurement records. The tile space, the loop-nest description
(:mod:`schedule_gym.loopnest`), the mock latency model, Felix's features and the TVM templates all read
the same description:

* ``op`` and ``params``: the operator (``"gemm"``, ``"conv2d"``...) and its non-shape parameters
  (stride, padding, layout...), which its workload (:mod:`schedule_gym.operators`) needs to build it;
* ``dims``: the loop dimensions, each a :class:`LoopDim` with its extent, how many nested loops it is
  split into (Zhang et al., Eqs. 2-4: ``d_m, d_k, d_n``) and whether it is a reduction;
* ``operands``: each tensor the operator reads or writes, with one (quasi-)affine index expression per
  tensor axis (:class:`Term` sums: ``I[n, h*2 + rh, w*2 + rw, rc]``), contiguous axis last;
* ``loop_order``: the order of the tiled loop nest, outermost first, as ``(dim, level)`` pairs;
* ``ops_per_point``: operations per point of the iteration space, what :attr:`Task.flops` counts (2 for a
  multiply-add; recorded only where it is not 2, so the records of multiply-add tasks never name it).

Each operator's module in :mod:`schedule_gym.operators` builds its tasks; named tasks and suites of real
networks' layers are in :mod:`schedule_gym.tasks.suites`. This module imports nothing of the package.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "DTYPE_BYTES",
    "SuiteTask",
    "LoopDim",
    "Operand",
    "Task",
    "Term",
    "check_positive_int",
    "default_loop_order",
]

_REQUIRED = object()  # Task.param without a default

#: Element sizes of the dtypes a task may use.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "float32": 4, "float64": 8}


def check_positive_int(value: object, what: str) -> int:
    """Return ``value`` as an ``int`` if it is a positive integer (not a bool), else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be a positive integer, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LoopDim:
    """One loop dimension of an operator: ``extent`` iterations split into ``splits`` nested loops."""

    name: str
    extent: int
    splits: int
    reduction: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"loop dimension name must be an identifier, got {self.name!r}")
        object.__setattr__(self, "extent", check_positive_int(self.extent, f"extent of dimension {self.name!r}"))
        object.__setattr__(
            self, "splits", check_positive_int(self.splits, f"split count of dimension {self.name!r}")
        )
        if not isinstance(self.reduction, bool):
            raise TypeError(f"reduction flag of dimension {self.name!r} must be a bool, got {self.reduction!r}")


@dataclass(frozen=True)
class Term:
    """``stride * (dim // div)``: one term of an axis's index expression (``div`` > 1 only for groups)."""

    dim: str
    stride: int = 1
    div: int = 1

    def __post_init__(self) -> None:
        check_positive_int(self.stride, f"stride of index term {self.dim!r}")
        check_positive_int(self.div, f"divisor of index term {self.dim!r}")

    def __str__(self) -> str:
        inner = self.dim if self.div == 1 else f"({self.dim}//{self.div})"
        return inner if self.stride == 1 else f"{inner}*{self.stride}"


@dataclass(frozen=True)
class Operand:
    """A tensor the operator reads or writes: one index expression per axis, outermost axis first.

    Each axis is indexed by a sum of :class:`Term`\\ s, e.g. the input of a stride-2 convolution in NHWC:
    ``I[n, h*2 + rh, w*2 + rw, rc]``. The last axis is contiguous in memory. Build the common case of one
    loop dimension per axis with :meth:`of_dims`.
    """

    name: str
    index: tuple[tuple[Term, ...], ...]
    output: bool = False

    def __post_init__(self) -> None:
        if not self.index or any(not axis for axis in self.index):
            raise ValueError(f"operand {self.name!r} needs at least one axis, each indexed by a term")

    @classmethod
    def of_dims(cls, name: str, dims: tuple[str, ...], output: bool = False) -> Operand:
        """An operand whose every axis is indexed by one loop dimension (``A[m, k]``)."""
        return cls(name, tuple((Term(d),) for d in dims), output)

    @property
    def dims(self) -> tuple[str, ...]:
        """The loop dimensions that index this operand, in the order they first appear (contiguous last
        for simple operands)."""
        out: list[str] = []
        for axis in self.index:
            for term in axis:
                if term.dim not in out:
                    out.append(term.dim)
        return tuple(out)

    @property
    def simple(self) -> bool:
        """Every axis is one loop dimension with stride 1."""
        return all(len(axis) == 1 and axis[0].stride == 1 and axis[0].div == 1 for axis in self.index)

    def shape(self, extents: dict[str, int]) -> tuple[int, ...]:
        """The extent of every axis the loop nest touches (for a padded input: the padded region read)."""
        return tuple(1 + sum(t.stride * ((extents[t.dim] - 1) // t.div) for t in axis) for axis in self.index)

    def describe(self) -> str:
        return f"{self.name}[{', '.join(' + '.join(str(t) for t in axis) for axis in self.index)}]"

    def to_json(self) -> list:
        if self.simple:  # the form records have always used: [name, [dims], output]
            return [self.name, [axis[0].dim for axis in self.index], self.output]
        return [self.name, [[[t.dim, t.stride, t.div] for t in axis] for axis in self.index], self.output]

    @classmethod
    def from_json(cls, data: list) -> Operand:
        name, axes, output = data
        if all(isinstance(a, str) for a in axes):
            return cls.of_dims(name, tuple(axes), bool(output))
        return cls(name, tuple(tuple(Term(d, int(s), int(v)) for d, s, v in axis) for axis in axes), bool(output))


@dataclass(frozen=True)
class Task:
    """A tensor operator to tune: named loop dimensions, operands and the tiled loop order.

    Build tasks with the operator builders (:func:`~schedule_gym.tasks.gemm`,
    :func:`~schedule_gym.tasks.conv2d`...) or by name with :func:`~schedule_gym.tasks.get_task`
    (``"gemm-1024"``, ``"resnet50/conv2"``...). ``params`` holds the operator's non-shape parameters as
    sorted ``(name, value)`` pairs of ints, strings, bools and tuples of ints.
    """

    name: str
    op: str
    dims: tuple[LoopDim, ...]
    operands: tuple[Operand, ...]
    dtype: str = "float32"
    loop_order: tuple[tuple[str, int], ...] = field(default=())
    params: tuple[tuple[str, object], ...] = field(default=())
    ops_per_point: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or not self.op.isidentifier():
            raise ValueError(f"op must be an identifier such as 'gemm', got {self.op!r}")
        check_positive_int(self.ops_per_point, f"ops_per_point of task {self.name!r}")
        params = tuple(sorted((str(k), tuple(v) if isinstance(v, list) else v) for k, v in self.params))
        object.__setattr__(self, "params", params)
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if not self.dims:
            raise ValueError("a task needs at least one loop dimension")
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"loop dimension names must be unique, got {names}")
        for operand in self.operands:
            unknown = [d for d in operand.dims if d not in names]
            if unknown:
                raise ValueError(f"operand {operand.name!r} is indexed by unknown dimensions {unknown}")
        if not self.loop_order:
            object.__setattr__(self, "loop_order", default_loop_order(self.dims))
        expected = {(d.name, level) for d in self.dims for level in range(d.splits)}
        if sorted(self.loop_order) != sorted(expected) or len(self.loop_order) != len(expected):
            raise ValueError(
                f"loop_order {self.loop_order} must list every (dimension, level) pair once: {sorted(expected)}"
            )
        # Tasks key caches on every step: hash the fields once, not on each look-up.
        object.__setattr__(
            self, "_hash", hash((self.name, self.op, self.dims, self.operands, self.dtype, self.loop_order, params))
        )

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    # ----------------------------------------------------------------------------- derived facts
    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self.dims)

    @property
    def splits(self) -> tuple[int, ...]:
        return tuple(d.splits for d in self.dims)

    @property
    def flops(self) -> int:
        """Floating-point operations of one run: :attr:`ops_per_point` per point of the iteration space (a
        multiply and an add for GEMM and conv2d; an epilogue's few operations per output are not counted, as
        is usual for them)."""
        return self.ops_per_point * math.prod(self.extents)

    @property
    def extent_of(self) -> dict[str, int]:
        return {d.name: d.extent for d in self.dims}

    def param(self, name: str, default: object = _REQUIRED) -> object:
        """The operator parameter ``name``; ``default`` if the task has none of that name (else KeyError)."""
        for key, value in self.params:
            if key == name:
                return value
        if default is not _REQUIRED:
            return default
        raise KeyError(f"task {self.name!r} ({self.op}) has no parameter {name!r}; it has {[k for k, _ in self.params]}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def dim(self, name: str) -> LoopDim:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(f"task {self.name!r} has no dimension {name!r}; it has {list(self.dim_names)}")

    def with_order(self, loop_order: Sequence[tuple[str, int]]) -> Task:
        """This task with its tiled loops in ``loop_order`` (outermost first; checked as in the constructor).

        The order is part of the task's identity (:attr:`key`), so records of different orders never mix;
        :class:`~schedule_gym.spaces.OrderSpace` says which orders a search visits."""
        return dataclasses.replace(self, loop_order=tuple((d, int(level)) for d, level in loop_order))

    def to_dict(self) -> dict:
        """Plain JSON-able form (records store it); :meth:`from_dict` inverts it."""
        out = {
            "name": self.name,
            "op": self.op,
            "dims": [[d.name, d.extent, d.splits, d.reduction] for d in self.dims],
            "operands": [o.to_json() for o in self.operands],
            "dtype": self.dtype,
            "loop_order": [[d, level] for d, level in self.loop_order],
        }
        if self.params:
            out["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}
        if self.ops_per_point != 2:
            out["ops_per_point"] = self.ops_per_point
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        try:
            return cls(
                name=data["name"],
                op=data["op"],
                dims=tuple(LoopDim(n, e, s, r) for n, e, s, r in data["dims"]),
                operands=tuple(Operand.from_json(o) for o in data["operands"]),
                dtype=data["dtype"],
                loop_order=tuple((d, int(level)) for d, level in data["loop_order"]),
                params=tuple(dict(data.get("params") or {}).items()),
                ops_per_point=data.get("ops_per_point", 2),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a task description: {data!r} ({exc})") from None

    @property
    def key(self) -> str:
        """A short stable identity of the computation (shape, splits, dtype, loop order), for records."""
        dims = ",".join(f"{d.name}{d.extent}/{d.splits}{'r' if d.reduction else ''}" for d in self.dims)
        order = "".join(f"{d}{level}" for d, level in self.loop_order)
        return f"{self.op}{self.params_text()}[{dims}]{self.dtype}:{order}"

    def params_text(self) -> str:
        """``{groups=1,stride=2x2}``, or ``""`` for an operator without parameters (GEMM)."""
        if not self.params:
            return ""
        text = ",".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in self.params)
        return "{" + text + "}"

    def describe(self) -> str:
        shape = " ".join(f"{d.name}={d.extent}" for d in self.dims)
        splits = "/".join(str(d.splits) for d in self.dims)
        return f"{self.name} ({self.op}{self.params_text()} {shape}, splits {splits}, {self.dtype})"


def default_loop_order(dims: tuple[LoopDim, ...]) -> tuple[tuple[str, int], ...]:
    """The multi-level tiling order used by the CPU template, outermost first.

    Levels are aligned from the innermost loop: spatial tier ``t`` holds each spatial dimension's
    ``t``-th innermost loop, and reduction tier ``t`` sits just outside spatial tier ``t``. For GEMM with
    splits (4, 2, 4) this is ``m0 n0 m1 n1 k0 m2 n2 k1 m3 n3``: outer spatial loops first (fused and run in
    parallel), the reduction inside, a register tile ``m3 x n3`` innermost with ``n3`` contiguous.
    """
    spatial = [d for d in dims if not d.reduction]
    reduce_ = [d for d in dims if d.reduction]
    tiers = max([d.splits for d in dims])
    order: list[tuple[str, int]] = []
    for tier in reversed(range(tiers)):  # outermost tier first
        for d in reduce_:
            if tier < d.splits:
                order.append((d.name, d.splits - 1 - tier))
        for d in spatial:
            if tier < d.splits:
                order.append((d.name, d.splits - 1 - tier))
    return tuple(order)


@dataclass(frozen=True)
class SuiteTask:
    """One distinct layer of a suite: its task and how many times the network runs it."""

    name: str
    task: Task
    weight: int
