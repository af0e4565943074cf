"""The mock's analytic latency model of the tiled loop nest on a CPU, vectorised with NumPy.

It models the loop nest the CPU template builds, read from the one description of it
(:class:`schedule_gym.loopnest.LoopNest`; for GEMM 4/2/4: ``m0 n0 m1 n1 k0 m2 n2 k1 m3 n3``): the
leading spatial loops run in parallel over the cores, the innermost loop is vectorised, the one outside
it is unrolled, and the register tile they form accumulates in registers across the loops outside it.
Operand footprints follow each operand's index expressions (:func:`schedule_gym.loopnest.operand_extents`),
so a convolution's input tile counts the rows its window reads. A config's latency combines

* **compute**: vector FMAs at the core's peak, scaled by a micro-kernel efficiency (vector lanes used by
  the innermost extent; enough independent accumulators to hide FMA latency; loads per FMA against the
  load ports; register spills when the tile needs more vector registers than there are, each spilled
  accumulator costing memory traffic per FMA; an instruction cache limit on the unrolled body);
* **loop overhead**: a few cycles per iteration of every loop that is neither unrolled nor vectorised;
* **data movement**: for each cache level, the outermost tile of the nest whose footprint (in cache
  lines, so narrow contiguous runs cost whole lines; in L1, tiles whose rows are a multiple of 4 KiB apart
  count once per row beyond the associativity) fits that level; the traffic into the level is that
  tile's footprint times the iterations of the loops outside it, less the reuse of an operand across the
  loops just outside the tile that do not index it; divided by the level's fill bandwidth;
* **parallelism**: cores used and load balance from the parallel extent, plus a fixed launch overhead.

The terms are combined as a roofline with partial overlap: ``max(terms) + overlap * (sum - max)``. The
model is deterministic and scores any number of configs in one vectorised call, so tests and benchmarks
can score whole spaces and know exact optima. Its numbers come from a
:class:`~schedule_gym.backends.mock.profile.CPUProfile`.
"""

from __future__ import annotations

import numpy as np

from schedule_gym.backends.mock.profile import CPUProfile
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task

__all__ = ["MOCK_MODEL_VERSION", "mock_latency_s"]

#: Version of the analytic model; records of mock measurements remember it.
MOCK_MODEL_VERSION = "mock-cpu-v2"


