"""CPU profiles: the few numbers the mock model knows about a CPU, and their JSON files.

A profile file holds every field of :class:`CPUProfile` (:func:`write_profile`); :func:`read_profile`
accepts nothing less and nothing else, and names the file and the field it rejects. The shipped profiles
are such files (:data:`~schedule_gym.backends.mock.selection.PROFILES`), as is a profile fitted by
``schedule-gym calibrate``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["CPUProfile", "CacheLevel", "read_profile", "write_profile"]


@dataclass(frozen=True)
class CacheLevel:
    """One cache level: capacity, and the bandwidth (bytes per cycle) that fills it from the next level out.

    ``shared``: shared by all cores, so its fill bandwidth is not multiplied by the cores used."""

    name: str
    size_bytes: int
    fill_bytes_per_cycle: float
    shared: bool = False


@dataclass(frozen=True)
class CPUProfile:
    """The few numbers the mock model knows about a CPU (every one required; start from a shipped profile
    with :func:`dataclasses.replace`).

    Attributes:
        name: what records call it (``mock:<name>``).
        cores: cores the parallel loops run on.
        freq_ghz: clock frequency.
        vector_bits: width of a vector register.
        fma_units: vector FMAs issued per cycle.
        fma_latency_cycles: effective FMA latency (out-of-order overlap can hide part of it).
        load_ports: vector loads per cycle.
        vector_registers: architectural vector registers.
        cache_line_bytes: bytes of a cache line.
        caches: the cache levels, innermost (L1) first.
        cache_fill_fraction: usable share of a cache before conflicts evict the tile.
        loop_overhead_cycles: per iteration of a loop that is neither unrolled nor vectorised.
        unroll_limit_vector_ops: unrolled body size (FMAs) past which the instruction cache suffers.
        spill_cost: extra time per FMA whose accumulator lives in memory, relative to one in a register.
        gather_cost: load slots per element of a vector gathered from a strided axis.
        l1_associativity: ways of L1: rows of a tile whose stride is a multiple of L1 size / ways compete
            for one set.
        overlap: share of the non-dominant terms that does not overlap the dominant one.
        parallel_overhead_s: fixed cost of a parallel region.
        call_overhead_s: fixed cost of calling a kernel.
    """

    name: str
    cores: int
    freq_ghz: float
    vector_bits: int
    fma_units: int
    fma_latency_cycles: float
    load_ports: int
    vector_registers: int
    cache_line_bytes: int
    caches: tuple[CacheLevel, ...]
    cache_fill_fraction: float
    loop_overhead_cycles: float
    unroll_limit_vector_ops: int
    spill_cost: float
    gather_cost: float
    l1_associativity: int
    overlap: float
    parallel_overhead_s: float
    call_overhead_s: float

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
