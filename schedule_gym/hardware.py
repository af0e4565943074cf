"""Facts about the machine this process runs on, read without TVM: CPU features and the CPU's name.

The workplace CPU changes from day to day (AMD Zen 3, Zen 4, Zen 5): every measurement names it, and
the mock chooses its profile by it. :func:`cpu_name` gives LLVM's name for AMD's Zen generations from
``/proc/cpuinfo`` (family 25 without AVX-512: ``znver3``; family 25 with it: ``znver4``; family 26:
``znver5``); TVM's own detection (``tvm.target.codegen.llvm_get_system_cpu``) agrees where both run and
is what the TVM backend uses. :func:`cpu_has_avx512` says whether a named CPU has AVX-512 (the mock's
choice of a nominal profile for CPUs it has no fitted profile of).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["available_memory_bytes", "cpu_has", "cpu_has_avx512", "cpu_name"]

#: AVX-512 (``avx512f``) by the CPU names :func:`cpu_name` gives
AVX512_BY_CPU = {"znver3": False, "znver4": True, "znver5": True}


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where it cannot be read)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                out[key.strip()] = value.strip()
    except OSError:
        pass
    return out


def cpu_has(flag: str) -> bool:
    """Whether this CPU reports the feature ``flag`` (Linux ``/proc/cpuinfo``; True where it cannot tell)."""
    flags = _cpuinfo().get("flags")
    return True if flags is None else flag in flags.split()


def cpu_name() -> str:
    """LLVM's name of this CPU where it is an AMD Zen 3/4/5 (``"znver3"``...), else ``"unknown"``."""
    info = _cpuinfo()
    if info.get("vendor_id") != "AuthenticAMD":
        return "unknown"
    family = int(info.get("cpu family", "0") or 0)
    if family == 26:
        return "znver5"
    if family == 25:
        return "znver4" if cpu_has("avx512f") else "znver3"
    return "unknown"


def cpu_has_avx512(cpu: str | None = None) -> bool:
    """Whether the CPU named ``cpu`` (default: this one) has AVX-512: known for the names :func:`cpu_name`
    gives, read from this machine's ``/proc/cpuinfo`` for any other name (``"unknown"``)."""
    name = cpu_name() if cpu is None else cpu
    known = AVX512_BY_CPU.get(name)
    return cpu_has("avx512f") if known is None else known


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
