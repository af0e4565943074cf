"""Facts about the machine this process runs on, read without TVM: the CPU's name and features, its
caches, the cores this process may use, the memory it can allocate.

The workplace CPU changes from day to day (AMD Zen 3/4/5, Intel Xeons): every measurement names it, and
the mock chooses its profile by it. :func:`cpu_name` gives LLVM's name of the CPU's generation
(``znver4``, ``sapphirerapids``...) from ``/proc/cpuinfo``:

* by the model number (Intel) or family (AMD) where the feature flags agree with it: every marker flag
  of :data:`MARKER_FLAGS` the generation has is reported, and none it lacks. A hypervisor may report a
  model number of another CPU (a Rocket Lake client's model with AMX flags) or hide features; then
* by the feature flags alone: AMX with AVX512-FP16 is Sapphire Rapids or later (``sapphirerapids``, or
  ``graniterapids`` with AMX-FP16); any other flag set cannot tell the generation and gets the name of
  LLVM's generic level it reaches (``x86-64-v4``: AVX-512; ``x86-64-v3``: AVX2), else ``"unknown"``.

Every name :func:`cpu_name` gives is a valid LLVM CPU whose features this machine has (except
``"unknown"``), so code built for it runs here. TVM's own detection
(``tvm.target.codegen.llvm_get_system_cpu``) trusts the model number alone and can disagree where a
hypervisor misreports it; the TVM backend's target uses TVM's. :func:`cpu_identity` says which way the
name was found. :data:`GENERATIONS` holds each name's vector width and FP32 FMA throughput and latency.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = [
    "CPUGeneration", "CPUIdentity", "CacheInfo", "GENERATIONS", "MARKER_FLAGS", "available_memory_bytes", "cpu_caches",
    "cpu_has", "cpu_has_avx512", "cpu_identity", "cpu_name", "generation", "identify_cpu", "parse_cpuinfo",
    "usable_cores", "vector_bits",
]

CPUINFO_PATH = "/proc/cpuinfo"
CACHE_SYSFS = "/sys/devices/system/cpu/cpu0/cache"
UNKNOWN = "unknown"

#: The flags (as ``/proc/cpuinfo`` spells them) that tell the x86 generations apart.
MARKER_FLAGS = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_vbmi2", "avx512_fp16",
                          "amx_tile", "amx_fp16", "avx_vnni"})


@dataclass(frozen=True)
class CPUGeneration:
    """A CPU generation by LLVM's name: the marker flags it has, those the flags must show for the model
    number to be trusted (default: all it has), and its FP32 FMA figures per core."""

    name: str
    has: frozenset[str]
    needs: frozenset[str] | None = None
    #: FP32 FLOP per cycle per core of FMAs of the widest vectors; None where it depends on the part
    #: (Skylake-SP and Cascade Lake Xeons have one or two 512-bit FMA units by model)
    fma_flop_per_cycle: int | None = None
    #: cycles from an FMA's inputs to its result; None where unknown (the generic levels)
    fma_latency_cycles: int | None = 4

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.has

    @property
    def vector_bits(self) -> int:
        return 512 if self.avx512 else 256 if "avx2" in self.has else 128


_AVX2 = frozenset({"avx2"})
_SKX = _AVX2 | {"avx512f"}
_CLX = _SKX | {"avx512_vnni"}
_ICX = _CLX | {"avx512_vbmi2"}
_SPR = _ICX | {"avx512_bf16", "avx512_fp16", "amx_tile", "avx_vnni"}
_ZEN4 = _ICX | {"avx512_bf16"}


def _generations(*gens: CPUGeneration) -> dict[str, CPUGeneration]:
    return {g.name: g for g in gens}


#: Every CPU name :func:`cpu_name` gives, but ``"unknown"``.
GENERATIONS: dict[str, CPUGeneration] = _generations(
    # AMD: the family is trusted when the vector ISA agrees (a Zen 4 guest may hide AVX-512's extensions)
    CPUGeneration("znver1", _AVX2, fma_flop_per_cycle=16, fma_latency_cycles=5),
    CPUGeneration("znver2", _AVX2, fma_flop_per_cycle=32, fma_latency_cycles=5),
    CPUGeneration("znver3", _AVX2, fma_flop_per_cycle=32),
    CPUGeneration("znver4", _ZEN4, _SKX, fma_flop_per_cycle=32),  # AVX-512 on 2 x 256-bit FMA units
    # 2 x 512-bit FMA units on desktop and server parts (mobile ones have 256-bit units: half the figure)
    CPUGeneration("znver5", _ZEN4 | {"avx_vnni"}, _SKX, fma_flop_per_cycle=64),
    # Intel clients
    CPUGeneration("haswell", _AVX2, fma_flop_per_cycle=32, fma_latency_cycles=5),
    CPUGeneration("broadwell", _AVX2, fma_flop_per_cycle=32, fma_latency_cycles=5),
    CPUGeneration("skylake", _AVX2, fma_flop_per_cycle=32),
    CPUGeneration("icelake-client", _ICX, fma_flop_per_cycle=32),  # one 512-bit FMA unit
    CPUGeneration("tigerlake", _ICX, fma_flop_per_cycle=32),
    CPUGeneration("rocketlake", _ICX, fma_flop_per_cycle=32),
    CPUGeneration("alderlake", _AVX2 | {"avx_vnni"}, fma_flop_per_cycle=32),
    CPUGeneration("raptorlake", _AVX2 | {"avx_vnni"}, fma_flop_per_cycle=32),
    CPUGeneration("meteorlake", _AVX2 | {"avx_vnni"}, fma_flop_per_cycle=32),
    # Intel Xeons
    CPUGeneration("skylake-avx512", _SKX),
    CPUGeneration("cascadelake", _CLX),
    CPUGeneration("cooperlake", _CLX | {"avx512_bf16"}, fma_flop_per_cycle=64),
    CPUGeneration("icelake-server", _ICX, fma_flop_per_cycle=64),
    CPUGeneration("sapphirerapids", _SPR, fma_flop_per_cycle=64),
    CPUGeneration("emeraldrapids", _SPR, fma_flop_per_cycle=64),
    CPUGeneration("graniterapids", _SPR | {"amx_fp16"}, fma_flop_per_cycle=64),
    # LLVM's generic levels: the vector ISA is known, the generation is not
    CPUGeneration("x86-64-v4", _SKX, fma_latency_cycles=None),
    CPUGeneration("x86-64-v3", _AVX2, fma_latency_cycles=None),
)


def _models(table: dict[tuple[int, ...], tuple[str, ...]]) -> dict[int, tuple[str, ...]]:
    return {model: names for models, names in table.items() for model in models}


#: Intel family 6 model numbers -> the generations they may be, the first the flags agree with wins.
INTEL_MODELS: dict[int, tuple[str, ...]] = _models({
    (60, 63, 69, 70): ("haswell",),
    (61, 71, 79, 86): ("broadwell",),
    (78, 94, 142, 158, 165, 166): ("skylake",),
    (85,): ("cooperlake", "cascadelake", "skylake-avx512"),  # one model number, told apart by flags
    (106, 108): ("icelake-server",),
    (125, 126): ("icelake-client",),
    (140, 141): ("tigerlake",),
    (167,): ("rocketlake",),
    (151, 154, 190): ("alderlake",),
    (183, 186, 191): ("raptorlake",),
    (170, 172): ("meteorlake",),
    (143,): ("sapphirerapids",),
    (207,): ("emeraldrapids",),
    (173, 174): ("graniterapids",),
})

#: What the flags alone can name, most specific first: (name, flags it needs). AMX with AVX512-FP16 (and
#: the rest of Sapphire Rapids' markers) is no other generation's; the levels need what LLVM's need.
BY_FLAGS: tuple[tuple[str, frozenset[str]], ...] = (
    ("graniterapids", GENERATIONS["graniterapids"].has),
    ("sapphirerapids", GENERATIONS["sapphirerapids"].has),
    ("x86-64-v4", frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2", "fma"})),
    ("x86-64-v3", frozenset({"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"})),
)


@dataclass(frozen=True)
class CPUIdentity:
    """What :func:`identify_cpu` found: the name, and whether the model number (``by="model"``), the
    feature flags alone (``by="flags"``) or nothing (``by="none"``: ``"unknown"``) gave it."""

    name: str
    vendor: str
    family: int
    model: int
    by: str

    def describe(self) -> str:
        """One phrase for reports, e.g. ``sapphirerapids (by its flags; GenuineIntel family 6 model 167)``."""
        how = {"model": "by its model number", "flags": "by its flags, not its model number",
               "none": "generation not known"}[self.by]
        return f"{self.name} ({how}; {self.vendor or 'no vendor'} family {self.family} model {self.model})"


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's fields of a ``/proc/cpuinfo`` text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _agrees(gen: CPUGeneration, flags: frozenset[str]) -> bool:
    """Whether ``flags`` show every marker ``gen`` needs and none it lacks."""
    needs = gen.has if gen.needs is None else gen.needs
    return needs <= flags and (flags & MARKER_FLAGS) <= gen.has


def identify_cpu(info: Mapping[str, str]) -> CPUIdentity:
    """The CPU described by ``/proc/cpuinfo`` fields (:func:`parse_cpuinfo`): see the module's documentation."""
    vendor = info.get("vendor_id", "")
    family, model = _int(info.get("cpu family")), _int(info.get("model"))
    flags = frozenset(info.get("flags", "").split())
    candidates: tuple[str, ...] = ()
    if vendor == "GenuineIntel" and family == 6:
        candidates = INTEL_MODELS.get(model, ())
    elif vendor == "AuthenticAMD":
        candidates = {23: ("znver2",) if model >= 0x30 else ("znver1",), 25: ("znver4", "znver3"),
                      26: ("znver5",)}.get(family, ())
    for name in candidates:
        if _agrees(GENERATIONS[name], flags):
            return CPUIdentity(name, vendor, family, model, "model")
    for name, needs in BY_FLAGS:
        if needs <= flags:
            return CPUIdentity(name, vendor, family, model, "flags")
    return CPUIdentity(UNKNOWN, vendor, family, model, "none")


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        with open(CPUINFO_PATH, encoding="utf-8") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return {}


