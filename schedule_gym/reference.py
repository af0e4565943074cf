"""Library kernels as reference points: NumPy (OpenBLAS) GEMMs and torch's kernel of any task, timed here.

torch runs every operator the way a PyTorch model would, as its module in :mod:`schedule_gym.operators`
states (``matmul``, ``bmm``, ``nn.functional.linear`` with its activation, ``nn.functional.conv2d``...; an
NHWC task's tensors are given to it in the ``channels_last`` memory format, its native layout for them).

Each measurement runs in a fresh subprocess (``python -m schedule_gym.reference``), so that
``OPENBLAS_CORETYPE`` — read once, when OpenBLAS is loaded — takes effect, and so that the library's
thread pool does not linger in the tuning process. The subprocess reports which OpenBLAS kernels
actually ran: it looks up the loaded OpenBLAS library in ``/proc/self/maps`` and asks it
(``openblas_get_corename``, as threadpoolctl does). Where that fails, the report says the core type is
only the one requested.

Timing protocol (like TVM's ``time_evaluator``): ``warmup`` untimed calls, then ``repeats`` samples,
each the mean of ``number`` back-to-back calls, ``number`` raised until a sample lasts at least
``min_repeat_ms`` (``min_repeat_ms=0``: one call per sample).

>>> stats = gflops_stats([0.002, 0.001, 0.004], flops=2_000_000)
>>> stats.best_gflops, stats.median_gflops
(2.0, 1.0)
"""

from __future__ import annotations

import json
import math
import numbers
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schedule_gym.hardware import cpu_has
from schedule_gym.operators import get_operator
from schedule_gym.tasks import DTYPE_BYTES, Task

__all__ = ["LIBRARIES", "GflopsStats", "LibraryTimes", "gflops_stats", "library_gemm_times", "library_references",
           "library_task_times"]

LIBRARIES = ("numpy", "torch")
#: OpenBLAS core types with AVX-512 kernels (for labels).
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")


@dataclass(frozen=True)
class GflopsStats:
    """GFLOP/s of a set of timings: from the fastest sample (``best``) and from the median one."""

    best_gflops: float
    median_gflops: float


def gflops_stats(times_s: Sequence[float], flops: int) -> GflopsStats:
    """GFLOP/s of ``flops`` operations at the minimum and at the median of ``times_s``."""
    if not times_s:
        raise ValueError("gflops_stats needs at least one time")
    return GflopsStats(flops / min(times_s) * 1e-9, flops / statistics.median(times_s) * 1e-9)


@dataclass(frozen=True)
class LibraryTimes:
    """Timings of one library's ``A @ B`` and what ran them.

    Attributes:
        library: ``"numpy"`` or ``"torch"``.
        version: the library's version.
        shape: ``(m, k, n)``; ``dtype``: the element type.
        times_s: seconds per call, one entry per sample (each the mean of ``number`` calls).
        number: calls per sample.
        threads: the library's thread count (OpenBLAS's, or torch's).
        blas: the BLAS behind the matmul (OpenBLAS's config string, or torch's ``BLAS_INFO``).
        coretype_requested: the ``OPENBLAS_CORETYPE`` the subprocess ran with (None: unset).
        coretype: the OpenBLAS core type that ran, as OpenBLAS reports it (None for torch's MKL).
        coretype_confirmed: whether ``coretype`` was reported by OpenBLAS itself (False: it is only
            the requested value).
    """

    library: str
    version: str
    shape: tuple[int, int, int]
    dtype: str
    times_s: tuple[float, ...]
    number: int
    threads: int | None
    blas: str
    coretype_requested: str | None
    coretype: str | None
    coretype_confirmed: bool
    #: the operator timed (``shape`` is its ``(m, k, n)`` for GEMM, else the task's extents)
    op: str = "gemm"
    task_flops: int | None = None

    @property
    def flops(self) -> int:
        if self.task_flops is not None:
            return self.task_flops
        m, k, n = self.shape
        return 2 * m * k * n

    @property
    def stats(self) -> GflopsStats:
        return gflops_stats(self.times_s, self.flops)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def label(self) -> str:
        """E.g. ``NumPy 2.4.6, OpenBLAS SkylakeX kernels (AVX-512), 2 threads``."""
        if self.library == "torch":
            what = "" if self.op == "gemm" else f"{self.op}, "
            return f"torch {self.version} ({what}{self.blas}), {self.threads} threads"
        core = self.coretype or "unknown"
        how = "" if self.coretype_confirmed else " (requested; OpenBLAS did not report it)"
        avx = " (AVX-512)" if core.lower() in AVX512_CORES else ""
        forced = (
            f"OPENBLAS_CORETYPE={self.coretype_requested}" if self.coretype_requested else "OPENBLAS_CORETYPE unset"
        )
        return f"NumPy {self.version}, OpenBLAS {core} kernels{avx}{how}, {forced}, {self.threads} threads"

    def to_dict(self) -> dict:
        """What a results file keeps of it: the label, what ran, every sample and the GFLOP/s."""
        return {"label": self.label, "library": self.library, "version": self.version, "coretype": self.coretype,
                "coretype_confirmed": self.coretype_confirmed, "threads": self.threads, "number": self.number,
                "times_s": list(self.times_s), "best_gflops": self.stats.best_gflops,
                "median_gflops": self.stats.median_gflops}


