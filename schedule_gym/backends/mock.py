"""The mock backend: an analytic latency model of the tiled loop nest on a CPU, vectorised with NumPy.

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

The terms are combined as a roofline with partial overlap: ``max(terms) + overlap * (sum - max)``.
Latencies are deterministic unless ``noise`` (the sigma of a multiplicative log-normal) is set; noise
is drawn from a generator seeded by ``seed``. The model scores a whole space of a million configs in
about a second (see ``examples/benchmarks/env_steps.py``), so tests and benchmarks know exact optima.

**Which CPU profile.** :class:`MockBackend` takes ``profile="auto"`` unless told otherwise and then models
the CPU it runs on (:func:`select_profile`, by :func:`schedule_gym.hardware.cpu_name`), in this order:

1. a profile fitted on this machine with ``schedule-gym calibrate`` and stored in the user cache as
   ``profiles/<cpu>.json`` (:mod:`schedule_gym.cache`);
2. the shipped profile fitted to that CPU (:data:`FITTED_FOR_CPU`): ``znver5`` -> ``znver5-2core-fitted``,
   ``znver4`` -> ``znver4-2core-fitted``, ``znver3`` -> ``znver3-2core-fitted``;
3. any other CPU (Intel, ARM, ...: ``"unknown"``) gets a nominal, unfitted profile of its vector
   ISA: ``avx512-2core-nominal`` with AVX-512, else ``avx2-2core-nominal``. Nominal profiles rank configs
   much worse than fitted ones (held-out Spearman about 0.6 against 0.75-0.83): such a user should run
   ``schedule-gym calibrate`` once (a few minutes), after which step 1 applies.

The shipped profiles model 2 cores; a calibrated one models the threads it was measured with. A
profile named explicitly (``MockBackend(profile="znver5-2core-fitted")`` or a :class:`CPUProfile`) is
used as given, on any machine: name one wherever numbers must not depend on the machine (tests,
documented figures). Records of mock measurements carry the profile in their target
(:meth:`MockBackend.record_context`), so measurements of different profiles never mix.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym import cache, hardware
from schedule_gym.backends.base import VECTOR_WAY_OUT, LatencyBackend, MeasureResult, ResultCallback
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = [
    "AUTO_PROFILE",
    "CPUProfile",
    "CacheLevel",
    "FITTED_FOR_CPU",
    "MOCK_MODEL_VERSION",
    "MockBackend",
    "PROFILES",
    "mock_latency_s",
    "nominal_profile_name",
    "read_profile",
    "select_profile",
    "write_profile",
]

#: Version of the analytic model; records of mock measurements remember it.
MOCK_MODEL_VERSION = "mock-cpu-v2"


@dataclass(frozen=True)
class CacheLevel:
    """One cache level: capacity, and the bandwidth (bytes per cycle) that fills it from the next level out."""

    name: str
    size_bytes: int
    fill_bytes_per_cycle: float
    shared: bool = False  # shared by all cores: its fill bandwidth is not multiplied by the cores used


@dataclass(frozen=True)
class CPUProfile:
    """The few numbers the mock model knows about a CPU."""

    name: str = "avx512-2core-nominal"
    cores: int = 2
    freq_ghz: float = 4.1
    vector_bits: int = 512
    fma_units: int = 2
    fma_latency_cycles: float = 4.0  # effective: out-of-order overlap can hide part of it
    load_ports: int = 2
    vector_registers: int = 32
    cache_line_bytes: int = 64
    caches: tuple[CacheLevel, ...] = field(
        default=(
            CacheLevel("L1", 48 * 1024, 64.0),  # filled from L2, per core
            CacheLevel("L2", 1024 * 1024, 32.0),  # filled from L3, per core
            CacheLevel("L3", 32 * 1024 * 1024, 10.0, shared=True),  # filled from DRAM (~40 GB/s)
        )
    )
    cache_fill_fraction: float = 0.75  # usable share of a cache before conflicts evict the tile
    loop_overhead_cycles: float = 1.5  # per iteration of a loop that is neither unrolled nor vectorised
    unroll_limit_vector_ops: int = 256  # unrolled body size (FMAs) past which the i-cache suffers
    spill_cost: float = 2.0  # extra time per FMA whose accumulator lives in memory, relative to one in a register
    gather_cost: float = 1.0  # load slots per element of a vector gathered from a strided axis
    l1_associativity: int = 12  # rows of a tile whose stride is a multiple of L1 size / ways compete for one set
    overlap: float = 0.3  # share of the non-dominant terms that does not overlap the dominant one
    parallel_overhead_s: float = 5e-6  # fixed cost of a parallel region
    call_overhead_s: float = 2e-6  # fixed cost of calling a kernel

    def __post_init__(self) -> None:
        for key in ("cores", "vector_bits", "fma_units", "load_ports", "vector_registers", "l1_associativity"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CPUProfile.{key} must be a positive integer, got {value!r}")
        if not self.caches:
            raise ValueError("CPUProfile.caches must list at least one cache level")

    @property
    def peak_gflops(self) -> float:
        """Single-precision FMA peak of all cores (each FMA is 2 flops per lane)."""
        return self.cores * self.fma_units * (self.vector_bits // 32) * 2 * self.freq_ghz

    def to_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        """A short hash of every number of the profile (not its name): equal numbers, equal digest."""
        numbers = {k: v for k, v in self.to_dict().items() if k != "name"}
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:10]

    @classmethod
    def from_dict(cls, data: Any, source: str = "profile") -> CPUProfile:
        """A profile from plain data (as :meth:`to_dict` and JSON give it), every field present and of the
        right type; anything else raises ``ValueError`` naming ``source`` and the field."""
        return _profile_from_dict(data, source)


#: Fields of a profile by the kind of value they hold (JSON files are checked against these).
_INT_FIELDS = ("cores", "vector_bits", "fma_units", "load_ports", "vector_registers", "cache_line_bytes",
               "unroll_limit_vector_ops", "l1_associativity")
_POSITIVE_FIELDS = ("freq_ghz", "fma_latency_cycles", "cache_fill_fraction")


def _check_number(value: Any, where: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{where} must be {'positive' if positive else 'non-negative'}, got {value!r}")
    return float(value)


def _check_keys(data: Any, expected: Sequence[str], where: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    missing = [k for k in expected if k not in data]
    unknown = sorted(set(data) - set(expected))
    if missing:
        raise ValueError(f"{where}: field {missing[0]!r} is missing (every field is required: {', '.join(expected)})")
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(expected)})")


def _profile_from_dict(data: Any, source: str) -> CPUProfile:
    names = [f.name for f in fields(CPUProfile)]
    _check_keys(data, names, source)
    values: dict[str, Any] = {}
    for key in names:
        value, where = data[key], f"{source}: field {key!r}"
        if key == "name":
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where} must be a non-empty string, got {value!r}")
        elif key in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{where} must be a positive integer, got {value!r}")
        elif key == "caches":
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"{where} must be a non-empty list of cache levels, got {value!r}")
            levels = []
            level_fields = [f.name for f in fields(CacheLevel)]
            for i, level in enumerate(value):
                at = f"{where}[{i}]"
                _check_keys(level, level_fields, at)
                if not isinstance(level["name"], str) or not level["name"]:
                    raise ValueError(f"{at}: field 'name' must be a non-empty string, got {level['name']!r}")
                size = level["size_bytes"]
                if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                    raise ValueError(f"{at}: field 'size_bytes' must be a positive integer, got {size!r}")
                fill = _check_number(level["fill_bytes_per_cycle"], f"{at}: field 'fill_bytes_per_cycle'", True)
                if not isinstance(level["shared"], bool):
                    raise ValueError(f"{at}: field 'shared' must be true or false, got {level['shared']!r}")
                levels.append(CacheLevel(level["name"], size, fill, level["shared"]))
            value = tuple(levels)
        else:
            value = _check_number(value, where, key in _POSITIVE_FIELDS)
        values[key] = value
    return CPUProfile(**values)


def read_profile(path: str | os.PathLike) -> CPUProfile:
    """A profile from a JSON file written by :func:`write_profile` (data only: nothing is executed). A
    file that cannot be read, is not JSON, or lacks or mistypes a field raises ``ValueError`` naming the
    file and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"mock profile file {path} cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"mock profile file {path} is not valid JSON: {exc}") from None
    return CPUProfile.from_dict(data, source=f"mock profile file {path}")


