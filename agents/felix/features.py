"""The features: :class:`FeatureSpec` (what they know of the machine, their layout) and
:class:`TileFeaturizer` (smooth log-features of a task's tiled loop nest as a differentiable function of
log split factors; Zhao et al., Section 3.3)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from schedule_gym.agents.base import check_positive
from schedule_gym.agents.felix.smooth import is_one_gate, smooth_max, smooth_min, smooth_relu, smooth_step
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task

__all__ = ["FeatureSpec", "TileFeaturizer"]


@dataclass(frozen=True)
class FeatureSpec:
    """What the features know of the machine, their layout, and the smoothing temperatures.

    Per-depth features are indexed from the innermost loop outwards and padded to ``max_loops`` loops
    (padding loops have extent 1, which is what a task with fewer splits means), so one cost model
    serves every task of ``n_dims`` dimensions and ``n_operands`` operands with at most ``max_loops``
    loops, whatever its shape or splits: the innermost loops of a 3/2/3 and a 4/2/4 GEMM line up
    (``n2 m2 k1 n1 m1 k0 ...`` with ``n3 m3 k1 n2 m2 k0 ...``), the way Ansor's fixed-length feature
    vectors (which Felix reuses) summarise any loop nest.

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
    them), relaxed or integer, and returns ``(batch, spec.n_features())`` features. The loop nest is the
    CPU template's, read from :meth:`schedule_gym.loopnest.LoopNest.cpu`: the loops before the first
    reduction loop are fused and parallel, the innermost loop is vectorised and the one outside it
    unrolled, and the register tile they form accumulates across the loops outside it. With ``q`` a loop
    (0 outermost) and ``p`` a nesting depth (the tile below position ``p`` is spanned by loops
    ``q >= p``), the features are:

    * ``log_flops`` (always first: the cost model predicts log latency relative to it) and the log
      extent of every dimension;
    * vector loop: its log extent, smoothly capped at the vector lanes, and the log number of vectors
      per row; unrolled loop: its log extent; register tile: log accumulator registers, log register
      pressure over the register file, log elements; parallel loops: log extent, smoothly capped at the
      cores, and log iterations per core; log iterations of the loops that are neither vectorised nor
      unrolled (loop overhead);
    * per loop, innermost first: its log extent;
    * per depth, innermost first, per operand: the log footprint of its tile in bytes, rows times the
      contiguous run counted in whole cache lines (smoothly), and the log traffic into a cache holding
      that tile: the footprint times the iterations outside it, less the reuse across the loops just
      outside that do not index the operand (a loop of extent 1 does not break reuse: a smooth select);
      per depth, the log arithmetic intensity (flops of the tile per byte of its footprint);
    * per capacity in ``spec.capacities_bytes``: the log traffic and log footprint of the outermost tile
      that fits it (a smooth "first fit" over depths, averaging logs).

    Footprints follow each operand's index expressions (:func:`schedule_gym.loopnest.operand_extents`,
    the formula the mock model uses). For an operand whose every axis is one dimension (GEMM's), the
    rows are the product of the tile extents of its outer axes and the run is the extent of its
    contiguous axis, all in log space. For any other operand (a convolution's input
    ``I[n, h*2 + rh, w*2 + rw, rc]``) the formula runs on the tile extents ``e^{log}``, with the ceiling
    of a grouped channel's ``ceil(co / div)`` smoothed as ``max(x, 1)`` and the ``min`` of an axis's
    bounding box and distinct count smoothed on their logs (:func:`smooth_max`, :func:`smooth_min`).
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
        nest = LoopNest.cpu(task)
        order = nest.order
        loop_dim = [dim_pos[d] for d in nest.dims_of_loops]
        self.loop_col = torch.tensor([int(offsets[dim_pos[d]]) + level for d, level in order])
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
        # operands whose every axis is one dimension: rows and run are sums of log tile extents
        self.rows_mat = torch.zeros(n_dims, len(ops))  # non-contiguous dimensions of each simple operand
        self.contig = torch.tensor([dim_pos[o.dims[-1]] if o.simple else 0 for o in ops])
        # the others (strided, windowed, grouped axes): rows and run by the shared footprint formula
        self.formula_operands = [(o, operand) for o, operand in enumerate(ops) if not operand.simple]
        self.dim_pos = dim_pos
        indexes = torch.zeros(len(ops), n)  # [o, q] = 1 if loop q indexes operand o (a dim in any term)
        for o, operand in enumerate(ops):
            if operand.simple:
                for d in operand.dims[:-1]:
                    self.rows_mat[dim_pos[d], o] = 1.0
            indexed_by = set(operand.dims)
            for q in range(n):
                indexes[o, q] = 1.0 if nest.dims_of_loops[q] in indexed_by else 0.0
        self.indexes = indexes
        self.not_indexes = 1.0 - indexes
        self.below = torch.tril(torch.ones(n + 1, n, dtype=torch.bool), diagonal=-1)  # [p, q]: q < p

        # structure of the template: parallel prefix, vector loop, unrolled loop
        self.n_parallel = nest.n_parallel
        self.vec_loop = nest.vector
        self.unroll_loop = nest.unroll

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
    def _formula_extents(
        self, tiles: torch.Tensor, rows: torch.Tensor, run: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``rows`` and ``run`` (log, ``(B, n + 1, O)``) with the columns of non-simple operands replaced
        by :func:`operand_extents` of the tile extents, smoothed (see the class docstring).

        Computed in float64: off the domain (relaxed factors far above their extents) products of tile
        extents overflow float32 before their logs are taken.
        """
        tau = self.spec.tau_max
        extents = torch.exp(tiles.to(torch.float64))

        def ceil(x: torch.Tensor) -> torch.Tensor:  # ceil(x) = max(x, 1) where x <= 1 or x is an integer
            return torch.exp(smooth_max(torch.log(x), 0.0, tau))

        def minimum(box: torch.Tensor, distinct: torch.Tensor) -> torch.Tensor:
            return torch.exp(smooth_min(torch.log(_positive(box)), torch.log(distinct), tau))

        rows_cols, run_cols = list(rows.unbind(2)), list(run.unbind(2))
        for o, operand in self.formula_operands:
            tile = {d: extents[:, :, self.dim_pos[d]] for d in operand.dims}
            rows_o, run_o = operand_extents(operand, tile, ceil, minimum)
            rows_o = rows_o * torch.ones_like(extents[:, :, 0])  # 1.0 for an operand of one axis
            rows_cols[o] = torch.log(rows_o).to(rows.dtype)
            run_cols[o] = torch.log(_positive(run_o)).to(run.dtype)
        return torch.stack(rows_cols, dim=2), torch.stack(run_cols, dim=2)

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
        rows = tiles @ self.rows_mat  # (B, n + 1, O) log rows
        run = tiles[:, :, self.contig]  # (B, n + 1, O) log contiguous run, elements
        if self.formula_operands:
            rows, run = self._formula_extents(tiles, rows, run)
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


def _positive(box: torch.Tensor) -> torch.Tensor:
    """``box`` where it is at least 1/2, else ``e^{2 box - 1} / 2``: the same value and slope at 1/2, positive.

    A bounding box ``1 + sum stride * (extent - 1)`` is at least 1 at every valid tile; relaxed extents
    below 1 (off the domain, where the bound penalties pull back) can make it zero or negative, and its
    log must stay finite with a gradient.
    """
    return torch.where(box >= 0.5, box, 0.5 * torch.exp(2.0 * torch.clamp(box, max=0.5) - 1.0))