def _shape_of(task_or_shape: Task | Sequence[int]) -> tuple[int, int, int]:
    if isinstance(task_or_shape, Task):
        if task_or_shape.op != "gemm":
            raise ValueError(f"library references time GEMMs, not {task_or_shape.op!r} ({task_or_shape.name})")
        return tuple(task_or_shape.dim(x).extent for x in ("m", "k", "n"))  # type: ignore[return-value]
    shape = tuple(task_or_shape)
    if len(shape) != 3 or any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1 for x in shape):
        raise ValueError(f"a GEMM shape is three positive integers (m, k, n), got {task_or_shape!r}")
    return tuple(int(x) for x in shape)  # type: ignore[return-value]


def library_gemm_times(
    task_or_shape: Task | Sequence[int],
    library: str = "numpy",
    coretype: str | None = None,
    repeats: int = 10,
    min_repeat_ms: float = 10.0,
    warmup: int = 3,
    dtype: str | None = None,
    threads: int | None = None,
    timeout_s: float = 600.0,
) -> LibraryTimes:
    """Time ``A @ B`` of a GEMM task (or ``(m, k, n)``) with NumPy or torch, in a subprocess.

    Args:
        task_or_shape: a GEMM :class:`~schedule_gym.tasks.Task` or its ``(m, k, n)``.
        library: ``"numpy"`` or ``"torch"``.
        coretype: NumPy only: the ``OPENBLAS_CORETYPE`` to force (``"Haswell"``, ``"SkylakeX"``...);
            None keeps this process's environment; ``""`` unsets it (OpenBLAS detects the CPU).
        repeats, min_repeat_ms, warmup: the timing protocol (see the module docstring).
        dtype: the element type (default: the task's, or float32 for a shape).
        threads: the library's threads (default: its own default, all cores).
    """
    shape = _shape_of(task_or_shape)
    dtype = dtype or (task_or_shape.dtype if isinstance(task_or_shape, Task) else "float32")
    if library not in LIBRARIES:
        raise ValueError(f"unknown library {library!r}; known libraries: {', '.join(LIBRARIES)}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    if coretype is not None and library != "numpy":
        raise ValueError(f"coretype selects NumPy's OpenBLAS kernels; {library} does not use it")
    missing = CORETYPE_NEEDS.get((coretype or "").lower())
    if missing is not None and not cpu_has(missing):
        raise ValueError(
            f"OPENBLAS_CORETYPE={coretype} needs the CPU feature {missing!r}, which this CPU lacks: "
            "its kernels would stop with an illegal instruction"
        )
    for name, value, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if isinstance(min_repeat_ms, bool) or not isinstance(min_repeat_ms, (int, float)) or not min_repeat_ms >= 0:
        raise ValueError(f"min_repeat_ms must be a non-negative number, got {min_repeat_ms!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")

    spec = {"library": library, "shape": shape, "dtype": dtype, "repeats": repeats,
            "min_repeat_ms": float(min_repeat_ms), "warmup": warmup, "threads": threads}
    return _time_in_subprocess(spec, coretype, timeout_s)


def _time_in_subprocess(spec: dict, coretype: str | None, timeout_s: float) -> LibraryTimes:
    library, threads = spec["library"], spec["threads"]
    env = dict(os.environ)
    if coretype == "":
        env.pop("OPENBLAS_CORETYPE", None)
    elif coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    proc = subprocess.run(
        [sys.executable, "-m", "schedule_gym.reference", json.dumps(spec)],
        env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        what = spec["task"]["name"] if "task" in spec else spec["shape"]
        raise RuntimeError(f"timing {library} {what} {spec['dtype']} failed (exit code {proc.returncode}): {tail}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    requested = env.get("OPENBLAS_CORETYPE") if library == "numpy" else None
    reported = out.get("coretype")
    task = Task.from_dict(spec["task"]) if "task" in spec else None
    return LibraryTimes(
        library=library,
        version=out["version"],
        shape=tuple(spec["shape"]) if task is None else task.extents,
        dtype=spec["dtype"],
        times_s=tuple(out["times_s"]),
        number=out["number"],
        threads=out.get("threads"),
        blas=out.get("blas", ""),
        coretype_requested=requested,
        coretype=reported if reported else requested,
        coretype_confirmed=bool(reported),
        op="gemm" if task is None else task.op,
        task_flops=None if task is None else task.flops,
    )


def library_task_times(
    task: Task,
    library: str = "torch",
    repeats: int = 10,
    min_repeat_ms: float = 10.0,
    warmup: int = 3,
    threads: int | None = None,
    timeout_s: float = 600.0,
) -> LibraryTimes:
    """Time a library's kernel of any task in a subprocess: :func:`library_gemm_times` for GEMM, else torch's
    (see the module docstring), on the workload's inputs."""
    if not isinstance(task, Task):
        raise TypeError(f"library_task_times needs a Task, got {task!r}")
    if task.op == "gemm":
        return library_gemm_times(task, library, repeats=repeats, min_repeat_ms=min_repeat_ms, warmup=warmup,
                                  threads=threads, timeout_s=timeout_s)
    if library != "torch":
        raise ValueError(f"only torch times {task.op!r} tasks; {library!r} times GEMMs")
    spec = {"library": "torch", "task": task.to_dict(), "dtype": task.dtype, "repeats": repeats,
            "min_repeat_ms": float(min_repeat_ms), "warmup": warmup, "threads": threads}
    return _time_in_subprocess(spec, None, timeout_s)


#: CPU features (``/proc/cpuinfo`` flags) that OpenBLAS core types need.
CORETYPE_NEEDS = {"skylakex": "avx512f", "cooperlake": "avx512f", "sapphirerapids": "avx512f", "haswell": "avx2", "zen": "avx2"}


def library_references(
    task_or_shape: Task | Sequence[int], threads: int | None = None, numpy: bool = True, torch: bool = False
) -> list[LibraryTimes]:
    """The library GEMMs a tuned kernel is reported next to, timed one after another.

    NumPy with the OpenBLAS kernels this environment selects and, unless those already are or the CPU
    has no AVX-512, with the SkylakeX (AVX-512) ones (an environment's ``OPENBLAS_CORETYPE=Haswell`` slows
    NumPy down on an AVX-512 CPU, ``examples/results/library-figures.md``: both are shown); torch on request.
    """
    if isinstance(task_or_shape, Task) and task_or_shape.op != "gemm":
        return [library_task_times(task_or_shape, "torch", threads=threads)] if (torch or numpy) else []
    out = []
    if numpy:
        here = library_gemm_times(task_or_shape, "numpy", threads=threads)
        out.append(here)
        if (here.coretype or "").lower() != "skylakex" and cpu_has("avx512f"):
            out.append(library_gemm_times(task_or_shape, "numpy", coretype="SkylakeX", threads=threads))
    if torch:
        out.append(library_gemm_times(task_or_shape, "torch", threads=threads))
    return out


# ------------------------------------------------------------------------------ in the subprocess
def _openblas_info() -> dict:
    """Core type, config and threads of the OpenBLAS loaded in this process, asked of the library itself."""
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return {}
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        info: dict = {}
        for prefix in ("scipy_openblas", "openblas"):  # NumPy's wheels use scipy-openblas (symbols prefixed)
            for suffix in ("64_", ""):
                for key, name, restype in (("coretype", "get_corename", ctypes.c_char_p),
                                           ("blas", "get_config", ctypes.c_char_p),
                                           ("threads", "get_num_threads", ctypes.c_int)):
                    fn = getattr(lib, f"{prefix}_{name}{suffix}", None)
                    if fn is not None and key not in info:
                        fn.restype = restype
                        value = fn()
                        info[key] = value.decode() if isinstance(value, bytes) else int(value)
        if "coretype" in info:
            return info
    return {}


def _torch_kernel(task: Task) -> Any:
    """A torch callable computing ``task`` on the workload's inputs (its operator's ``torch_kernel``)."""
    import torch

    operator = get_operator(task.op)
    if operator.torch_kernel is None:
        raise ValueError(f"no torch kernel for operator {task.op!r}")
    return operator.torch_kernel(task, [torch.from_numpy(x) for x in operator.workload.inputs(task)])


def _child(spec: dict) -> dict:
    import time

    import numpy as np

    if "task" in spec:
        import torch

        if spec["threads"]:
            torch.set_num_threads(spec["threads"])
        call = _torch_kernel(Task.from_dict(spec["task"]))
        info = {"version": torch.__version__, "threads": torch.get_num_threads(),
                "blas": f"CPU capability {torch.backends.cpu.get_cpu_capability()}"}
        return {**info, **_time_calls(call, spec)}
    m, k, n = spec["shape"]
    rng = np.random.default_rng(0)
    a = rng.uniform(-1.0, 1.0, (m, k)).astype(spec["dtype"])
    b = rng.uniform(-1.0, 1.0, (k, n)).astype(spec["dtype"])
    if spec["library"] == "torch":
        import torch

        if spec["threads"]:
            torch.set_num_threads(spec["threads"])
        a, b = torch.from_numpy(a), torch.from_numpy(b)
        blas = dict(part.split("=", 1) for part in torch.__config__.show().replace(",", "\n").split()
                    if part.startswith("BLAS_INFO=")).get("BLAS_INFO", "unknown BLAS")
        info = {"version": torch.__version__, "threads": torch.get_num_threads(),
                "blas": f"{blas}, CPU capability {torch.backends.cpu.get_cpu_capability()}"}
    else:
        info = {"version": np.__version__}
    call = lambda: a @ b  # noqa: E731
    call()  # at least one call first: OpenBLAS is loaded and its threads started
    if spec["library"] == "numpy":
        info.update(_openblas_info())
    return {**info, **_time_calls(call, spec)}


def _time_calls(call: Any, spec: dict) -> dict:
    import time

    for _ in range(max(1, spec["warmup"])):
        call()
    number, goal_s = 1, spec["min_repeat_ms"] / 1e3
    while True:  # calls per sample, so that a sample lasts min_repeat_ms
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        elapsed = time.perf_counter() - t0
        if elapsed >= goal_s or number >= 1 << 20:
            break
        number = min(1 << 20, max(number * 2, math.ceil(number * goal_s * 1.2 / max(elapsed, 1e-9))))
    times = []
    for _ in range(spec["repeats"]):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        times.append((time.perf_counter() - t0) / number)
    return {"times_s": times, "number": number}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
