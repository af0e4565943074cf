"""The continuous relaxation of a tile space (Zhao et al., Section 3.3): :class:`LogRelaxation`."""

from __future__ import annotations

import math

import numpy as np
import torch

from schedule_gym.spaces import TileSpace
from schedule_gym.spaces.tile_space import divisors

__all__ = ["LogRelaxation"]


class LogRelaxation:
    """The continuous relaxation of a tile space (Section 3.3): free log-factors, penalties, rounding.

    Per dimension of extent ``L`` and ``d`` splits, the first ``d - 1`` log-factors are free variables
    and the last is ``log L - sum(others)``. :meth:`log_factors` maps ``(batch, n_free)`` free variables
    to ``(batch, n_factors)`` log-factors (one matrix product); :meth:`penalty` is Eq. 4's
    ``sum_p max(p, 0)^2`` over ``p = -x'`` and ``p = x' - log L`` for every factor; :meth:`round_to_indices`
    maps free variables to valid configs.
    """

    def __init__(self, space: TileSpace) -> None:
        self.space = space
        dims = space.dims
        self.n_factors = sum(d.splits for d in dims)
        free_cols = []
        col = 0
        for d in dims:
            free_cols.extend(range(col, col + d.splits - 1))
            col += d.splits
        self.free_cols = np.array(free_cols, dtype=np.int64)
        self.n_free = len(free_cols)
        mat = torch.zeros(self.n_free, self.n_factors)
        offset = torch.zeros(self.n_factors)
        upper = torch.zeros(self.n_factors)
        col = free = 0
        for d in dims:
            log_l = math.log(d.extent)
            for level in range(d.splits - 1):
                mat[free + level, col + level] = 1.0
                mat[free + level, col + d.splits - 1] = -1.0
            offset[col + d.splits - 1] = log_l
            upper[col : col + d.splits] = log_l
            col += d.splits
            free += d.splits - 1
        self.mat, self.offset, self.upper = mat, offset, upper
        self._divisors = [divisors(d.extent) for d in dims]

    def free_of_indices(self, indices: np.ndarray) -> torch.Tensor:
        """The free variables (log-factors but the last of each dimension) of configs given by index."""
        factors = np.concatenate(self.space.factors_of_indices(np.asarray(indices, dtype=np.int64)), axis=1)
        return torch.from_numpy(np.log(factors[:, self.free_cols].astype(np.float64))).to(torch.float32)

    def log_factors(self, free: torch.Tensor) -> torch.Tensor:
        return free @ self.mat + self.offset

    def penalty(self, log_factors: torch.Tensor) -> torch.Tensor:
        """Per point: ``sum max(-x', 0)^2 + max(x' - log L, 0)^2`` over all factors (Eq. 4's penalty sum)."""
        low = torch.relu(-log_factors)
        high = torch.relu(log_factors - self.upper)
        return (low * low + high * high).sum(1)

    def round_to_indices(self, free: np.ndarray) -> np.ndarray:
        """Dense indices of the valid configs nearest ``free`` (``(N, n_free)`` log values).

        Factor by factor, each free log-factor is rounded to the log of the nearest divisor of what is
        left of the extent (the paper rounds to the nearest ``log`` of a divisor of ``L``; going factor
        by factor keeps the product exact); the last factor is the remainder.
        """
        free = np.asarray(free, dtype=np.float64).reshape(-1, self.n_free)
        n_points = free.shape[0]
        rows = np.empty((len(self.space.dims), n_points), dtype=np.int64)
        col = 0
        for x, d in enumerate(self.space.dims):
            divisors = self._divisors[x]
            log_div = np.log(divisors.astype(np.float64))
            factors = np.empty((n_points, d.splits), dtype=np.int64)
            rest = np.full(n_points, d.extent, dtype=np.int64)
            for level in range(d.splits - 1):
                ok = rest[:, None] % divisors[None, :] == 0
                dist = np.where(ok, np.abs(log_div[None, :] - free[:, col + level, None]), np.inf)
                factors[:, level] = divisors[np.argmin(dist, axis=1)]
                rest //= factors[:, level]
            factors[:, d.splits - 1] = rest
            col += d.splits - 1
            uniq, inverse = np.unique(factors, axis=0, return_inverse=True)
            row_of = d.row_of
            uniq_rows = np.array([row_of[tuple(int(v) for v in f)] for f in uniq], dtype=np.int64)
            rows[x] = uniq_rows[inverse.reshape(-1)]
        return (rows * np.array(self.space.strides, dtype=np.int64)[:, None]).sum(0)
