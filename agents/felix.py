"""Felix: tile sizes by gradient descent on a differentiable cost model (Zhao et al., ASPLOS 2024).

Felix (Zhao, Sharif, Adve, Misailovic, "Felix: Optimizing Tensor Programs with Gradient Descent") turns
the discrete search over schedule parameters into a continuous one:

1. **Relaxation (Section 3.3).** Every split factor ``x`` becomes a real variable ``x'`` in log space,
   ``x = e^{x'}``. Here, per loop dimension of extent ``L`` split into ``d`` factors, the first ``d - 1``
   log-factors are free and the last is ``log L - sum(others)``, so the product constraint holds by
   construction; the bounds ``1 <= factor <= L`` become the penalties ``p = -x'`` and ``p = x' - log L``.
   The divisibility constraint ``L mod x = 0`` is dropped during descent and restored by rounding
   (:class:`LogRelaxation`).
2. **Smooth features (Section 3.3).** Program features (loop extents, tile footprints and data traffic
   per nesting depth, vector length, unroll extent, register tile, parallel extent, arithmetic
   intensity) are written as formulas of the log-factors in PyTorch (:class:`TileFeaturizer`). Their
   non-differentiable operators are replaced by smooth versions built from the paper's kernel
   ``phi(t) = 1 / (1 + t^2)`` (:func:`smooth_step`, :func:`smooth_relu`, :func:`is_one_gate`), and every
   feature is a logarithm, which turns products into sums and keeps gradients from vanishing.
3. **Objective (Section 3.4, Eq. 4).** ``O(x') = C(Feat(x')) + lambda * sum_p max(p(x'), 0)^2`` with
   ``C`` an MLP cost model predicting log latency (:class:`FelixCostModel`; lower is better, so the
   paper's negated performance becomes predicted log latency).
4. **Search (Section 3.4, Algorithm 1).** Each round ``n_seeds`` valid configs drawn at random start
   ``n_steps`` Adam steps, all seeds as one batch; every visited point is rounded to a valid config,
   the new ones are ranked by the model and the best ``n_measure`` measured as one batch; the model is
   then updated on every measurement so far (:class:`FelixAgent`).

Felix pretrains its cost model on TenSet once and applies it to every operator; here
:func:`pretrain_cost_model` fits one on mock-model latencies of other shapes and/or on recorded real
measurements, and :func:`save_cost_model` / :func:`load_cost_model` store it as a plain ``state_dict``
plus a JSON config (loading never executes code from the file).
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from schedule_gym.agents.base import Agent, check_positive
from schedule_gym.agents.random_search import draw_without_replacement
from schedule_gym.spaces import TileSpace
from schedule_gym.spaces.tile_space import divisors
from schedule_gym.tasks import Task

__all__ = [
    "FeatureSpec",
    "FelixAgent",
    "FelixCostModel",
    "LogRelaxation",
    "TileFeaturizer",
    "is_one_gate",
    "load_cost_model",
    "pretrain_cost_model",
    "save_cost_model",
    "smooth_max",
    "smooth_min",
    "smooth_relu",
    "smooth_step",
    "train_cost_model",
]

#: ``format`` of a saved cost model; bump when the checkpoint layout or the feature formulas change.
CHECKPOINT_FORMAT = "schedule-gym/felix-cost-model/v1"


# ============================================================================ smooth operators
# Section 3.3: f_smooth = f convolved with a kernel. The paper's kernel is phi(t) = 1 / (1 + t^2) (a
# Cauchy density up to 1/pi); its heavy tails keep gradients alive far from the kink.


def smooth_step(x: torch.Tensor, tau: float) -> torch.Tensor:
    """``select(x > 0, 1, 0)`` convolved with the paper's kernel ``phi(t / tau) / (pi tau)``.

    That is ``1/2 + atan(x / tau) / pi``.
    """
    return 0.5 + torch.atan(x / tau) / math.pi


def smooth_relu(x: torch.Tensor, tau: float) -> torch.Tensor:
    """``max(x, 0)`` smoothed: ``(x + sqrt(x^2 + tau^2)) / 2``.

    Convolving ``max(x, 0)`` with the paper's Cauchy kernel itself diverges (its tails are too heavy for
    a function that grows linearly), so this is the convolution with the next kernel of the same family,
    ``tau^2 / (2 (t^2 + tau^2)^{3/2})``: also rational-tailed (gradients never vanish, unlike a softplus's
    exponential tail), exact as ``|x| / tau -> inf``, and off by ``tau / 2`` at the kink.
    """
    return 0.5 * (x + torch.sqrt(x * x + tau * tau))


def smooth_max(a: torch.Tensor, b: torch.Tensor | float, tau: float) -> torch.Tensor:
    """``max(a, b) = b + max(a - b, 0)``, smoothed with :func:`smooth_relu`."""
    return b + smooth_relu(a - b, tau)


def smooth_min(a: torch.Tensor, b: torch.Tensor | float, tau: float) -> torch.Tensor:
    """``min(a, b) = a - max(a - b, 0)``, smoothed with :func:`smooth_relu`."""
    return a - smooth_relu(a - b, tau)


def is_one_gate(log_x: torch.Tensor, tau: float) -> torch.Tensor:
    """``select(x == 1, 1, 0)`` for ``x = e^{log_x}``: the paper's kernel itself, ``phi(log_x / tau)``."""
    return 1.0 / (1.0 + (log_x / tau) ** 2)