def cpu_identity() -> CPUIdentity:
    """This CPU's name and how it was found (:func:`identify_cpu` of ``/proc/cpuinfo``)."""
    return identify_cpu(_cpuinfo())


def cpu_name() -> str:
    """LLVM's name of this CPU's generation (``"znver4"``, ``"sapphirerapids"``, ``"x86-64-v4"``...), or
    ``"unknown"`` where not even its vector ISA can be read (see the module's documentation)."""
    return cpu_identity().name


def cpu_has(flag: str) -> bool:
    """Whether this CPU reports the feature ``flag`` (Linux ``/proc/cpuinfo``; True where it cannot tell)."""
    flags = _cpuinfo().get("flags")
    return True if flags is None else flag in flags.split()


def generation(cpu: str | None = None) -> CPUGeneration | None:
    """The facts of the CPU named ``cpu`` (default: this one); None for ``"unknown"`` and other names."""
    return GENERATIONS.get(cpu_name() if cpu is None else cpu)


def cpu_has_avx512(cpu: str | None = None) -> bool:
    """Whether the CPU named ``cpu`` (default: this one) has AVX-512: known for the names :func:`cpu_name`
    gives, read from this machine's ``/proc/cpuinfo`` for any other name (``"unknown"``)."""
    gen = generation(cpu)
    return cpu_has("avx512f") if gen is None else gen.avx512


