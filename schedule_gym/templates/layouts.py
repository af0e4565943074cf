"""The layouts a kernel may take an input in other than the workload's own, and the one place each is computed.

The packed templates' v5 (dense's and conv2d's, :data:`PREPACKED_WEIGHTS`) and dense's v7 and v8 take their weight
packed as the micro-kernel reads it, where the earlier versions copy each block of it into that layout at run time.
A template names such inputs per config (:meth:`schedule_gym.templates.Template.input_layout`); a measurement gives
the kernel that input so laid out (:func:`kernel_inputs`), a model build lays out the constant it is called with, once
(:func:`schedule_gym.models.build.schedule_kernels`; :func:`tile_columns_expr` for an input that is not a
constant). Both compute one layout, :func:`tile_columns`: the last axis (a weight's output channels, ``N``) cut
into tiles of ``tile``, the tile index first: ``[..., N]`` as ``[N / tile, ..., tile]``, so that the ``tile``
columns of a micro-kernel are one contiguous stream over the other axes (dense's ``[K, N]`` weight as
``[N / NR, K, NR]``, a convolution's HWIO weight as ``[CO / NR, KH, KW, CI, NR]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PREPACKED_WEIGHTS", "kernel_inputs", "tile_columns", "tile_columns_expr", "tiled_shape"]

#: The first version of the packed dense and conv2d templates whose kernels take their weight packed (each module's
#: ``WEIGHT_PACKED_VERSIONS`` lists them)
PREPACKED_WEIGHTS = 5


def tiled_shape(shape: Sequence[int], tile: Any) -> tuple[int, ...]:
    """The shape :func:`tile_columns` makes of ``shape``; ValueError naming the problem for a shape of rank below 2
    or a tile that is not a positive divisor of its last axis."""
    shape = tuple(int(v) for v in shape)
    if len(shape) < 2:
        raise ValueError(f"tiling columns needs an array of rank 2 or more, got shape {shape}")
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1 or shape[-1] % tile:
        raise ValueError(f"a tile of columns must be a positive divisor of the last axis ({shape[-1]}), got {tile!r}")
    return (shape[-1] // tile, *shape[:-1], int(tile))


def _permutation(rank: int) -> tuple[int, ...]:
    """The axes of ``[..., N / tile, tile]`` in the order of ``[N / tile, ..., tile]``."""
    return (rank - 1, *range(rank - 1), rank)


def tile_columns(array: np.ndarray, tile: int) -> np.ndarray:
    """``array`` ``[..., N]`` as ``[N / tile, ..., tile]`` (``out[j, ..., t] = array[..., j * tile + t]``),
    contiguous."""
    tiled_shape(array.shape, tile)
    split = array.reshape(*array.shape[:-1], array.shape[-1] // tile, tile)
    return np.ascontiguousarray(split.transpose(_permutation(array.ndim)))


def tile_columns_expr(expr: Any, tile: int) -> Any:
    """The Relax expression of :func:`tile_columns` of ``expr`` (a tensor of static shape)."""
    from tvm import relax

    try:
        shape = tuple(int(v) for v in expr.ty.shape.values)
    except (AttributeError, TypeError):
        raise ValueError(f"tiling columns needs a static shape, got {expr.ty}") from None
    tiled_shape(shape, tile)
    split = relax.op.reshape(expr, (*shape[:-1], shape[-1] // tile, tile))
    return relax.op.permute_dims(split, _permutation(len(shape)))


def kernel_inputs(inputs: Sequence[np.ndarray], tiled: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """``inputs`` (the workload's) as the kernel takes them: each ``(index, tile)`` of ``tiled`` with its columns
    tiled, the rest as they are."""
    out = list(inputs)
    for index, tile in tiled:
        out[index] = tile_columns(out[index], tile)
    return out
