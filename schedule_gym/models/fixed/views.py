"""Operands read and written in place: which element of a tensor each element of a chain of reshapes, axis
permutations and split parts is, found by running the chain on an array of indices.

A transformer splits each projection into heads by copies: ``reshape`` to ``[batch, tokens, heads, depth]``,
``permute_dims`` to ``[batch, heads, tokens, depth]`` (GPT-2 and ViT take ``Q``, ``K`` and ``V`` as the parts of one
``split`` before it), and joins the heads again after ``P @ V`` by the inverse permutation. A kernel that takes
each head's rows through strides needs none of those copies: :func:`strided_view` finds the tensor a chain starts
from and the strides that read it as the chain's result does; :func:`strided_target` does the same for a chain that
leaves a kernel's result, so that the kernel writes the chain's last tensor itself.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from schedule_gym.models.bindings import Bindings
from schedule_gym.models.importer import tvm_shape

__all__ = ["VIEW_OPS", "Strided", "consumer_chain", "strided_target", "strided_view"]

#: the operators that move no value, only its place: a chain of them (and of ``split``'s parts) is a view
VIEW_OPS = ("relax.reshape", "relax.permute_dims")


class Strided(NamedTuple):
    """A rank-3 operand ``x[h, a, b]`` held in place in a tensor of ``size`` elements: ``x[h, a, b]`` is the
    element ``offset + h * strides[0] + a * strides[1] + b * strides[2]`` of the tensor, flattened."""

    size: int
    offset: int
    strides: tuple[int, int, int]

    @classmethod
    def contiguous(cls, shape: tuple[int, int, int]) -> Strided:
        """The operand of ``shape`` stored as it is, row-major."""
        return cls(math.prod(shape), 0, (shape[1] * shape[2], shape[2], 1))

    def index(self, h: Any, a: Any, b: Any) -> Any:
        """The flat index of ``x[h, a, b]`` (integers or TIR expressions)."""
        return self.offset + h * self.strides[0] + a * self.strides[1] + b * self.strides[2]


def _op_name(value: Any) -> str | None:
    from tvm import relax

    return getattr(value.op, "name", None) if isinstance(value, relax.Call) else None


def _step(indices: np.ndarray, step: Any, bindings: Bindings) -> np.ndarray:
    """``indices`` through one step of a chain: a reshape, a permutation or a part of a split."""
    from tvm import relax

    if isinstance(step, relax.TupleGetItem):
        split = bindings.value_of[step.tuple_value]
        sections = split.attrs.indices_or_sections
        cuts = int(sections) if isinstance(sections, (int, np.integer)) or hasattr(sections, "value") \
            else [int(i) for i in sections]
        return np.split(indices, cuts, axis=int(split.attrs.axis))[int(step.index)]
    if _op_name(step) == "relax.permute_dims":
        axes = step.attrs.axes
        return np.transpose(indices, None if axes is None else [int(a) for a in axes])
    return np.reshape(indices, tvm_shape(step))


def _affine(indices: np.ndarray, size: int) -> Strided | None:
    """The strides that give ``indices`` (rank 3) from its first element, or None where no strides do."""
    offset = int(indices[0, 0, 0])
    strides = tuple(int(indices[(1 if axis == 0 else 0), (1 if axis == 1 else 0), (1 if axis == 2 else 0)]) - offset
                    if indices.shape[axis] > 1 else 0 for axis in range(3))
    h, a, b = np.indices(indices.shape, sparse=True)
    view = Strided(size, offset, strides)  # type: ignore[arg-type]
    return view if np.array_equal(view.index(h, a, b), indices) else None


def _chain_back(expr: Any, bindings: Bindings) -> list[tuple[Any, Any]]:
    """The chain of views ending in ``expr``, as ``(the var a step reads, the step)`` pairs, first step first."""
    from tvm import relax

    chain = []
    while True:
        value = bindings.value_of.get(expr)
        if _op_name(value) in VIEW_OPS:
            chain.append((value.args[0], value))
            expr = value.args[0]
        elif isinstance(value, relax.TupleGetItem) and _op_name(bindings.value_of.get(value.tuple_value)) \
                == "relax.split":
            source = bindings.value_of[value.tuple_value].args[0]
            chain.append((source, value))
            expr = source
        else:
            return chain[::-1]


def strided_view(expr: Any, bindings: Bindings, shape: tuple[int, int, int],
                 unit_last: bool = False) -> tuple[Any, Strided]:
    """``(base, view)``: the tensor ``base`` that ``expr`` (a value of ``shape`` elements, read as ``[h, a, b]``) is
    a view of, earliest first along its chain of reshapes, permutations and split parts, and where each element
    lies in it. ``unit_last``: only a view whose last axis is contiguous (vector loads); ``expr`` itself is the
    base where nothing earlier is such a view."""
    chain = _chain_back(expr, bindings)
    for start, (base, _) in enumerate(chain):
        base_shape = tvm_shape(base)
        if base_shape is None:
            continue
        size = math.prod(base_shape)
        indices = np.arange(size, dtype=np.int64).reshape(base_shape)
        for _, step in chain[start:]:
            indices = _step(indices, step, bindings)
        view = _affine(indices.reshape(shape), size) if indices.size == math.prod(shape) else None
        if view is not None and (view.strides[2] == 1 or not unit_last):
            return base, view
    return expr, Strided.contiguous(shape)


def consumer_chain(expr: Any, bindings: Bindings) -> list[Any]:
    """The vars of the views that read ``expr``'s var one after another, each var read once and only by the
    next view: the chain a kernel's result goes through (empty where its first reader is no view)."""
    chain: list[Any] = []
    var = bindings.bound.get(expr)
    while var is not None and bindings.uses[var] == 1 and len(bindings.readers.get(var, [])) == 1:
        reader = bindings.readers[var][0]
        if _op_name(bindings.value_of[reader]) not in VIEW_OPS:
            break
        chain.append(reader)
        var = reader
    return chain


def strided_target(expr: Any, bindings: Bindings, shape: tuple[int, int, int]) -> tuple[Any, Strided] | None:
    """``(end, view)``: the last var of the longest chain of views after ``expr`` (a value of ``shape`` elements,
    written as ``[h, a, b]``) whose elements a kernel can write in place, the last axis contiguous, and where each
    element of ``expr`` lies in it; None where the chain is empty or no view of it is such."""
    chain = consumer_chain(expr, bindings)
    size = math.prod(shape)
    for end in range(len(chain), 0, -1):
        indices = np.arange(size, dtype=np.int64).reshape(tvm_shape(expr))
        for var in chain[:end]:
            indices = _step(indices, bindings.value_of[var], bindings)
        place = np.empty(size, dtype=np.int64)
        place[indices.ravel()] = np.arange(size)
        view = _affine(place.reshape(shape), size)
        if view is not None and view.strides[2] == 1:
            return chain[end - 1], view
    return None