def mock_latency_s(task: Task, space: TileSpace, indices: np.ndarray, profile: CPUProfile) -> np.ndarray:
    """Deterministic model latency (seconds) of the configs with the given dense indices."""
    idx = np.asarray(indices, dtype=np.int64)
    factors = space.factors_of_indices(idx)
    dim_pos = {name: x for x, name in enumerate(task.dim_names)}
    nest = LoopNest.cpu(task)
    order = nest.order
    n_loops = len(order)
    ext = [factors[dim_pos[d]][:, level].astype(np.float64) for d, level in order]
    dim_of_loop = nest.dims_of_loops
    bytes_ = task.dtype_bytes
    line = profile.cache_line_bytes
    lanes = max(1, profile.vector_bits // (8 * bytes_))
    flops = float(task.flops)
    n = idx.shape[0]

    # ---- parallelism: the leading spatial loops are fused and run in parallel
    par = np.ones(n)
    for q in range(nest.n_parallel):
        par *= ext[q]
    cores = float(profile.cores)
    chunks = np.ceil(par / cores)
    eff_cores = par / chunks  # average busy cores: par / ceil(par / cores), at most `cores`
    eff_cores = np.minimum(eff_cores, cores)

    # ---- micro-kernel: innermost loop vectorised, the one outside it unrolled. The accumulators are the
    # whole output tile below the innermost reduction loop (for GEMM 4/2/4: m3 x n3; for a conv2d's
    # SSRSRS nest: n3 x h3 x w3 x co3), which must stay in registers across that loop
    vec = ext[nest.vector] if nest.vector is not None else np.ones(n)
    unroll = ext[nest.unroll] if nest.unroll is not None else np.ones(n)
    last_reduction = max((q for q, loop in enumerate(nest.loops) if loop.reduction), default=-1)
    inner = [q for q in range(max(last_reduction + 1, nest.n_parallel), n_loops) if q != nest.vector]
    tile_rows = np.ones(n)
    for q in inner:
        tile_rows = tile_rows * ext[q]
    nvec = np.ceil(vec / lanes)
    lane_eff = vec / (nvec * lanes)
    acc = tile_rows * nvec
    latency_eff = np.minimum(1.0, acc / (profile.fma_latency_cycles * profile.fma_units))
    fma_cycles = acc / profile.fma_units
    # loads per step of the register tile, per input of the reduction: a vector load per vector of a
    # contiguous run along the vector loop, a broadcast where the vector loop does not index it, one load
    # per element (gather_cost each) where it indexes a strided axis; times the tile's rows it spans
    loads = 0.0
    vec_dim = dim_of_loop[nest.vector] if nest.vector is not None else None
    reduction_dims = {d.name for d in task.dims if d.reduction}
    for operand in task.operands:
        if operand.output or not reduction_dims & set(operand.dims):
            continue  # outputs live in the accumulators; a bias is read once per output
        if vec_dim in operand.dims:
            contiguous = any(t.dim == vec_dim and t.stride == 1 and t.div == 1 for t in operand.index[-1])
            per_step = nvec if contiguous else vec * profile.gather_cost
        else:
            per_step = 1.0
        for q in inner:
            if dim_of_loop[q] in operand.dims:
                per_step = per_step * ext[q]
        loads = loads + per_step
    load_cycles = loads / profile.load_ports
    load_eff = fma_cycles / np.maximum(fma_cycles, load_cycles)
    regs = acc + nvec + 1
    spilled = np.minimum(1.0, np.maximum(0.0, regs - profile.vector_registers) / acc)  # share of accumulators in memory
    spill = 1.0 + profile.spill_cost * spilled
    icache = np.maximum(1.0, unroll * nvec / profile.unroll_limit_vector_ops)
    ukernel_eff = lane_eff * latency_eff * load_eff / (spill * icache)
    peak_flops_per_cycle_core = 2.0 * lanes * profile.fma_units
    compute_cycles = flops / peak_flops_per_cycle_core / ukernel_eff

    # ---- loop overhead: every loop that is neither the vector loop nor the unrolled one
    iters = np.ones(n)
    overhead_iters = np.zeros(n)
    for q in range(n_loops):
        iters = iters * ext[q]
        if q not in (nest.vector, nest.unroll):
            overhead_iters += np.where(ext[q] > 1, iters, 0.0)
    overhead_cycles = profile.loop_overhead_cycles * overhead_iters
    freq = profile.freq_ghz * 1e9
    compute_s = (compute_cycles + overhead_cycles) / freq / eff_cores

    # ---- data movement: tile footprints per loop position, outermost (0) to innermost (n_loops), one (n,)
    # array per position: a chunk's arrays stay in the core's L2 (stacked (n_loops + 1, n) arrays scored a
    # 4,096-config chunk 25% slower on a Zen 3, examples/results/speed/)
    tile = {d.name: [None] * (n_loops + 1) for d in task.dims}
    for d in task.dims:
        acc_t = np.ones(n)
        tile[d.name][n_loops] = acc_t
        for q in reversed(range(n_loops)):
            if dim_of_loop[q] == d.name:
                acc_t = acc_t * ext[q]
            tile[d.name][q] = acc_t
    outer = [np.ones(n)]
    for q in range(n_loops):
        outer.append(outer[-1] * ext[q])

    footprint_total = [np.zeros(n) for _ in range(n_loops + 1)]
    # what the tile occupies in L1 when its rows are a multiple of (L1 size / ways) apart: they all map
    # to the same sets, so more rows than ways evict each other (4 KiB aliasing)
    l1_footprint = [np.zeros(n) for _ in range(n_loops + 1)]
    critical_stride = profile.caches[0].size_bytes // profile.l1_associativity
    traffic_total = [np.zeros(n) for _ in range(n_loops + 1)]
    extents = task.extent_of
    for operand in task.operands:
        full_run = float(operand.shape(extents)[-1])
        indexed_by = set(operand.dims)
        weight = 2.0 if operand.output else 1.0  # outputs are read and written back
        reuse = np.ones(n)  # product of the transparent loops just outside position p
        for p in range(n_loops + 1):
            if p > 0:
                q = p - 1
                transparent = (dim_of_loop[q] not in indexed_by) | (ext[q] == 1)
                reuse = np.where(transparent, reuse * ext[q], 1.0)
            rows, run = operand_extents(operand, {d: tile[d][p] for d in indexed_by}, np.ceil, np.minimum)
            rows = rows * np.ones(n)
            whole_rows = run == full_run
            fp = np.where(
                whole_rows,
                np.ceil(rows * run * bytes_ / line) * line,
                rows * np.ceil(run * bytes_ / line) * line,
            )
            footprint_total[p] += fp
            row_stride = full_run * bytes_
            if len(operand.index) > 1 and critical_stride and row_stride % critical_stride == 0:
                fp = fp * np.maximum(1.0, rows / profile.l1_associativity)
            l1_footprint[p] += fp
            traffic_total[p] += weight * fp * outer[p] / reuse

    fp_stack = np.stack(footprint_total)  # (n_loops + 1, n), non-increasing along axis 0
    tr_stack = np.stack(traffic_total)
    l1_stack = np.stack(l1_footprint)
    columns = np.arange(n)
    memory_terms = []
    for c, level in enumerate(profile.caches):
        fits = (l1_stack if c == 0 else fp_stack) <= profile.cache_fill_fraction * level.size_bytes
        p_c = np.argmax(fits, axis=0)  # outermost loop position whose tile fits this level
        bandwidth = level.fill_bytes_per_cycle * freq * (1.0 if level.shared else eff_cores)
        memory_terms.append(tr_stack[p_c, columns] / bandwidth)

    terms = np.stack([compute_s, *memory_terms])
    dominant = terms.max(axis=0)
    total = dominant + profile.overlap * (terms.sum(axis=0) - dominant)
    total += profile.call_overhead_s + np.where(par > 1, profile.parallel_overhead_s, 0.0)
    return total
