"""The tiled loop nest of a task: the one description the CPU template, the mock model, Felix's features
and the footprint code all read.

:meth:`LoopNest.cpu` states the CPU template's rules once:

* the loops run in the task's ``loop_order`` (outermost first);
* the leading spatial loops, up to the first reduction loop, are fused and run in **parallel**;
* the innermost loop is **vectorised** if it is spatial and not parallel;
* the loop outside it is **unrolled** under the same conditions; together they form the register tile,
  which accumulates in registers (a ``local`` buffer) across the loops outside it (the whole output
  tile below the parallel loops is that ``local`` buffer);
* the reduction's initialisation is hoisted out of the first reduction loop.

Footprints (:func:`axis_extent`): an operand axis indexed by ``sum_i stride_i * (d_i // div_i)`` spans,
over a tile in which dimension ``d_i`` has extent ``t_i``, at most ``1 + sum_i stride_i * (ceil(t_i / div_i)
- 1)`` elements (its bounding box) and at most ``prod_i ceil(t_i / div_i)`` distinct ones; the smaller is
the axis's extent. For a plain axis (``A[m]``) that is ``t_m``; for a convolution's input row
``h*stride + rh*dilation`` it is the input rows a tile of output rows and kernel rows reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from schedule_gym.tasks.task import Operand, Task, Term

__all__ = ["LOOP_KINDS", "Loop", "LoopNest", "axis_extent", "operand_extents"]

#: What the template does with a loop.
LOOP_KINDS = ("parallel", "serial", "unroll", "vector")


@dataclass(frozen=True)
class Loop:
    """Loop ``level`` of dimension ``dim`` at ``position`` (0 outermost) of the nest."""

    dim: str
    level: int
    position: int
    reduction: bool
    kind: str

    @property
    def label(self) -> str:
        return f"{self.dim}{self.level}"


@dataclass(frozen=True)
class LoopNest:
    """A task's tiled loop nest and what the template does with each loop (see the module docstring)."""

    task: Task
    loops: tuple[Loop, ...]

    @classmethod
    def cpu(cls, task: Task, order: Sequence[tuple[str, int]] | None = None) -> LoopNest:
        """The CPU template's nest of ``task`` in ``order`` (default: the task's ``loop_order``); made once per
        (task, order) and shared, since the mock and the features ask for it at every batch."""
        return _cpu_nest(task, tuple(task.loop_order if order is None else order))

    # --------------------------------------------------------------------------------- facts
    @cached_property
    def order(self) -> tuple[tuple[str, int], ...]:
        return tuple((loop.dim, loop.level) for loop in self.loops)

    @cached_property
    def dims_of_loops(self) -> tuple[str, ...]:
        return tuple(loop.dim for loop in self.loops)

    @cached_property
    def n_parallel(self) -> int:
        """How many leading loops are fused into the parallel loop."""
        return sum(1 for loop in self.loops if loop.kind == "parallel")

    def _position(self, kind: str) -> int | None:
        return next((loop.position for loop in self.loops if loop.kind == kind), None)

    @cached_property
    def vector(self) -> int | None:
        """Position of the vectorised loop (the innermost), or None."""
        return self._position("vector")

    @cached_property
    def unroll(self) -> int | None:
        """Position of the unrolled loop (just outside the vectorised one), or None."""
        return self._position("unroll")

    @cached_property
    def first_reduction(self) -> int | None:
        """Position of the outermost reduction loop (the reduction's initialisation is hoisted above it)."""
        return next((loop.position for loop in self.loops if loop.reduction), None)

    def describe(self) -> str:
        """``m0 n0 m1 n1 | k0 m2 n2 k1 m3(unroll) n3(vector)``: parallel prefix before the bar."""
        parts = []
        for loop in self.loops:
            tag = {"unroll": "(unroll)", "vector": "(vector)"}.get(loop.kind, "")
            parts.append(loop.label + tag)
            if loop.position == self.n_parallel - 1 and self.n_parallel < len(self.loops):
                parts.append("|")
        return " ".join(parts)


@lru_cache(maxsize=4096)
def _cpu_nest(task: Task, order: tuple[tuple[str, int], ...]) -> LoopNest:
    """:meth:`LoopNest.cpu` (see the module docstring for the template's rules)."""
    reduction = {d.name: d.reduction for d in task.dims}
    n = len(order)
    n_parallel = 0
    for name, _ in order:
        if reduction[name]:
            break
        n_parallel += 1
    loops = []
    for q, (name, level) in enumerate(order):
        if q < n_parallel:
            kind = "parallel"
        elif q == n - 1 and not reduction[name]:
            kind = "vector"
        elif q == n - 2 and not reduction[name]:
            kind = "unroll"
        else:
            kind = "serial"
        loops.append(Loop(name, level, q, reduction[name], kind))
    return LoopNest(task, tuple(loops))


def axis_extent(
    axis: Sequence[Term],
    tile: Mapping[str, Any],
    ceil: Callable[[Any], Any],
    minimum: Callable[[Any, Any], Any],
) -> tuple[Any, Any]:
    """``(box, distinct)``: the bounding box and the distinct indices one operand axis spans over a tile
    with extent ``tile[d]`` per dimension (see the module docstring; ``distinct <= box``). Rows count
    ``distinct``; the contiguous axis counts ``box``, since cache lines cover the gaps a stride leaves.
    ``ceil`` and ``minimum`` are NumPy's for exact counts, smooth ones for Felix's differentiable
    features; ``tile`` values may be numbers, arrays or tensors."""
    counts = [ceil(tile[t.dim] / t.div) if t.div != 1 else tile[t.dim] for t in axis]
    box = 1.0
    distinct = 1.0
    for t, c in zip(axis, counts):
        box = box + t.stride * (c - 1.0)
        distinct = distinct * c
    if len(axis) == 1 and axis[0].stride == 1:
        return counts[0], counts[0]
    return box, minimum(box, distinct)


def operand_extents(
    operand: Operand,
    tile: Mapping[str, Any],
    ceil: Callable[[Any], Any],
    minimum: Callable[[Any, Any], Any],
) -> tuple[Any, Any]:
    """``(rows, run)`` of ``operand``'s tile: the number of distinct positions of its non-contiguous
    axes (their product) and the elements its contiguous axis spans (the bounding box)."""
    rows: Any = 1.0
    for axis in operand.index[:-1]:
        rows = rows * axis_extent(axis, tile, ceil, minimum)[1]
    return rows, axis_extent(operand.index[-1], tile, ceil, minimum)[0]