def write_profile(profile: CPUProfile, path: str | os.PathLike) -> Path:
    """Write ``profile`` as JSON (every field) to ``path``, atomically (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(profile.to_dict(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


#: Fitted to 300 of 600 random GEMM 1024^3 configs measured with the TVM backend (template gemm-cpu-v1,
#: 2 threads) on this project's machine (AMD Zen 5, 2 vCPUs): see examples/benchmarks/calibrate_mock.py
#: and the sample in schedule_gym/data/calibration-gemm-1024.jsonl.gz. Spearman rank correlation with the
#: real latencies: 0.829 on the 300 held-out configs (0.623 for the nominal profile). The fit drove three
#: terms to their limits (FMA latency 1 cycle, L2 fill 512 B/cycle, loop overhead ~0 cycles): at this
#: shape those effects are not visible separately from the others, so read the fitted numbers as a
#: model of this machine's kernels, not as hardware specifications.
ZEN5_2CORE_FITTED = CPUProfile(
    name="znver5-2core-fitted",
    cores=2,
    freq_ghz=4.1,
    vector_bits=512,
    fma_units=2,
    fma_latency_cycles=1.0,
    load_ports=2,
    vector_registers=32,
    cache_line_bytes=64,
    caches=(
        CacheLevel("L1", 49152, 32.0),
        CacheLevel("L2", 1048576, 512.0),
        CacheLevel("L3", 33554432, 20.0, shared=True),
    ),
    cache_fill_fraction=0.1875,
    loop_overhead_cycles=0.0003662109375,
    unroll_limit_vector_ops=2048,
    spill_cost=4.0,
    l1_associativity=12,
    overlap=0.3,
    parallel_overhead_s=8e-05,
    call_overhead_s=3.2e-05,
)

#: Fitted to the first halves of 300-config samples of three operators measured with the TVM backend (2
#: threads) on an AMD Zen 3 (znver3, AVX2, 2 vCPUs) on 2026-11-23: ResNet-50's 28x28x128 3x3 conv2d
#: (resnet50/conv6), BERT-base's ``P @ V`` batch matmul (bert-base/attn-pv) and GEMM 1024^3; the sample is
#: schedule_gym/data/calibration-znver3.jsonl.gz and the fit ``python examples/benchmarks/calibrate_mock.py
#: --tasks resnet50/conv6 bert-base/attn-pv gemm-1024 --configs 300 --profile avx2-2core-nominal``.
#: Held-out Spearman: 0.775, 0.740, 0.764.
ZEN3_2CORE_FITTED = CPUProfile(
    name="znver3-2core-fitted",
    cores=2,
    freq_ghz=3.5,
    vector_bits=256,
    fma_units=2,
    fma_latency_cycles=1.0,
    load_ports=2,
    vector_registers=16,
    cache_line_bytes=64,
    caches=(
        CacheLevel("L1", 32768, 32.0),
        CacheLevel("L2", 524288, 512.0),
        CacheLevel("L3", 33554432, 10.0, shared=True),
    ),
    cache_fill_fraction=0.1875,
    loop_overhead_cycles=1.5,
    unroll_limit_vector_ops=4096,
    spill_cost=8.0,
    gather_cost=1.0,
    l1_associativity=8,
    overlap=0.6,
    parallel_overhead_s=0.00032,
    call_overhead_s=5e-07,
)

#: Fitted to the first halves of 300-config samples of three operators measured with the TVM backend (2
#: threads) on an AMD Zen 4 (znver4: AVX-512 on 2 x 256-bit FMA pipes, 32 FLOP/cycle/core; 2 vCPUs) on
#: 2026-11-25: GEMM 256^3 (gemm-256), ResNet-50's 28x28x128 3x3 conv2d (resnet50/conv6) and BERT-base's
#: ``P @ V`` (bert-base/attn-pv); the sample is schedule_gym/data/calibration-znver4.jsonl.gz, measured by
#: ``schedule-gym calibrate --configs 300``. The fit started from znver5-2core-fitted with Zen 4's facts (the
#: 3.6 GHz clock examples/benchmarks/fma_peak.c measured, one 512-bit FMA a cycle, a 32 KiB 8-way L1d, 1 MiB
#: L2): held-out Spearman 0.791, 0.878, 0.749 (mean 0.806; from avx512-2core-nominal, what a Zen 4 had
#: before: 0.675, 0.700, 0.532). As with Zen 5, some fitted bandwidths sit at the fit's limits: a model of
#: this machine's kernels, not hardware specifications.
ZEN4_2CORE_FITTED = CPUProfile(
    name="znver4-2core-fitted",
    cores=2,
    freq_ghz=3.6,
    vector_bits=512,
    fma_units=1,
    fma_latency_cycles=1.0,
    load_ports=2,
    vector_registers=32,
    cache_line_bytes=64,
    caches=(
        CacheLevel("L1", 32768, 64.0),
        CacheLevel("L2", 1048576, 16.0),
        CacheLevel("L3", 33554432, 2560.0, shared=True),
    ),
    cache_fill_fraction=0.1875,
    loop_overhead_cycles=0.375,
    unroll_limit_vector_ops=2048,
    spill_cost=2.0,
    gather_cost=1.0,
    l1_associativity=8,
    overlap=0.075,
    parallel_overhead_s=2.5e-06,
    call_overhead_s=1.6e-05,
)

#: The shipped CPU profiles by name (which one ``profile="auto"`` picks: :func:`select_profile`; a shipped
#: profile's numbers never change under its name: a refit gets a new name). ``avx512-2core-nominal`` holds
#: data-sheet-style numbers, the starting point of the fit; on its own it is no good model of this machine (its
#: 1024^3 optimum is 58 GFLOP/s where real kernels reach about 380: its L1-aliasing and fill-bandwidth terms
#: are far too harsh).
PROFILES: dict[str, CPUProfile] = {
    ZEN5_2CORE_FITTED.name: ZEN5_2CORE_FITTED,
    ZEN3_2CORE_FITTED.name: ZEN3_2CORE_FITTED,
    ZEN4_2CORE_FITTED.name: ZEN4_2CORE_FITTED,
    "avx512-2core-nominal": CPUProfile(name="avx512-2core-nominal"),
    # an AVX2 core with 16 vector registers and Zen 3's caches (32 KiB L1d, 512 KiB L2, 32 MiB L3): the
    # starting point of fits on machines without AVX-512
    "avx2-2core-nominal": CPUProfile(
        name="avx2-2core-nominal", freq_ghz=3.5, vector_bits=256, vector_registers=16,
        caches=(CacheLevel("L1", 32 * 1024, 64.0), CacheLevel("L2", 512 * 1024, 32.0),
                CacheLevel("L3", 32 * 1024 * 1024, 10.0, shared=True)),
        l1_associativity=8,
    ),
}


#: The default of :class:`MockBackend`'s ``profile``: choose by this machine's CPU (:func:`select_profile`).
AUTO_PROFILE = "auto"

#: The shipped profile fitted to each CPU (by :func:`schedule_gym.hardware.cpu_name`'s names).
FITTED_FOR_CPU: dict[str, str] = {
    "znver5": ZEN5_2CORE_FITTED.name, "znver4": ZEN4_2CORE_FITTED.name, "znver3": ZEN3_2CORE_FITTED.name,
}


def nominal_profile_name(cpu: str | None = None) -> str:
    """The nominal profile of a CPU's vector ISA: ``avx512-2core-nominal`` with AVX-512, else
    ``avx2-2core-nominal`` (``cpu``: a name as :func:`schedule_gym.hardware.cpu_name` gives; default: this one)."""
    return "avx512-2core-nominal" if hardware.cpu_has_avx512(cpu) else "avx2-2core-nominal"


def select_profile(cpu: str | None = None) -> tuple[CPUProfile, str]:
    """The profile ``profile="auto"`` picks for the CPU named ``cpu`` (default: this machine's), and a
    phrase saying why: the user's calibrated profile for that CPU if the cache holds one, else the shipped
    profile fitted to it, else the nominal profile of its ISA (see the module's documentation). A
    malformed cache file raises ``ValueError`` naming the file and the field."""
    cpu = hardware.cpu_name() if cpu is None else cpu
    path = cache.profile_path(cpu)
    if path.is_file():
        return read_profile(path), f"calibrated on this machine ({path})"
    if cpu in FITTED_FOR_CPU:
        return PROFILES[FITTED_FOR_CPU[cpu]], f"shipped profile fitted to {cpu}"
    name = nominal_profile_name(cpu)
    return PROFILES[name], f"nominal profile for {cpu} (no fitted profile: run schedule-gym calibrate)"


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

    # ---- data movement: tile footprints per loop position, outermost (0) to innermost (n_loops)
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
    columns = np.arange(n)
    memory_terms = []
    l1_stack = np.stack(l1_footprint)
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


class _MockLatencies:
    """The noise-free mock model scored in the chunks :class:`MockBackend` scores (so bit-identical to it),
    kept in one dense array over the space, filled as chunks are first touched."""

    censored = None

    def __init__(self, backend: MockBackend, task: Task, size: int) -> None:
        self._backend, self._task, self._size = backend, task, size
        self._chunk = MockBackend.CHUNK
        self._latency_s = np.empty(size)  # pages are touched only where a chunk is scored
        self._scored = np.zeros(-(-size // self._chunk), dtype=bool)
        self._complete = False

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        if not self._complete:
            chunks = indices // self._chunk
            missing = chunks[~self._scored[chunks]]
            if missing.size:
                for c in np.unique(missing).tolist():
                    start, stop = c * self._chunk, min(self._size, (c + 1) * self._chunk)
                    self._latency_s[start:stop] = self._backend.model_latency_s(self._task, np.arange(start, stop))
                    self._scored[c] = True
                self._complete = bool(self._scored.all())
        return self._latency_s[indices]

    def require_exact(self, index: int) -> None:
        """Every model latency is exact."""


#: The most noisy costs one mock measurement may draw (more is a mistake, and would take seconds each).
MAX_REPEATS = 10_000


class MockBackend(LatencyBackend):
    """Latencies from the analytic model (:func:`mock_latency_s`), cached per task in chunks.

    Args:
        profile: ``"auto"`` (default: the profile of the CPU this runs on, see :func:`select_profile` and
            the module's documentation), a :class:`CPUProfile`, or the name of one in :data:`PROFILES`.
            The profile used is ``backend.profile`` (its name: ``backend.profile.name``), and why it was
            chosen is ``backend.profile_origin``.
        noise: sigma of a multiplicative log-normal noise on every measurement (0: deterministic).
        seed: seed of the noise generator (see :meth:`reseed`; an environment that made its backend
            reseeds it from its own ``np_random`` at every ``reset(seed=...)``).
        repeats: how many noisy costs each measurement reports (their mean is the latency).
    """

    name = "mock"
    #: configs scored together when one of them is first asked for (a contiguous range of indices)
    CHUNK = 4096
    #: misses per task scored singly before chunks are (see :meth:`latency_of_index`)
    SINGLES = 16

    def __init__(
        self, profile: CPUProfile | str = AUTO_PROFILE, noise: float = 0.0, seed: int | None = 0, repeats: int = 1
    ) -> None:
        origin = "given"
        if isinstance(profile, str) and profile == AUTO_PROFILE:
            profile, origin = select_profile()
        elif isinstance(profile, str):
            if profile not in PROFILES:
                raise ValueError(f"unknown CPU profile {profile!r}; known profiles: "
                                 f"{AUTO_PROFILE!r} (by this CPU), {', '.join(map(repr, PROFILES))}")
            profile, origin = PROFILES[profile], "named"
        if not isinstance(profile, CPUProfile):
            raise TypeError(f"profile must be a CPUProfile or a profile name, got {profile!r}")
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (0.0 <= noise < 5.0):
            raise ValueError(f"noise must be a number in [0, 5), got {noise!r}")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
            raise ValueError(f"repeats must be an integer in [1, {MAX_REPEATS}], got {repeats!r}")
        self.profile = profile
        #: why this profile: ``"named"``, ``"given"`` (an object), or what ``"auto"`` found
        self.profile_origin = origin
        self.noise = float(noise)
        self.repeats = repeats
        self.deterministic = self.noise == 0.0
        self.reseed(seed)
        # per task: its tile space and the chunks of model latencies scored so far
        self._tasks: dict[Task, tuple[TileSpace, dict[int, np.ndarray]]] = {}
        self._spaces: dict[tuple, TileSpace] = {}
        self._singles: dict[Task, dict[int, float]] = {}

    def reseed(self, seed: int | np.random.Generator | None) -> None:
        """Restart the noise generator: from a seed, or from a generator (a child of its seed sequence,
        so that drawing the noise never moves the caller's own stream)."""
        if isinstance(seed, np.random.Generator):
            seed_seq = getattr(seed.bit_generator, "seed_seq", None)
            self._rng = np.random.default_rng(seed_seq.spawn(1)[0] if seed_seq is not None else seed.integers(2**63))
        elif seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
            self._rng = np.random.default_rng(seed)
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            raise ValueError(f"seed must be a non-negative integer, a numpy Generator or None, got {seed!r}")
        else:
            raise TypeError(f"seed must be a non-negative integer, a numpy Generator or None, got {seed!r}")

    def record_context(self, task: Task) -> tuple[str, str]:
        """Target ``mock:<profile name>`` for a shipped profile, ``mock:<name>@<digest of its numbers>`` for
        any other (a calibrated or hand-made one), so that records of different numbers never mix."""
        shipped = PROFILES.get(self.profile.name)
        target = f"mock:{self.profile.name}"
        if shipped != self.profile:
            target += f"@{self.profile.digest()}"
        return (target, MOCK_MODEL_VERSION)

    def protocol_dict(self) -> dict:
        return {"noise": self.noise, "repeats": self.repeats, "profile": self.profile.to_dict()}

    def _task_state(self, task: Task) -> tuple[TileSpace, dict[int, np.ndarray]]:
        state = self._tasks.get(task)
        if state is None:
            # tasks that differ only in their loop order share one tile space (its tables are the costly part)
            space = self._spaces.get(task.dims)
            if space is None:
                space = self._spaces[task.dims] = TileSpace(task)
            state = self._tasks[task] = (space, {})
        return state

    def space(self, task: Task) -> TileSpace:
        return self._task_state(task)[0]

    @property
    def scores_in_bulk(self) -> bool:
        """Noise-free with one cost per measurement: the model's latencies serve vectorised callers."""
        return self.deterministic and self.repeats == 1

    def latency_table(self, task: Task, space: TileSpace) -> _MockLatencies:
        if not self.deterministic:
            raise ValueError(
                f"the vector environment needs deterministic latencies; this mock backend draws noise "
                f"(noise={self.noise}); {VECTOR_WAY_OUT}"
            )
        if self.repeats != 1:
            raise ValueError(f"the vector environment takes a noise-free mock with repeats=1, got repeats={self.repeats}")
        return _MockLatencies(self, task, space.size)

    def cpu_profile(self) -> CPUProfile:
        return self.profile

    def bulk_latency_s(self, task: Task, indices: np.ndarray) -> np.ndarray:
        """The model's noise-free latencies (:meth:`model_latency_s`), whatever the noise."""
        return self.model_latency_s(task, indices)

    def model_latency_s(self, task: Task, indices: np.ndarray | Sequence[int]) -> np.ndarray:
        """Noise-free model latencies of configs given by dense index (vectorised, any number)."""
        return mock_latency_s(task, self.space(task), np.asarray(indices, dtype=np.int64), self.profile)

    def score_space(self, task: Task, batch: int = 1 << 18) -> np.ndarray:
        """Noise-free latency of every config of ``task``, indexed by dense index."""
        space = self.space(task)
        out = np.empty(space.size)
        for start in range(0, space.size, batch):
            stop = min(space.size, start + batch)
            out[start:stop] = self.model_latency_s(task, np.arange(start, stop))
        return out

    def latency_of_index(self, task: Task, index: int) -> float:
        """Noise-free latency of one config, from the chunk cache (scores its chunk on first use).

        A task's first ``SINGLES`` misses are scored one config at a time: a search over loop orders
        measures a few configs of each of many tasks (one per order), where a chunk would be wasted."""
        space, chunks = self._task_state(task)
        chunk_id = index // self.CHUNK
        chunk = chunks.get(chunk_id)
        if chunk is None:
            singles = self._singles.setdefault(task, {})
            if index in singles:
                return singles[index]
            if len(singles) < self.SINGLES:
                singles[index] = float(mock_latency_s(task, space, np.array([index]), self.profile)[0])
                return singles[index]
            start = chunk_id * self.CHUNK
            stop = min(space.size, start + self.CHUNK)
            chunk = chunks[chunk_id] = mock_latency_s(task, space, np.arange(start, stop), self.profile)
        return float(chunk[index - chunk_id * self.CHUNK])

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        space = self.space(task)
        results = []
        for position, config in enumerate(configs):
            latency = self.latency_of_index(task, space.index_of_rows(space.rows(config)))
            if self.noise:
                costs = tuple(float(c) for c in latency * np.exp(self.noise * self._rng.standard_normal(self.repeats)))
            else:
                costs = (latency,) * self.repeats
            results.append(MeasureResult(config, sum(costs) / len(costs), costs_s=costs))
            if on_result is not None:
                on_result(position, results[-1])
        return results