# ============================================================================ features
@dataclass(frozen=True)
class FeatureSpec:
    """What the features know of the machine, their layout, and the smoothing temperatures.

    Per-depth features are indexed from the innermost loop outwards and padded to ``max_loops`` loops
    (padding loops have extent 1, which is what a task with fewer splits means), so one cost model
    serves every GEMM task with at most ``max_loops`` loops, whatever its shape or splits: the innermost
    loops of a 3/2/3 and a 4/2/4 GEMM line up (``n2 m2 k1 n1 m1 k0 ...`` with ``n3 m3 k1 n2 m2 k0 ...``),
    the way Ansor's fixed-length feature vectors (which Felix reuses) summarise any loop nest.

    Temperatures are in log units (a factor ``e^tau``).
    """

    max_loops: int = 12
    n_dims: int = 3
    n_operands: int = 3
    vector_bits: int = 512
    cores: int = 2
    vector_registers: int = 32
    cache_line_bytes: int = 64
    #: cache capacities (bytes) at which the traffic into "a cache of that size" is a feature
    capacities_bytes: tuple[int, ...] = tuple(4096 * 4**i for i in range(8))  # 4 KiB .. 64 MiB
    tau_max: float = 0.25  # smooth max/min
    tau_gate: float = 0.1  # "this loop has extent 1"
    tau_fit: float = 0.35  # "this tile fits in that capacity"

    def __post_init__(self) -> None:
        ints = ("max_loops", "n_dims", "n_operands", "vector_bits", "cores", "vector_registers", "cache_line_bytes")
        for key in ints:
            check_positive(getattr(self, key), f"FeatureSpec.{key}", integer=True)
        for key in ("tau_max", "tau_gate", "tau_fit"):
            check_positive(getattr(self, key), f"FeatureSpec.{key}")
        caps = self.capacities_bytes
        if not isinstance(caps, tuple) or not caps:
            raise ValueError(f"FeatureSpec.capacities_bytes must be a non-empty tuple, got {caps!r}")
        for c in caps:
            check_positive(c, "FeatureSpec.capacities_bytes entry", integer=True)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["capacities_bytes"] = list(self.capacities_bytes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureSpec:
        if not isinstance(data, dict):
            raise TypeError(f"a feature spec must be a dict, got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown feature spec fields {sorted(unknown)}")
        data = dict(data)
        if "capacities_bytes" in data:
            if not isinstance(data["capacities_bytes"], list):
                raise ValueError("feature spec capacities_bytes must be a list")
            data["capacities_bytes"] = tuple(data["capacities_bytes"])
        return cls(**data)

    def n_features(self) -> int:
        """Length of the feature vector (see :meth:`TileFeaturizer.names`)."""
        positions = self.max_loops + 1
        per_position = 2 * self.n_operands + 1
        return 1 + self.n_dims + 12 + self.max_loops + positions * per_position + 2 * len(self.capacities_bytes)

    @classmethod
    def for_tasks(cls, tasks: Iterable[Task], **overrides: Any) -> FeatureSpec:
        """The default spec, with ``max_loops`` large enough for every task (at least 12)."""
        tasks = list(tasks)
        loops = max([12] + [len(t.loop_order) for t in tasks])
        dims = {len(t.dims) for t in tasks} or {3}
        operands = {len(t.operands) for t in tasks} or {3}
        if len(dims) > 1 or len(operands) > 1:
            raise ValueError(
                f"tasks disagree on their numbers of dimensions {sorted(dims)} or operands {sorted(operands)}"
            )
        return cls(**{"max_loops": loops, "n_dims": dims.pop(), "n_operands": operands.pop(), **overrides})


class TileFeaturizer:
    """Smooth log-features of a task's tiled loop nest, as a differentiable function of log-factors.

    ``featurizer(log_factors)`` takes a ``(batch, sum_x d_x)`` tensor of log split factors (each
    dimension's factors in the task's dimension order, as :meth:`TileSpace.factors_of_indices` lists
    them), relaxed or integer, and returns ``(batch, spec.n_features())`` features. Everything is derived
    from ``task.loop_order``, the dimensions and the operands, following the CPU template
    (:mod:`schedule_gym.templates.gemm_cpu`): the loops before the first reduction loop are fused and
    parallel, the innermost loop is vectorised and the one outside it unrolled, and the register tile
    they form accumulates across the loops outside it. With ``q`` a loop (0 outermost) and ``p`` a
    nesting depth (the tile below position ``p`` is spanned by loops ``q >= p``), the features are:

    * ``log_flops`` (always first: the cost model predicts log latency relative to it) and the log
      extent of every dimension;
    * vector loop: its log extent, smoothly capped at the vector lanes, and the log number of vectors
      per row; unrolled loop: its log extent; register tile: log accumulator registers, log register
      pressure over the register file, log elements; parallel loops: log extent, smoothly capped at the
      cores, and log iterations per core; log iterations of the loops that are neither vectorised nor
      unrolled (loop overhead);
    * per loop, innermost first: its log extent;
    * per depth, innermost first, per operand: the log footprint of its tile in bytes (contiguous runs
      counted in whole cache lines, smoothly), and the log traffic into a cache holding that tile: the
      footprint times the iterations outside it, less the reuse across the loops just outside that do
      not index the operand (a loop of extent 1 does not break reuse: a smooth select); per depth, the
      log arithmetic intensity (flops of the tile per byte of its footprint);
    * per capacity in ``spec.capacities_bytes``: the log traffic and log footprint of the outermost tile
      that fits it (a smooth "first fit" over depths, averaging logs).
    """

    def __init__(self, task: Task, spec: FeatureSpec | None = None) -> None:
        spec = FeatureSpec.for_tasks([task]) if spec is None else spec
        n = len(task.loop_order)
        if n > spec.max_loops:
            raise ValueError(
                f"task {task.name!r} has {n} loops, more than the {spec.max_loops} this feature spec lays out; "
                f"build the cost model with FeatureSpec(max_loops={n}) or more"
            )
        if len(task.dims) != spec.n_dims or len(task.operands) != spec.n_operands:
            raise ValueError(
                f"task {task.name!r} has {len(task.dims)} dimensions and {len(task.operands)} operands; the "
                f"feature spec expects {spec.n_dims} and {spec.n_operands}"
            )
        self.task = task
        self.spec = spec
        dims = task.dims
        n_dims = len(dims)
        dim_pos = {d.name: x for x, d in enumerate(dims)}
        offsets = np.cumsum([0] + [d.splits for d in dims])
        self.n_factors = int(offsets[-1])
        order = task.loop_order
        loop_dim = [dim_pos[d] for d, _ in order]
        self.loop_col = torch.tensor([int(offsets[dim_pos[d]]) + level for d, level in order])
        reduction = [dims[x].reduction for x in loop_dim]
        f32 = torch.float32

        # tile_mat[q, p, x] = 1 if loop q (q >= p) spans dimension x of the tile below position p
        tile = torch.zeros(n, n + 1, n_dims)
        for q in range(n):
            tile[q, : q + 1, loop_dim[q]] = 1.0
        self.tile_mat = tile.reshape(n, (n + 1) * n_dims)
        self.outer_mat = torch.triu(torch.ones(n, n + 1), diagonal=1)  # [q, p] = 1 if q < p
        self.n_loops = n
        self.n_dims = n_dims

        ops = task.operands
        self.rows_mat = torch.zeros(n_dims, len(ops))  # non-contiguous dimensions of each operand
        self.contig = torch.tensor([dim_pos[o.dims[-1]] for o in ops])
        indexes = torch.zeros(len(ops), n)  # [o, q] = 1 if loop q indexes operand o
        for o, operand in enumerate(ops):
            for d in operand.dims[:-1]:
                self.rows_mat[dim_pos[d], o] = 1.0
            for q in range(n):
                indexes[o, q] = 1.0 if order[q][0] in operand.dims else 0.0
        self.indexes = indexes
        self.not_indexes = 1.0 - indexes
        self.below = torch.tril(torch.ones(n + 1, n, dtype=torch.bool), diagonal=-1)  # [p, q]: q < p

        # structure of the template: parallel prefix, vector loop, unrolled loop
        n_par = 0
        for r in reduction:
            if r:
                break
            n_par += 1
        self.n_parallel = n_par
        self.vec_loop = n - 1 if n >= 1 and not reduction[n - 1] and n > n_par else None
        self.unroll_loop = n - 2 if n >= 2 and not reduction[n - 2] and n - 1 > n_par else None

        # padding: depth j (0 = innermost position) -> position p = n - j, clamped at the whole nest
        positions = spec.max_loops + 1
        self.pos_of_depth = torch.clamp(n - torch.arange(positions), min=0)
        self.loop_of_depth = n - 1 - torch.arange(min(n, spec.max_loops))  # innermost loop first

        bytes_ = task.dtype_bytes
        self.log_bytes = math.log(bytes_)
        self.log_line = math.log(spec.cache_line_bytes)
        self.log_lanes = math.log(max(1, spec.vector_bits // (8 * bytes_)))
        self.log_cores = math.log(spec.cores)
        self.log_regs = math.log(spec.vector_registers)
        self.log_caps = torch.log(torch.tensor(spec.capacities_bytes, dtype=torch.float64)).to(f32)
        self.constants = torch.tensor(
            [math.log(task.flops)] + [math.log(d.extent) for d in dims], dtype=f32
        )

    def names(self) -> list[str]:
        """One name per feature, in order."""
        spec = self.spec
        ops = [o.name for o in self.task.operands]
        out = ["log_flops"] + [f"log_extent_{d.name}" for d in self.task.dims]
        out += ["vec_len", "vec_lanes_used", "vec_per_row", "unroll", "reg_accumulators", "reg_pressure",
                "reg_tile_elems", "parallel", "parallel_cores_used", "parallel_per_core", "overhead_iters",
                "innermost_iters"]
        out += [f"loop_extent_depth{j}" for j in range(spec.max_loops)]
        positions = spec.max_loops + 1
        out += [f"footprint_{o}_depth{j}" for j in range(positions) for o in ops]
        out += [f"traffic_{o}_depth{j}" for j in range(positions) for o in ops]
        out += [f"intensity_depth{j}" for j in range(positions)]
        out += [f"traffic_cap{c}" for c in spec.capacities_bytes] + [f"footprint_cap{c}" for c in spec.capacities_bytes]
        return out

    # ----------------------------------------------------------------------------- inputs
    def log_factors_of_indices(self, space: TileSpace, indices: np.ndarray) -> torch.Tensor:
        """``(len(indices), n_factors)`` log-factors of configs given by dense index."""
        factors = np.concatenate(space.factors_of_indices(np.asarray(indices, dtype=np.int64)), axis=1)
        return torch.from_numpy(np.log(factors.astype(np.float64))).to(torch.float32)

    def log_factors_of_configs(self, configs: Sequence[Sequence[Sequence[int]]]) -> torch.Tensor:
        """``(len(configs), n_factors)`` log-factors of configs given as nested tuples."""
        flat = np.array([[f for factors in c for f in factors] for c in configs], dtype=np.float64)
        flat = flat.reshape(-1, self.n_factors)
        return torch.from_numpy(np.log(flat)).to(torch.float32)

    # ----------------------------------------------------------------------------- formulas
    def __call__(self, log_factors: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if log_factors.ndim != 2 or log_factors.shape[1] != self.n_factors:
            raise ValueError(
                f"expected a (batch, {self.n_factors}) tensor of log-factors, got shape {tuple(log_factors.shape)}"
            )
        lf = log_factors.to(torch.float32)
        batch = lf.shape[0]
        n, n_dims, tau = self.n_loops, self.n_dims, spec.tau_max
        e = lf[:, self.loop_col]  # (B, n) log extent of every loop, outermost first
        zero = e.new_zeros(batch)

        tiles = (e @ self.tile_mat).reshape(batch, n + 1, n_dims)  # log tile extent per position, dimension
        outer = e @ self.outer_mat  # (B, n + 1) log iterations outside position p
        rows = tiles @ self.rows_mat  # (B, n + 1, O)
        run = tiles[:, :, self.contig]  # (B, n + 1, O) contiguous run, elements
        footprint = rows + smooth_max(run + self.log_bytes, self.log_line, tau)  # bytes, whole lines

        # reuse: sum over loops q < p not indexing o of e_q, gated by every loop between q and p that
        # indexes o having extent 1 (smooth select): cum[o, p] = sum_{q' < p} indexes[o, q'] * log phi(e_q')
        log_gate = torch.log(is_one_gate(e, spec.tau_gate))[:, None, :] * self.indexes  # (B, O, n)
        cum = torch.cat([log_gate.new_zeros(batch, log_gate.shape[1], 1), torch.cumsum(log_gate, dim=2)], dim=2)
        between = cum[:, :, :, None] - cum[:, :, None, 1:]  # (B, O, n + 1, n): sum over q < q' < p
        between = between.masked_fill(~self.below, -1e4)
        reuse = (torch.exp(between) * (self.not_indexes[:, None, :] * e[:, None, None, :])).sum(-1)  # (B, O, n + 1)
        traffic = outer[:, :, None] + footprint - reuse.transpose(1, 2)  # (B, n + 1, O)

        fp_total = torch.logsumexp(footprint, dim=2)  # (B, n + 1)
        traffic_total = torch.logsumexp(traffic, dim=2)
        intensity = math.log(2.0) + tiles.sum(2) - fp_total

        # capacities: smooth "outermost position whose tile fits", weights w_p = s_p prod_{p' < p} (1 - s_p')
        fits = smooth_step((self.log_caps[None, :, None] - fp_total[:, None, :]), spec.tau_fit)  # (B, K, n + 1)
        fits = torch.cat([fits[:, :, :-1], torch.ones_like(fits[:, :, -1:])], dim=2)  # the innermost tile always fits
        not_yet = torch.cumprod(torch.cat([torch.ones_like(fits[:, :, :1]), 1.0 - fits[:, :, :-1]], dim=2), dim=2)
        weight = fits * not_yet
        weight = weight / weight.sum(2, keepdim=True)
        cap_traffic = (weight * traffic_total[:, None, :]).sum(2)
        cap_footprint = (weight * fp_total[:, None, :]).sum(2)

        # micro-kernel and parallelism
        vec = e[:, self.vec_loop] if self.vec_loop is not None else zero
        unroll = e[:, self.unroll_loop] if self.unroll_loop is not None else zero
        vec_per_row = smooth_relu(vec - self.log_lanes, tau)
        accumulators = unroll + vec_per_row
        registers = torch.logsumexp(torch.stack([accumulators, vec_per_row, zero]), dim=0)
        parallel = e[:, : self.n_parallel].sum(1) if self.n_parallel else zero
        if n > 2:
            overhead = torch.logsumexp(outer[:, 1 : n - 1], dim=1)
        else:
            overhead = zero
        scalars = torch.stack(
            [
                vec,
                smooth_min(vec, self.log_lanes, tau),
                vec_per_row,
                unroll,
                accumulators,
                smooth_relu(registers - self.log_regs, tau),
                unroll + vec,
                parallel,
                smooth_min(parallel, self.log_cores, tau),
                smooth_relu(parallel - self.log_cores, tau),
                overhead,
                outer[:, n - 1] if n >= 1 else zero,
            ],
            dim=1,
        )

        loops = e[:, self.loop_of_depth]
        if loops.shape[1] < spec.max_loops:
            loops = torch.cat([loops, loops.new_zeros(batch, spec.max_loops - loops.shape[1])], dim=1)
        at = self.pos_of_depth
        return torch.cat(
            [
                self.constants.expand(batch, -1),
                scalars,
                loops,
                footprint[:, at, :].reshape(batch, -1),
                traffic[:, at, :].reshape(batch, -1),
                intensity[:, at],
                cap_traffic,
                cap_footprint,
            ],
            dim=1,
        )


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


# ============================================================================ cost model
class FelixCostModel(nn.Module):
    """An MLP predicting a config's log latency (seconds) from its features (Felix, Section 4: TenSet's MLP).

    ``forward(features) = log_flops + target_mean + target_std * mlp((features - feature_mean) / feature_std)``:
    the network predicts log seconds per flop (standardised), the inverse of the normalised throughput
    TenSet's model predicts, so one model spans shapes. ``n_hidden_layers`` hidden layers of
    ``hidden_size`` ReLU units (4 linear layers by default, as in TenSet). The normalisers are buffers,
    saved with the weights. ``config`` is plain JSON: everything needed to rebuild the model.
    """

    def __init__(self, spec: FeatureSpec | None = None, hidden_size: int = 256, n_hidden_layers: int = 3) -> None:
        super().__init__()
        spec = FeatureSpec() if spec is None else spec
        hidden_size = check_positive(hidden_size, "hidden_size", integer=True)
        n_hidden_layers = check_positive(n_hidden_layers, "n_hidden_layers", integer=True)
        self.spec = spec
        self.config: dict[str, Any] = {
            "feature_spec": spec.to_dict(),
            "hidden_size": hidden_size,
            "n_hidden_layers": n_hidden_layers,
        }
        n_features = spec.n_features()
        layers: list[nn.Module] = []
        width = n_features
        for _ in range(n_hidden_layers):
            layers += [nn.Linear(width, hidden_size), nn.ReLU()]
            width = hidden_size
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        self.register_buffer("feature_mean", torch.zeros(n_features))
        self.register_buffer("feature_std", torch.ones(n_features))
        self.register_buffer("target_mean", torch.zeros(()))
        self.register_buffer("target_std", torch.ones(()))
        # 0: normalisers not fitted; 1: features fitted; 2: features and targets fitted
        self.register_buffer("fitted", torch.zeros((), dtype=torch.int64))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FelixCostModel:
        if not isinstance(config, dict) or set(config) != {"feature_spec", "hidden_size", "n_hidden_layers"}:
            raise ValueError(f"a cost model config has keys feature_spec, hidden_size, n_hidden_layers; got {config!r}")
        return cls(FeatureSpec.from_dict(config["feature_spec"]), config["hidden_size"], config["n_hidden_layers"])

    def featurizer(self, task: Task) -> TileFeaturizer:
        """The featurizer of ``task`` under this model's spec (ValueError if the task does not fit it)."""
        return TileFeaturizer(task, self.spec)

    def fit_feature_normaliser(self, features: torch.Tensor) -> None:
        with torch.no_grad():
            self.feature_mean.copy_(features.mean(0))
            std = features.std(0) if features.shape[0] > 1 else torch.ones_like(self.feature_std)
            self.feature_std.copy_(torch.where(std > 1e-3, std, torch.ones_like(std)))
            self.fitted.fill_(max(1, int(self.fitted)))

    def fit_target_normaliser(self, features: torch.Tensor, log_latency: torch.Tensor) -> None:
        rel = log_latency - features[:, 0]
        with torch.no_grad():
            self.target_mean.copy_(rel.mean())
            std = rel.std() if rel.numel() > 1 else torch.ones(())
            self.target_std.copy_(std if std > 1e-3 else torch.ones(()))
            self.fitted.fill_(2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.feature_mean) / self.feature_std
        return features[:, 0] + self.target_mean + self.target_std * self.mlp(z).squeeze(-1)


def train_cost_model(
    model: FelixCostModel,
    features: torch.Tensor,
    log_latency: torch.Tensor,
    steps: int,
    lr: float = 1e-3,
    batch_size: int | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
) -> float:
    """Fit ``model`` to ``(features, log_latency)`` with Adam on the squared error in standardised units.

    ``steps`` optimiser steps, on the whole set or on minibatches of ``batch_size`` drawn with
    ``generator`` (in a fixed, seeded order). Fits the normalisers first if they are not yet fitted.
    Returns the last loss.
    """
    if int(model.fitted) < 1:
        model.fit_feature_normaliser(features)
    if int(model.fitted) < 2:
        model.fit_target_normaliser(features, log_latency)
    opt = optimizer if optimizer is not None else torch.optim.Adam(model.parameters(), lr=lr)
    n = features.shape[0]
    loss = torch.zeros(())
    model.train()
    for _ in range(steps):
        if batch_size is None or batch_size >= n:
            x, y = features, log_latency
        else:
            pick = torch.randint(n, (batch_size,), generator=generator)
            x, y = features[pick], log_latency[pick]
        loss = (((model(x) - y) / model.target_std) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


# ============================================================================ pretraining and files
def _as_task(item: object) -> Task:
    from schedule_gym.envs import TilingEnv
    from schedule_gym.tasks import get_task

    if isinstance(item, Task):
        return item
    if isinstance(item, str):
        return get_task(item)
    base = getattr(item, "unwrapped", item)
    if isinstance(base, TilingEnv):
        return base.task
    raise TypeError(f"expected a Task, a preset task name or a TilingEnv, got {item!r}")


def _record_samples(source: object) -> list[tuple[Task, np.ndarray, np.ndarray]]:
    """``(task, configs' log-factors, log costs)`` per task of a record file, store or shipped table key."""
    from schedule_gym.data import TABLES
    from schedule_gym.records import RecordStore

    if isinstance(source, RecordStore):
        store = source
    elif isinstance(source, str) and source in TABLES:
        store = RecordStore(TABLES[source].path)
    elif isinstance(source, (str, os.PathLike)):
        store = RecordStore(source)
    else:
        raise TypeError(f"records must be a record file path, a RecordStore or a shipped table key, got {source!r}")
    by_task: dict[str, list] = {}
    tasks: dict[str, Task] = {}
    for record in store:
        by_task.setdefault(record.task.key, []).append(record.result)
        tasks[record.task.key] = record.task
    out = []
    for key, results in by_task.items():
        ok = [r.latency_s for r in results if r.latency_s is not None]
        if not ok:
            continue
        failed = 10.0 * max(ok)  # as Agent.failed_cost: ten times the worst successful latency
        flat = np.array([[f for fs in r.config for f in fs] for r in results], dtype=np.float64)
        costs = np.array([failed if r.latency_s is None else r.latency_s for r in results])
        out.append((tasks[key], np.log(flat), np.log(costs)))
    return out


def pretrain_cost_model(
    tasks: Iterable[object] = (),
    records: Iterable[object] = (),
    *,
    backend: object = "mock",
    n_samples: int = 8192,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 1e-3,
    hidden_size: int = 256,
    n_hidden_layers: int = 3,
    spec: FeatureSpec | None = None,
    seed: int = 0,
) -> FelixCostModel:
    """A cost model fitted offline, as Felix pretrains on TenSet (Section 4), for :class:`FelixAgent`.

    Args:
        tasks: tasks (a :class:`Task`, a preset name such as ``"gemm-512"`` or a ``TilingEnv``) of which
            ``n_samples`` configs each, drawn uniformly, are scored by ``backend``. Never include the task
            the model will later tune if the point is to measure transfer.
        records: measurement records to fit too: record file paths, ``RecordStore`` objects or keys of
            shipped tables (``"gemm-128-323-znver5-1t"``: real Zen 5 latencies). Failed records cost ten
            times the worst success of their task, as in the search.
        backend: ``"mock"`` (the default CPU profile), a profile name, or a ``LatencyBackend``; a
            ``MockBackend`` is scored in bulk with its analytic model, any other backend measures.
        epochs: passes over the samples, in minibatches of ``batch_size``, Adam at ``lr``.
        spec: the feature spec (default: :meth:`FeatureSpec.for_tasks` of every task).
        seed: seeds the config draws and the model's initialisation and batches (global RNG untouched).

    >>> model = pretrain_cost_model(["gemm-64"], n_samples=64, epochs=1, hidden_size=8)
    >>> model.config["hidden_size"]
    8
    """
    from schedule_gym.backends import LatencyBackend, MockBackend
    from schedule_gym.backends.mock import PROFILES

    n_samples = check_positive(n_samples, "n_samples", integer=True)
    epochs = check_positive(epochs, "epochs", integer=True)
    batch_size = check_positive(batch_size, "batch_size", integer=True)
    lr = check_positive(lr, "lr")
    if isinstance(backend, str):
        if backend == "mock":
            backend = MockBackend()
        elif backend in PROFILES:
            backend = MockBackend(profile=backend)
        else:
            raise ValueError(
                f"backend must be 'mock', a mock profile name ({', '.join(PROFILES)}) or a LatencyBackend, "
                f"got {backend!r}"
            )
    if not isinstance(backend, LatencyBackend):
        raise TypeError(f"backend must be 'mock', a mock profile name or a LatencyBackend, got {backend!r}")
    task_list = [_as_task(t) for t in tasks]
    if isinstance(records, (str, os.PathLike)):
        records = [records]
    samples: list[tuple[Task, np.ndarray, np.ndarray]] = []
    for source in records:
        samples.extend(_record_samples(source))
    rng = np.random.default_rng(seed)
    for task in task_list:
        space = TileSpace(task)
        idx = space.sample_indices(rng, min(n_samples, space.size))
        if isinstance(backend, MockBackend):
            lat = backend.model_latency_s(task, idx)
        else:
            results = backend.measure(task, [space.config(int(i)) for i in idx])
            ok = [r.latency_s for r in results if r.latency_s is not None]
            failed = 10.0 * max(ok) if ok else 1.0
            lat = np.array([failed if r.latency_s is None else r.latency_s for r in results])
        flat = np.concatenate(space.factors_of_indices(idx), axis=1).astype(np.float64)
        samples.append((task, np.log(flat), np.log(lat)))
    if not samples:
        raise ValueError("pretrain_cost_model needs at least one task or record source with a successful measurement")
    spec = FeatureSpec.for_tasks([t for t, _, _ in samples]) if spec is None else spec
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = FelixCostModel(spec, hidden_size, n_hidden_layers)
        feats, targets = [], []
        with torch.no_grad():
            for task, log_f, log_lat in samples:
                feats.append(TileFeaturizer(task, spec)(torch.from_numpy(log_f).to(torch.float32)))
                targets.append(torch.from_numpy(log_lat).to(torch.float32))
        x, y = torch.cat(feats), torch.cat(targets)
        generator = torch.Generator().manual_seed(seed)
        steps = epochs * max(1, math.ceil(x.shape[0] / batch_size))
        train_cost_model(model, x, y, steps=steps, lr=lr, batch_size=batch_size, generator=generator)
    return model


def save_cost_model(model: FelixCostModel, path: str | os.PathLike) -> None:
    """Write ``model`` as a plain ``state_dict`` and a JSON config (no pickled objects, no code)."""
    if not isinstance(model, FelixCostModel):
        raise TypeError(f"expected a FelixCostModel, got {type(model).__name__}")
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    torch.save({"format": CHECKPOINT_FORMAT, "config": json.dumps(model.config), "state_dict": state}, Path(path))


def load_cost_model(path: str | os.PathLike) -> FelixCostModel:
    """Read a model written by :func:`save_cost_model`.

    The file is read with ``torch.load(weights_only=True)``, which unpickles only tensors and plain
    containers, so a file cannot run code; anything but the expected layout (format tag, JSON config,
    a ``state_dict`` of finite tensors of the right names and shapes) is a ``ValueError`` naming the path.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cost model file {str(path)!r} does not exist")
    where = f"{str(path)!r} is not a Felix cost model checkpoint"
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError (disallowed globals), RuntimeError, EOFError, ...
        reason = " ".join(str(exc).split())[:300]
        raise ValueError(f"{where}: it cannot be loaded as plain tensors ({type(exc).__name__}: {reason})") from None
    if not isinstance(data, dict) or set(data) != {"format", "config", "state_dict"}:
        found = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: expected a dict with keys format, config, state_dict, found {found}")
    if data["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"{where}: format {data['format']!r}, expected {CHECKPOINT_FORMAT!r}")
    try:
        config = json.loads(data["config"]) if isinstance(data["config"], str) else None
        if config is None:
            raise ValueError("config is not a JSON string")
        model = FelixCostModel.from_config(config)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: bad config ({exc})") from None
    state = data["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ValueError(f"{where}: state_dict must map names to tensors")
    expected = model.state_dict()
    if set(state) != set(expected):
        raise ValueError(f"{where}: state_dict keys {sorted(state)} differ from the model's {sorted(expected)}")
    for key, value in state.items():
        if value.shape != expected[key].shape or value.dtype != expected[key].dtype:
            raise ValueError(
                f"{where}: {key} has shape {tuple(value.shape)} {value.dtype}, "
                f"expected {tuple(expected[key].shape)} {expected[key].dtype}"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}: {key} holds non-finite values")
    model.load_state_dict(state)
    model.eval()
    return model


# ============================================================================ the agent
@dataclass
class _Data:
    """Measurements so far as features and log costs (the model's training set)."""

    indices: list[int] = field(default_factory=list)
    features: torch.Tensor | None = None


class FelixAgent(Agent):
    """Felix's per-subgraph search (Zhao et al., Section 3.4, Algorithm 1) on a tile space.

    Each round:

    1. draw ``n_seeds`` configs uniformly from the space (valid by construction: Algorithm 1's rejection
       sampling of valid starting points) and take their log-factors as starting values;
    2. run ``n_steps`` Adam steps (step size ``lr``) on all seeds as one batch, minimising Eq. 4:
       predicted log latency plus ``penalty_weight * sum max(p, 0)^2`` over the bound penalties;
    3. round every visited point (the starts included) to a valid config (:meth:`LogRelaxation.round_to_indices`),
       dedupe, drop configs already measured, rank by the model and measure the best ``n_measure`` as one
       batch (fewer when the budget has fewer left). If descent found fewer new configs than that (a
       small or nearly exhausted space), the batch is filled with the model's best of a random draw of
       unmeasured configs, so the search never stalls;
    4. update the cost model on every measurement so far (failed ones cost :meth:`Agent.failed_cost`):
       ``train_steps`` Adam steps at ``train_lr`` on minibatches of ``train_batch_size`` drawn from all of
       them (the whole set while it is smaller), continuing the same optimiser across rounds.

    Rounds repeat until the budget is spent.

    Cost model (``cost_model``):

    * ``None`` (default): a fresh :class:`FelixCostModel` (``hidden_size``, ``n_hidden_layers``) whose
      feature normaliser is fitted on random configs of the task. An untrained model would steer the
      first descent nowhere in particular, so the first round instead measures ``n_measure`` configs
      drawn uniformly at random, and the model is trained on them (and on ``s0``) before the first descent;
    * a path to a file written by :func:`save_cost_model`, or a :class:`FelixCostModel`: a pretrained
      model (Felix's setting: pretrained on TenSet, then updated online). Every run starts from a copy
      of it, so runs are independent and repeatable; the first round already descends on it.

    Args:
        seed: seeds ``self.rng`` (starting points, random batches) and torch (model initialisation, minibatches).
        n_seeds, n_steps, n_measure: Algorithm 1's ``nSeeds``, ``nSteps``, ``nMeasure`` (paper: 8, 200, 16).
        lr: Adam's step size in log-factor units during descent.
        penalty_weight: Eq. 4's ``lambda``.
        cost_model: see above.
        train_steps, train_lr, train_batch_size: the online model update of each round.
        hidden_size, n_hidden_layers: the architecture of a fresh model (ignored with ``cost_model``).

    Deviations from the paper: one symbolic schedule per task (our template), so Algorithm 1's loop over
    sketches is a single one; factors are rounded factor by factor to divisors of what is left of the
    extent; the features are a GEMM-template analogue of Felix's (Ansor's) features, not its 82; the
    batch is filled at random when descent finds too few new configs; without a pretrained model the
    first round is random.

    Speed: a round (8 seeds x 200 steps, rounding, ranking, model update) takes about 0.3-0.7 s with torch
    on one thread. With torch's default OpenMP threads on a 2-core machine that another process keeps
    busy, spin-waiting workers made it 5-10x slower, so :meth:`Agent.run` runs torch agents on one
    thread and restores the thread count afterwards.

    >>> from schedule_gym.envs import gemm_env
    >>> result = FelixAgent(seed=0, n_steps=20).run(gemm_env(64, 64, 64), 40)
    >>> result.num_measurements
    40
    """

    name = "felix"
    uses_torch = True

    def __init__(
        self,
        seed: int = 0,
        n_seeds: int = 8,
        n_steps: int = 200,
        n_measure: int = 16,
        lr: float = 0.05,
        penalty_weight: float = 10.0,
        cost_model: FelixCostModel | str | os.PathLike | None = None,
        train_steps: int = 50,
        train_lr: float = 1e-3,
        train_batch_size: int = 256,
        hidden_size: int = 256,
        n_hidden_layers: int = 3,
    ) -> None:
        super().__init__(seed)
        self.n_seeds = check_positive(n_seeds, "n_seeds", integer=True)
        self.n_steps = check_positive(n_steps, "n_steps", integer=True)
        self.n_measure = check_positive(n_measure, "n_measure", integer=True)
        self.lr = check_positive(lr, "lr")
        self.penalty_weight = check_positive(penalty_weight, "penalty_weight")
        self.train_steps = check_positive(train_steps, "train_steps", integer=True)
        self.train_lr = check_positive(train_lr, "train_lr")
        self.train_batch_size = check_positive(train_batch_size, "train_batch_size", integer=True)
        self.hidden_size = check_positive(hidden_size, "hidden_size", integer=True)
        self.n_hidden_layers = check_positive(n_hidden_layers, "n_hidden_layers", integer=True)
        if cost_model is None:
            self._pretrained: FelixCostModel | None = None
            self.cost_model: str | None = None
        elif isinstance(cost_model, FelixCostModel):
            self._pretrained = copy.deepcopy(cost_model).eval()
            self.cost_model = "pretrained FelixCostModel"
        elif isinstance(cost_model, (str, os.PathLike)):
            self._pretrained = load_cost_model(cost_model)
            self.cost_model = str(cost_model)
        else:
            raise TypeError(f"cost_model must be None, a path or a FelixCostModel, got {type(cost_model).__name__}")

    # ----------------------------------------------------------------------------- model
    def _new_model(self) -> FelixCostModel:
        task = self.space.task
        if self._pretrained is not None:
            model = copy.deepcopy(self._pretrained)
            model.featurizer(task)  # raises a clear ValueError if the task does not fit its spec
            return model
        model = FelixCostModel(FeatureSpec.for_tasks([task]), self.hidden_size, self.n_hidden_layers)
        sample = self.space.sample_indices(self.rng, min(2048, self.space.size))
        featurizer = model.featurizer(task)
        with torch.no_grad():
            model.fit_feature_normaliser(featurizer(featurizer.log_factors_of_indices(self.space, sample)))
        return model.eval()

    def _train(self) -> None:
        rows = self._result.history
        failed = self.failed_cost()
        new = [r.index for r in rows[len(self._data.indices) :]]
        if new:
            with torch.no_grad():
                feats = self._featurizer(self._featurizer.log_factors_of_indices(self.space, np.array(new)))
            self._data.features = feats if self._data.features is None else torch.cat([self._data.features, feats])
            self._data.indices.extend(new)
        costs = [math.log(failed if r.latency_s is None else r.latency_s) for r in rows]
        train_cost_model(
            self._model, self._data.features, torch.tensor(costs, dtype=torch.float32), steps=self.train_steps,
            batch_size=self.train_batch_size, optimizer=self._optimizer,
        )

    def _predict(self, indices: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            feats = self._featurizer(self._featurizer.log_factors_of_indices(self.space, indices))
            return self._model(feats).numpy()

    # ----------------------------------------------------------------------------- search
    def _descend(self) -> np.ndarray:
        """Algorithm 1, lines 12-19: Adam from ``n_seeds`` random valid configs; every visited point."""
        starts = self.space.sample_indices(self.rng, self.n_seeds, replace=self.n_seeds > self.space.size)
        free = self._relax.free_of_indices(starts).requires_grad_(True)
        visited = [free.detach().clone()]
        if self._relax.n_free:
            opt = torch.optim.Adam([free], lr=self.lr)
            for _ in range(self.n_steps):
                log_factors = self._relax.log_factors(free)
                objective = self._model(self._featurizer(log_factors)).sum()
                objective = objective + self.penalty_weight * self._relax.penalty(log_factors).sum()
                (grad,) = torch.autograd.grad(objective, free)
                free.grad = grad
                opt.step()
                visited.append(free.detach().clone())
        return torch.cat(visited).numpy()

    def _candidates(self, visited: np.ndarray, k: int) -> list[int]:
        """Algorithm 1, lines 20-22: round, dedupe, drop measured, best ``k`` by the model (filled at random)."""
        indices = np.unique(self._relax.round_to_indices(visited))
        indices = np.array([i for i in indices.tolist() if self.is_new(i)], dtype=np.int64)
        chosen: list[int] = []
        if indices.size:
            order = np.argsort(self._predict(indices), kind="stable")
            chosen = indices[order[:k]].tolist()
        if len(chosen) < k:
            taken = {r.index for r in self._result.history} | set(chosen)
            draws = draw_without_replacement(self.rng, self.space.size, taken)
            pool = [i for _, i in zip(range(8 * (k - len(chosen))), draws)]
            if pool:
                pool_arr = np.array(pool, dtype=np.int64)
                order = np.argsort(self._predict(pool_arr), kind="stable")
                chosen += pool_arr[order[: k - len(chosen)]].tolist()
        return chosen

    def _batch_size(self) -> int:
        return self.n_measure if self.remaining is None else min(self.n_measure, self.remaining)

    def search(self) -> None:
        self._relax = LogRelaxation(self.space)
        self._model = self._new_model()
        self._featurizer = self._model.featurizer(self.space.task)
        self._optimizer = torch.optim.Adam(self._model.parameters(), lr=self.train_lr)
        self._data = _Data()
        if self._pretrained is None:
            taken = {r.index for r in self._result.history}
            draws = draw_without_replacement(self.rng, self.space.size, taken)
            self.measure([i for _, i in zip(range(self._batch_size()), draws)])
            self.check_budget()
            self._train()
        while True:
            self.check_budget()
            batch = self._candidates(self._descend(), self._batch_size())
            if not batch:
                return
            self.measure(batch)
            self.check_budget()
            self._train()