def vector_bits(cpu: str | None = None) -> int:
    """The width of the CPU's widest vector ISA in bits (512, 256 or 128), as :func:`cpu_has_avx512` reads it."""
    gen = generation(cpu)
    if gen is not None:
        return gen.vector_bits
    return 512 if cpu_has("avx512f") else 256 if cpu_has("avx2") else 128


@dataclass(frozen=True)
class CacheInfo:
    """One data (or unified) cache level as seen from CPU 0."""

    level: int
    size_bytes: int
    #: logical CPUs that share it (1: private to a core without SMT)
    shared_by: int


def _size_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text, re.IGNORECASE)
    if match is None:
        raise ValueError(f"not a cache size: {text!r}")
    return int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " ")


def _cpu_count(cpu_list: str) -> int:
    """How many CPUs a sysfs list such as ``0-3,8`` names."""
    count = 0
    for part in filter(None, cpu_list.strip().split(",")):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def cpu_caches(root: str | os.PathLike = CACHE_SYSFS) -> tuple[CacheInfo, ...]:
    """The data and unified caches of CPU 0, by level (sysfs, as ``lscpu`` reads them); empty where sysfs
    does not say (not Linux, or a container that hides it)."""
    out: dict[int, CacheInfo] = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
            shared_path = index / "shared_cpu_list"
            shared = _cpu_count(shared_path.read_text()) if shared_path.exists() else 1
        except (OSError, ValueError):
            continue
        out.setdefault(level, CacheInfo(level, size, shared))
    return tuple(out[level] for level in sorted(out))


def usable_cores() -> int:
    """The logical CPUs this process may run on (its affinity mask, which ``taskset`` and container CPU
    sets narrow); ``os.cpu_count()`` where the platform has no affinity. CPU quotas are not counted."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (memory that can be allocated without swapping), or None."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
