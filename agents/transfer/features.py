"""Features of a tile config that mean the same thing for every operator: what a cross-operator cost model sees.

A cost model pretrained on some operators can rank configs of another (a depthwise convolution after
dense ones) only if its features describe the tiled loop nest on the machine, not the operator's own
knobs. :func:`config_features` gives ``(n, N_FEATURES)`` float32 rows, every entry finite, built from the
one description of the nest (:class:`~schedule_gym.loopnest.LoopNest`, operand footprints from
:func:`~schedule_gym.loopnest.operand_extents`) and the machine's structural numbers (a
:class:`~schedule_gym.backends.mock.CPUProfile`'s vector width, FMA units, load ports, registers, cores,
cache sizes, usable share, line size and associativity). It never reads a profile's fitted coefficients
(bandwidths, FMA latency, loop-overhead cycles, spill and gather costs, overlap, fixed overheads) and never
a latency: the model learns how the counts below combine into time.

=========================  ==================================================================================
entries                    meaning
=========================  ==================================================================================
parallel                   ``log2`` of the parallel extent (the fused leading spatial loops), ``log2`` of the
                           busy cores (``par / ceil(par / cores)``), whether a parallel region is opened at all
vector                     ``log2`` of the vectorised extent, the share of vector lanes it fills, ``log2`` of
                           the unrolled extent
``log2 flops``             the task's size (fixed costs weigh more on small tasks)
register tile              ``log2`` of the accumulators (the output tile below the last reduction loop, in
                           vectors), ``log2`` accumulators per FMA unit (independent chains), the share of
                           accumulators that spill (registers beyond the profile's)
loads                      per FMA of the register tile: vector loads and broadcasts, gathered elements
                           (strided axes along the vector loop), ``log2`` of load-port cycles per FMA cycle
``log2 i-cache body``      unrolled extent times vectors per row
``log2 compute / flop``    ideal cycles per flop per busy core, lanes and load ports counted
``log2 overhead / flop``   iterations of loops neither unrolled nor vectorised, per flop per busy core
3 x ``log2 bytes / flop``  per cache level (a profile with fewer repeats its last): bytes moved into it per
                           flop (per busy core unless shared), from the outermost tile that fits it (in L1,
                           rows a multiple of the set stride apart count once per row beyond the ways), less
                           the reuse across the loops just outside that tile that do not index an operand
=========================  ==================================================================================

The operator's own parameters (stride, groups, kernel) and the ``"features"`` observation's per-level tile
depths are left out on purpose: fitted on convolutions and validated on dense layers and batch matmuls, a
model given them ranked the unseen operators' best configs worse (``examples/pretrain_cost_model.py``).

:class:`NestFeaturizer` holds one task's precomputed nest (build it once per task, call it per batch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedule_gym.envs.features import LEVELS, _TaskNest
from schedule_gym.loopnest import operand_extents
from schedule_gym.spaces import TileSpace

__all__ = ["FEATURE_NAMES", "FEATURE_VERSION", "N_FEATURES", "NestFeaturizer", "config_features"]

#: Changes whenever a feature's meaning changes: a model saved with another version is refused.
FEATURE_VERSION = "transfer-features-v1"
FEATURE_NAMES: tuple[str, ...] = (
    "parallel_log2", "busy_cores_log2", "parallel_region", "vector_log2", "lane_share", "unroll_log2", "flops_log2",
    "accumulators_log2", "chains_per_fma_unit_log2", "spill_share", "vector_loads_per_fma", "gathers_per_fma",
    "load_pressure_log2", "icache_body_log2", "compute_cycles_per_flop_log2", "overhead_iters_per_flop_log2",
) + tuple(f"l{c + 1}_bytes_per_flop_log2" for c in range(LEVELS))
N_FEATURES = len(FEATURE_NAMES)
_TINY = 1e-12  # floor under a log: a count of zero becomes a large negative, still finite


def _log2(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(x, _TINY))


class NestFeaturizer:
    """:func:`config_features` for one task's space on one profile, the nest precomputed."""

    def __init__(self, space: TileSpace, profile: object) -> None:
        facts = _TaskNest(space, profile)  # the observation's facts of the nest and the machine, shared
        self.space, self.task, self.nest, self.dim_pos = space, facts.task, facts.nest, facts.dim_pos
        self.lanes, self.cores, self.registers, self.line = facts.lanes, facts.cores, facts.registers, facts.line
        self.capacity = facts.capacity  # usable bytes of each described level
        p: Any = profile
        self.flops = float(self.task.flops)
        self.fma_units = float(p.fma_units)
        self.load_ports = float(p.load_ports)
        caches = list(p.caches)
        self.shared = [caches[min(c, len(caches) - 1)].shared for c in range(LEVELS)]
        self.critical_stride = caches[0].size_bytes // int(p.l1_associativity)
        self.ways = float(p.l1_associativity)

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        """``(len(indices), N_FEATURES)`` float32 rows of the configs with these dense indices."""
        task, nest = self.task, self.nest
        idx = np.asarray(indices, dtype=np.int64)
        n = idx.shape[0]
        factors = self.space.factors_of_indices(idx)
        ext = [factors[self.dim_pos[d]][:, level].astype(np.float64) for d, level in nest.order]
        n_loops = len(ext)
        dims = nest.dims_of_loops
        par = np.prod(ext[: nest.n_parallel], axis=0) if nest.n_parallel else np.ones(n)
        busy = np.minimum(par / np.ceil(par / self.cores), self.cores)
        vec = ext[nest.vector] if nest.vector is not None else np.ones(n)
        unroll = ext[nest.unroll] if nest.unroll is not None else np.ones(n)
        nvec = np.ceil(vec / self.lanes)
        lane_share = vec / (nvec * self.lanes)
        last_reduction = max((q for q, loop in enumerate(nest.loops) if loop.reduction), default=-1)
        inner = [q for q in range(max(last_reduction + 1, nest.n_parallel), n_loops) if q != nest.vector]
        acc = nvec * np.prod([ext[q] for q in inner], axis=0) if inner else nvec.copy()

        # loads per step of the register tile (inputs of the reduction): a vector per vector of a contiguous
        # run along the vector loop, a broadcast where the vector loop does not index the operand, an element
        # per lane where it indexes a strided axis; times the tile's loops that index the operand
        vec_dim = dims[nest.vector] if nest.vector is not None else None
        reduction_dims = {d.name for d in task.dims if d.reduction}
        vector_loads, gathers = np.zeros(n), np.zeros(n)
        for operand in task.operands:
            if operand.output or not reduction_dims & set(operand.dims):
                continue
            gathered = vec_dim in operand.dims and not any(
                t.dim == vec_dim and t.stride == 1 and t.div == 1 for t in operand.index[-1])
            per_step = vec if gathered else (nvec if vec_dim in operand.dims else np.ones(n))
            for q in inner:
                if dims[q] in operand.dims:
                    per_step = per_step * ext[q]
            if gathered:
                gathers += per_step
            else:
                vector_loads += per_step
        fma_cycles = acc / self.fma_units
        load_cycles = (vector_loads + gathers) / self.load_ports
        load_share = fma_cycles / np.maximum(fma_cycles, load_cycles)
        spill = np.clip((acc + nvec + 1.0 - self.registers) / acc, 0.0, 1.0)
        peak_flops_per_cycle = 2.0 * self.lanes * self.fma_units
        compute = 1.0 / (peak_flops_per_cycle * lane_share * load_share * np.minimum(1.0, fma_cycles)) / busy

        iters, overhead = np.ones(n), np.zeros(n)
        for q in range(n_loops):
            iters = iters * ext[q]
            if q not in (nest.vector, nest.unroll):
                overhead += np.where(ext[q] > 1, iters, 0.0)

        columns = [
            np.log2(par), np.log2(busy), (par > 1).astype(np.float64), np.log2(vec), lane_share, np.log2(unroll),
            np.full(n, np.log2(self.flops)), np.log2(acc), np.log2(fma_cycles), spill, vector_loads / acc,
            gathers / acc, _log2(load_cycles / fma_cycles), np.log2(unroll * nvec), np.log2(compute),
            _log2(overhead / self.flops / busy),
        ]
        for shared, moved in zip(self.shared, self._traffic(ext, dims, n)):
            columns.append(_log2(moved / self.flops / (1.0 if shared else busy)))
        return np.stack(columns, axis=1).astype(np.float32)

    def _traffic(self, ext: list[np.ndarray], dims: tuple[str, ...], n: int) -> list[np.ndarray]:
        """Bytes moved into each cache level (see the module docstring)."""
        task, line = self.task, self.line
        bytes_ = task.dtype_bytes
        n_loops = len(ext)
        tile = {d.name: [np.ones(n)] * (n_loops + 1) for d in task.dims}
        for d in task.dims:
            column, running = [np.ones(n)] * (n_loops + 1), np.ones(n)
            for q in reversed(range(n_loops)):
                if dims[q] == d.name:
                    running = running * ext[q]
                column[q] = running
            tile[d.name] = column
        outer = np.cumprod(np.stack([np.ones(n)] + ext), axis=0)  # iterations of the loops outside position p
        footprint = np.zeros((n_loops + 1, n))
        aliased = np.zeros((n_loops + 1, n))
        moved = np.zeros((n_loops + 1, n))
        extents = task.extent_of
        for operand in task.operands:
            full_run = float(operand.shape(extents)[-1])
            indexed = set(operand.dims)
            weight = 2.0 if operand.output else 1.0  # outputs are read and written back
            row_stride = full_run * bytes_
            conflicts = len(operand.index) > 1 and self.critical_stride and row_stride % self.critical_stride == 0
            reuse = np.ones(n)
            for p in range(n_loops + 1):
                if p > 0:
                    transparent = (dims[p - 1] not in indexed) | (ext[p - 1] == 1)
                    reuse = np.where(transparent, reuse * ext[p - 1], 1.0)
                rows, run = operand_extents(operand, {d: tile[d][p] for d in indexed}, np.ceil, np.minimum)
                rows = rows * np.ones(n)
                fp = np.where(run == full_run, np.ceil(rows * run * bytes_ / line) * line,
                              rows * np.ceil(run * bytes_ / line) * line)
                footprint[p] += fp
                aliased[p] += fp * np.maximum(1.0, rows / self.ways) if conflicts else fp
                moved[p] += weight * fp * outer[p] / reuse
        columns = np.arange(n)
        out = []
        for c, capacity in enumerate(self.capacity):
            fits = (aliased if c == 0 else footprint) <= capacity
            out.append(moved[np.argmax(fits, axis=0), columns])
        return out


def config_features(space: TileSpace, profile: object, indices: np.ndarray) -> np.ndarray:
    """``(len(indices), N_FEATURES)`` float32 features (:data:`FEATURE_NAMES`) of configs of ``space``'s task
    on the machine ``profile`` describes (a :class:`~schedule_gym.backends.mock.CPUProfile`). For many calls
    on one task, build a :class:`NestFeaturizer` once."""
    return NestFeaturizer(space, profile)(indices)
