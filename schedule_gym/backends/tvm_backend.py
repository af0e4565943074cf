"""The real backend: TVM-compiled kernels, built in worker processes and timed in an isolated one.

Measuring a batch (:meth:`TVMBackend.measure`):

1. **Build**, concurrently, one TVM ``PopenWorker`` per build slot: schedule the config with the
   template, ``tvm.compile`` for the target, ``export_library`` to a fresh ``.so`` (fresh names matter:
   ``dlopen`` returns an already loaded library for a path it has seen).
2. **Run**, one artifact at a time, in a separate long-lived runner process (so timings never overlap
   builds and a crashing kernel kills only the runner): load the module, run it once on seeded random
   inputs; a first run past the censor bound (``MeasureProtocol.censor_ratio`` times the best so far)
   is stopped there (the runner is killed) and reported **censored**, "slower than the bound", neither
   checked nor timed; otherwise compare with NumPy (a wrong answer is an error, not a latency); a config
   whose first run is far slower than the best so far, or slow in absolute terms, is reported from that
   one run (``coarse``); the others are timed with ``time_evaluator`` under the :class:`MeasureProtocol`.
   :meth:`TVMBackend.measure_exact` never censors.

The runner is forked from a *zygote*, a process that imported TVM once: a killed runner is replaced in
milliseconds rather than the seconds TVM's import takes, and warms up (``warmup_s``) before its first
run. Its NumPy runs OpenBLAS on one thread (:data:`RUNNER_ENV`): OpenBLAS's threads spin for tens of
milliseconds after a call (the task's float64 reference, the warm-up), and a kernel timed meanwhile
shared the cores with them. Every failure is a result: a build error, a build or run timeout (the worker is killed and
respawned), a crash (the runner process dies; a new one starts), a wrong answer. The parent process
never runs generated code.

TVM's ``PopenWorker`` (``tvm.support.popen_pool``) runs the workers; their timeouts are enforced from
the parent, so a kernel that never returns cannot stall the search. MetaSchedule's
``LocalBuilder``/``LocalRunner`` were measured as the alternative and are kept as the comparison in
``examples/benchmarks/measure_cost.py``: they start a worker pool for every batch (about 1.5 s) and time
every candidate fully, where this backend keeps its workers alive and stops early on bad configs.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import statistics
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from schedule_gym.backends.base import LatencyBackend, MeasureResult, ResultCallback
from schedule_gym.spaces import Config
from schedule_gym.tasks import Task
from schedule_gym.templates import Template, get_template, template_of
from schedule_gym.errors import TaskError
from schedule_gym.hardware import available_memory_bytes
from schedule_gym.operators import get_workload

__all__ = [
    "ExportedKernel",
    "ForkedWorker",
    "IsolatedWorker",
    "MeasureProtocol",
    "TVMBackend",
    "export_kernel",
    "kernel_signature",
    "resolve_target",
]

STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
}


@dataclass(frozen=True)
class MeasureProtocol:
    """How a kernel is timed; stored with every record.

    Attributes:
        warmup: untimed runs before timing; the first is also the correctness check.
        number: runs per timed repeat (TVM raises it until a repeat lasts ``min_repeat_ms``).
        repeat: timed repeats; the latency is ``statistic`` over their per-run means.
        min_repeat_ms: minimum duration of one repeat.
        statistic: ``"median"``, ``"mean"`` or ``"min"``.
        cache_flush: flush the CPU caches before each repeat (TVM's ``cache_flush_cpu_non_first_arg``).
        early_stop_ratio: a config whose first run is this many times slower than the best precise
            latency so far, and longer than ``early_stop_floor_s``, is reported from that run alone
            (``coarse``); None: never. (The floor keeps call overhead in the first run of a tiny
            kernel from passing for slowness: such kernels are cheap to time anyway.)
        coarse_above_s: a first run longer than this is reported alone, whatever the best so far.
        check_correctness: compare the first run's output with NumPy.
        build_timeout_s, run_timeout_s: per candidate; past them the worker is killed (a timeout error).
        censor_ratio: a kernel whose first run lasts longer than the **censor bound**,
            ``max(censor_ratio x best, censor_floor_s)`` with ``best`` the best exact (not censored;
            coarse ones included) latency of the task measured by this backend so far, is stopped and reported **censored** ("slower than the
            bound", :class:`~schedule_gym.types.MeasureResult`): no timing, no correctness check, never
            a best-so-far. Before the first exact latency of a task nothing is censored; an environment
            measures ``s0`` first, so until something faster is found the bound is a multiple of
            ``s0``'s latency. The local runner is killed at the bound (plus ``CENSOR_SLACK``) and
            replaced by a process forked from a pre-loaded one, so the stop costs milliseconds, not
            TVM's import; over RPC the run cannot be stopped and is censored once it returns. None:
            never censor. Default 5: a kernel five times slower than the best is of no use to a search
            beyond "much slower" (the coarse rule between ``early_stop_ratio`` and ``censor_ratio``
            still gives a figure to kernels 3-5x slower). 5 instead of 10 (until 2026-11-25) took a
            random config's median cost at 1024^3 from 0.25 to 0.21 s, censoring 63% instead of 40%;
            XGBoost's best of 150 measurements moved by the noise (11.17 vs 11.10 ms, 10.44 vs
            10.75 ms over two seeds; Zen 4; ``examples/benchmarks/censor_ratio.py``).
        censor_floor_s: the bound is never below this. Default 0.05 s: a stop costs a fork (the
            replacement inherits the task's inputs and reference from the zygote and needs no
            warm-up), made ready while the next config builds.
        warmup_s: seconds of busy work (NumPy matmuls) a new runner process does before its first
            kernel run: after idle time a run is slow (a warm runner's run after 0.5 s idle: about 1.5x
            its steady time). A fresh runner's first run was about 2x slow even after the warm-up until
            the runner's OpenBLAS was made single-threaded (:data:`RUNNER_ENV`): its threads spun after
            the task's reference and the warm-up's matmuls, sharing the cores with the kernel. Now the
            first run is 1.03-1.08x the steady time with the warm-up and 1.19-1.27x without (two runs of
            ``examples/benchmarks/fresh_runner.py``, Zen 4, 2026-11-25). 0: no warm-up.
    """

    warmup: int = 1
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    statistic: str = "median"
    cache_flush: bool = False
    early_stop_ratio: float | None = 3.0
    early_stop_floor_s: float = 0.002
    coarse_above_s: float | None = 0.25
    check_correctness: bool = True
    build_timeout_s: float = 60.0
    run_timeout_s: float = 10.0
    censor_ratio: float | None = 5.0
    censor_floor_s: float = 0.05
    warmup_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("warmup", "number", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"MeasureProtocol.{name} must be a {'non-negative' if name == 'warmup' else 'positive'} integer, got {value!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"MeasureProtocol.statistic must be one of {list(STATISTICS)}, got {self.statistic!r}")
        for name in ("min_repeat_ms", "early_stop_floor_s", "build_timeout_s", "run_timeout_s", "censor_floor_s", "warmup_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
                raise ValueError(f"MeasureProtocol.{name} must be a non-negative number, got {value!r}")
        for name in ("early_stop_ratio", "coarse_above_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"MeasureProtocol.{name} must be a positive number or None, got {value!r}")
        ratio = self.censor_ratio
        if ratio is not None and (
            isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1 < ratio < math.inf
        ):
            raise ValueError(
                f"MeasureProtocol.censor_ratio must be a finite number above 1 (the bound is that many times the "
                f"best latency) or None (never censor), got {ratio!r}"
            )
        if self.warmup_s > 10:
            raise ValueError(f"MeasureProtocol.warmup_s must be at most 10 s, got {self.warmup_s!r}")

    def censor_bound_s(self, best_s: float | None) -> float | None:
        """The censor bound for a task whose best exact latency so far is ``best_s`` (None: no bound)."""
        return censor_bound_s(self.to_dict(), best_s)

    @classmethod
    def from_value(cls, value: MeasureProtocol | dict | None) -> MeasureProtocol:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown measurement protocol fields {unknown}; known: {sorted(known)}")
            return cls(**value)
        raise TypeError(f"protocol must be a MeasureProtocol or a dict, got {value!r}")

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------ targets
def host_llvm_target(num_cores: int | None = None) -> dict:
    """The LLVM target of this machine's CPU; raises rather than fall back to ``generic``."""
    import tvm

    detected = tvm.target.Target.from_device("cpu")
    cpu = str(detected.attrs.get("mcpu", "")) or tvm.target.codegen.llvm_get_system_cpu()
    triple = _host_triple()
    if not cpu or cpu == "generic" or not tvm.target.codegen.llvm_is_valid_cpu(cpu, triple):
        raise RuntimeError(
            f"could not detect this machine's CPU for LLVM (got {cpu!r}); pass an explicit target such as "
            "{'kind': 'llvm', 'mcpu': 'skylake-avx512'}: TVM would silently build generic SSE code"
        )
    target = {"kind": "llvm", "mcpu": cpu, "mtriple": triple}
    if num_cores:
        target["num-cores"] = int(num_cores)
    return target


def _host_triple() -> str:
    import tvm

    return str(tvm.target.Target.from_device("cpu").attrs.get("mtriple", "x86_64-linux-gnu"))


def resolve_target(target: str | dict, num_threads: int | None = None) -> dict:
    """A target as a TVM target dict, checked: ``"llvm"`` (this CPU), ``"cuda"``, or a dict."""
    import tvm

    if target == "llvm":
        return host_llvm_target(num_threads)
    if target == "cuda":
        return {"kind": "cuda", "arch": _cuda_arch()}
    if isinstance(target, dict):
        kind = target.get("kind")
        if kind == "llvm":
            cpu, triple = target.get("mcpu"), target.get("mtriple") or _host_triple()
            if not cpu or not tvm.target.codegen.llvm_is_valid_cpu(str(cpu), str(triple)):
                raise ValueError(
                    f"LLVM does not know the CPU {cpu!r} for {triple!r}; TVM would silently build generic code. "
                    f"This machine is {tvm.target.codegen.llvm_get_system_cpu()!r}"
                )
            out = dict(target)
            out.setdefault("mtriple", triple)
            if num_threads and "num-cores" not in out:
                out["num-cores"] = int(num_threads)
            return out
        if kind == "cuda":
            out = dict(target)
            out.setdefault("arch", _cuda_arch())
            return out
        raise ValueError(f"unknown target kind {kind!r} in {target!r}; known kinds: 'llvm', 'cuda'")
    raise ValueError(f"unknown target {target!r}; use 'llvm' (this CPU), 'cuda', or a TVM target dict")


def _cuda_arch() -> str:
    import tvm

    dev = tvm.cuda(0)
    if dev.exist:
        return "sm_" + str(dev.compute_version).replace(".", "")
    return "sm_90"  # build-only default where no GPU is present (Hopper, like the lent machines)


def target_key(target: dict, num_threads: int | None) -> str:
    key = json.dumps(target, sort_keys=True, separators=(",", ":"))
    return f"{key};threads={num_threads}" if target.get("kind") == "llvm" else key


# ------------------------------------------------------------------------------------------ workers
def _init_worker(env: dict[str, str], cpus: tuple[int, ...] | None) -> None:
    # Workers share the terminal's process group: a Ctrl-C reaches them too. Only the parent may react
    # (it stops the search and ends the workers); a worker killed by the interrupt would otherwise
    # report a false failure (a "crash") that could be written to the records.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(env)
    if cpus:
        os.sched_setaffinity(0, cpus)


class IsolatedWorker:
    """A TVM ``PopenWorker`` subprocess called with a parent-side timeout.

    On a timeout the subprocess is killed (and started again by the next call): :meth:`call` raises
    ``TimeoutError``. A subprocess that dies (a crashing kernel) raises ``ChildProcessError``. The
    subprocess ignores SIGINT; a Ctrl-C in the parent during :meth:`call` kills it and propagates.
    """

    def __init__(
        self, env: dict[str, str] | None = None, maximum_uses: int | None = None, cpus: tuple[int, ...] | None = None
    ) -> None:
        from tvm.support.popen_pool import PopenWorker

        self._worker = PopenWorker(initializer=_init_worker, initargs=(dict(env or {}), cpus), maximum_uses=maximum_uses)

    def call(self, fn: Callable, args: tuple, timeout_s: float | None) -> Any:
        box: dict[str, Any] = {}
        done = threading.Event()

        def receive() -> None:
            try:
                box["value"] = self._worker.recv()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=receive, daemon=True)
        launched = False
        try:
            self._worker.send(fn, args)
            launched = True  # from here the receiving thread may run, even if start() is interrupted
            thread.start()
            thread.join(timeout_s)
        except KeyboardInterrupt:
            # Ctrl-C: abandon the call and the process. Nothing may replace the interrupt: an error
            # raised here instead would reach the caller as a (false) failure of this candidate.
            # The receiving thread may not even have started (start() itself can be interrupted),
            # so it gets a short wait; a clean-up racing it is harmless here and its errors dropped.
            try:
                self._end(done if launched else None, wait_s=2.0)
            except Exception:  # noqa: BLE001, S110 - the interrupt matters more than a clean-up
                pass
            raise
        if not done.is_set():
            self._end(done, wait_s=10.0)
            raise TimeoutError(f"no answer within {timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _end(self, receiving: threading.Event | None, wait_s: float) -> None:
        # End the process first: PopenWorker.kill() closes the pipe before killing, and closing a
        # reader that another thread is blocked on deadlocks. Once the process is gone the
        # receiving thread sees end-of-file, ends the worker itself (PopenWorker.recv kills it on
        # end-of-file) and returns; wait for that (``receiving`` set) rather than race it.
        proc = getattr(self._worker, "_proc", None)
        if proc is not None:
            proc.kill()
        if receiving is not None:
            receiving.wait(wait_s)
        self._worker.kill()

    def close(self) -> None:
        self._worker.kill()


#: the local runner is killed at the censor bound plus this much (seconds) plus 5% of the bound, so that a
#: kernel is stopped only once it has surely run past the bound: the first-run call starts the kernel at
#: once (its output was filled with NaN by the load call before), well under a millisecond after it is sent
CENSOR_SLACK = 0.005


class _Zygote:
    """A process that has imported TVM and this module once, and forks runner processes on request.

    Importing TVM takes seconds (it imports torch); a runner killed at a censor bound is replaced by a
    fork of this process instead, in milliseconds. The zygote runs no kernels and starts no threads;
    it reaps its children. One per parent process (see :func:`_zygote`); it exits when its control
    socket closes (the parent ended).
    """

    def __init__(self) -> None:
        import socket
        import subprocess
        import sys

        # message boundaries kept: one request, one answer (a pid), never split or merged
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, **RUNNER_ENV}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from schedule_gym.backends.tvm_backend import _zygote_main; _zygote_main()",
             str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
        )
        theirs.close()
        self._lock = threading.Lock()

    def fork(self, env: dict[str, str], cpus: tuple[int, ...] | None, task: Task | None = None) -> tuple[int, Any]:
        """A new runner: ``(pid, connection)``; the runner serves ``(fn, args)`` calls on the connection.
        With ``task``, the zygote first makes the task's inputs and reference (:func:`host_inputs`; once
        per task, and only for a task whose buffers take under a quarter of the available memory) and
        the runner inherits them."""
        import pickle
        import socket
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                socket.send_fds(self._control, [pickle.dumps((env, cpus, task))], [theirs.fileno()])
                answer = self._control.recv(64)
        finally:
            theirs.close()
        if not answer:
            ours.close()
            raise ChildProcessError("the runner zygote process is gone")
        return int(answer.decode()), Connection(ours.detach())

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        try:
            self._control.close()
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()


#: Set in the zygote's environment, so in every runner: NumPy's OpenBLAS on one thread. After a BLAS call
#: (the task's float64 reference, made in each new runner, and the warm-up) OpenBLAS's threads spin for
#: tens of milliseconds; a kernel run meanwhile shared the cores with them and timed about 2x slow (a
#: fresh runner's first run of a 31 ms GEMM kernel: 63 ms median with or without the warm-up, against
#: 31-33 ms with this and the warm-up; Zen 4, 2026-11-25, ``examples/benchmarks/fresh_runner.py``).
RUNNER_ENV = {"OPENBLAS_NUM_THREADS": "1"}

_ZYGOTE: _Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote:
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive() or _ZYGOTE_PID != os.getpid():
            _set_zygote(_Zygote())
        return _ZYGOTE  # type: ignore[return-value]


_ZYGOTE_PID = -1


def _set_zygote(zygote: _Zygote) -> None:
    global _ZYGOTE, _ZYGOTE_PID
    _ZYGOTE, _ZYGOTE_PID = zygote, os.getpid()
    weakref.finalize(zygote, zygote.close)  # at interpreter exit at the latest


def _zygote_main() -> None:  # pragma: no cover - runs in the zygote process
    import pickle
    import socket
    import sys

    import numpy  # noqa: F401 - preloaded for the runners
    import tvm  # noqa: F401

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    control = socket.socket(fileno=int(sys.argv[1]))
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            os._exit(0)
        if not message or not fds:
            os._exit(0)
        env, cpus, task = pickle.loads(message)
        if task is not None:
            available = available_memory_bytes()
            if available is None or 4 * task_memory_bytes(task) < available:
                try:
                    host_inputs(task)
                except Exception:  # noqa: BLE001, S110 - the runner makes them itself and reports the failure
                    pass
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _runner_main(fds[0], env, cpus)
            os._exit(0)
        os.close(fds[0])
        control.sendall(str(pid).encode())


def _runner_main(fd: int, env: dict[str, str], cpus: tuple[int, ...] | None) -> None:  # pragma: no cover
    from multiprocessing.connection import Connection

    _init_worker(env, cpus)
    conn = Connection(fd)
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            answer = (False, exc)
        try:
            conn.send(answer)
        except (BrokenPipeError, ConnectionResetError):
            return  # the parent closed the connection (it moved on, or ended): nobody to answer
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            conn.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))


class ForkedWorker:
    """The runner process: forked from the zygote, called like :class:`IsolatedWorker`.

    :meth:`call` raises ``TimeoutError`` (the process is killed) past its timeout and
    ``ChildProcessError`` if the process died; the next call forks a new process. Replacing a killed
    runner costs a fork. ``maximum_uses`` calls after it started, the process is replaced (loaded
    kernels are never unloaded).
    """

    def __init__(self, env: dict[str, str] | None = None, maximum_uses: int | None = None, cpus: tuple[int, ...] | None = None) -> None:
        self._env = dict(env or {})
        self._cpus = cpus
        self._maximum_uses = maximum_uses
        self._pid: int | None = None
        self._pidfd: int | None = None  # signals the process itself, never a later one with its pid
        self._conn: Any = None
        self._uses = 0
        self._ahead = False  # a call sent by send_ahead whose answer is not read yet
        #: the task the next runner is forked for: it inherits the task's inputs and reference from the zygote
        self.task: Task | None = None

    @property
    def started(self) -> bool:
        return self._pid is not None

    def start(self) -> None:
        if self._pid is None:
            self._pid, self._conn = _zygote().fork(self._env, self._cpus, self.task)
            self._uses = 0
            try:  # the runner waits for its first call: it is alive, its pid is its own
                self._pidfd = os.pidfd_open(self._pid)
            except (AttributeError, OSError):
                self._pidfd = None

    def send_ahead(self, fn: Callable, args: tuple) -> None:
        """Start a call now (forking a process if needed) and return; the next :meth:`call` first waits
        for its answer (within its own timeout) and drops it, raising if the process died or hung."""
        try:
            self.start()
            self._conn.send((fn, args))
            self._ahead = True
        except (ChildProcessError, OSError):
            self.close()

    def call(self, fn: Callable, args: tuple, timeout_s: float | None) -> Any:
        if self._maximum_uses is not None and self._uses >= self._maximum_uses:
            self.close()
        self.start()
        self._uses += 1
        try:
            if self._ahead:
                self._ahead = False
                if not self._conn.poll(timeout_s):
                    self.close()
                    raise TimeoutError(f"no answer within {timeout_s:g} s")
                try:
                    self._conn.recv()
                except (EOFError, OSError):
                    self.close()
                    raise ChildProcessError("the runner process died") from None
            self._conn.send((fn, args))
            ready = self._conn.poll(timeout_s)
            if not ready:
                self.close()
                raise TimeoutError(f"no answer within {timeout_s:g} s")
            try:
                ok, value = self._conn.recv()
            except (EOFError, OSError):
                self.close()
                raise ChildProcessError("the runner process died") from None
        except KeyboardInterrupt:
            self.close()
            raise
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            raise ChildProcessError("the runner process died") from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self._pid is not None:
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                else:
                    os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                if self._pidfd is not None:
                    os.close(self._pidfd)
                self._conn.close()
                self._pid, self._pidfd, self._conn = None, None, None
                self._ahead = False


def _short(exc: BaseException, limit: int = 600) -> str:
    """The useful end of a (long, TVM) error message."""
    text = str(exc).replace("\x00", "").strip() or type(exc).__name__  # nvcc's output holds NULs
    lines = [line for line in text.splitlines() if line.strip()]
    tail = lines[-1] if lines else text
    for line in reversed(lines):  # TVM puts the reason on an "...Error: ..." line
        if "Error" in line or "error" in line:
            tail = line.strip()
            break
    return tail[:limit]


# these run inside worker processes ----------------------------------------------------------------
def build_artifact(task: Task, config: Config, template_name: str, target: dict, path: str) -> float:
    """Schedule, compile and export one kernel; returns the seconds it took."""
    import tvm

    t0 = time.perf_counter()
    mod = get_template(template_name).schedule(task, config)
    tvm_target = tvm.target.Target(target)
    with tvm_target:
        executable = tvm.compile(mod, target=tvm_target)
        if target["kind"] == "cuda":
            compile_cuda_source(executable, target)
    executable.export_library(path, fcompile=link_shared if target["kind"] == "llvm" else None)
    return time.perf_counter() - t0


#: the system linker, or None (then TVM's default, ``g++ -shared``)
_LD = shutil.which("ld") if os.name == "posix" and os.uname().sysname == "Linux" else None


def link_shared(output: str, objects: Sequence[str], options: Sequence[str] | None = None, **kwargs: Any) -> None:
    """``export_library``'s link step for CPU kernels with the system linker alone (``ld -shared``): the
    objects LLVM writes need no compiler driver; ``g++ -shared`` (TVM's default) took a median 19 ms of a
    build of about 100 ms, ``ld`` 3 ms (GEMM 1024^3, Zen 4, 2026-11-25). The C and math libraries are
    named so that the kernel's calls (``expf``, ``memset``) resolve as with the compiler. Anything but
    object files (C sources TVM may add) goes to TVM's default, the compiler."""
    import subprocess

    if not _LD or any(not str(name).endswith(".o") for name in objects):
        from tvm.support import cc

        return cc.create_shared(output, list(objects), options, **kwargs)
    command = [_LD, "-shared", "-o", output, *map(str, objects), "-lm", "-lc"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise RuntimeError(f"linking {output} failed ({' '.join(command)}): {done.stderr.strip()[-600:]}")


def compile_cuda_source(executable: Any, target: dict) -> bytes:
    """Compile the generated CUDA source with nvcc; raises if it does not compile.

    The PyPI wheel of TVM keeps CUDA kernels as source until a CUDA runtime loads them, so without this
    a config whose kernel does not compile would only fail at run time (or never, on a machine without
    a GPU).
    """
    from tvm.support import nvcc

    source = executable.mod.imports[0].inspect_source("")
    return bytes(nvcc.compile_cuda(source, target_format="cubin", arch=target["arch"], compiler="nvcc"))


_RUNNER_STATE: dict[Any, Any] = {}


def task_memory_bytes(task: Task) -> int:
    """About how many bytes measuring ``task`` allocates: inputs and output in the task's dtype, their
    float64 copies, and the float64 reference and tolerance (:meth:`Workload.reference`)."""
    import numpy as np

    workload = get_workload(task.op)
    itemsize = np.dtype(task.dtype).itemsize
    inputs = sum(int(np.prod(shape, dtype=np.int64)) for shape in workload.input_shapes(task))
    output = int(np.prod(workload.output_shape(task), dtype=np.int64))
    return inputs * (2 * itemsize + 2 * 8) + output * (2 * itemsize + 3 * 8)


#: In the zygote and the runners forked from it: ``(task key, inputs, expected, tolerance, pid that made
#: them)`` of the last task :func:`host_inputs` made (NumPy arrays; a forked runner shares the zygote's
#: copy until it writes to it)
_HOST_INPUTS: tuple[str, list[Any], Any, Any, int] | None = None


def host_inputs(task: Task) -> tuple[list[Any], Any, Any]:
    """The workload's seeded inputs with the float64 reference output and its per-output tolerance
    (:meth:`Workload.reference`), as NumPy arrays: made once per task in a process (the zygote makes them
    before forking a runner for the task, which then has them without the reference's matmuls)."""
    global _HOST_INPUTS
    if _HOST_INPUTS is None or _HOST_INPUTS[0] != task.key:
        _HOST_INPUTS = None  # the previous task's arrays are freed before the new ones are made
        _HOST_INPUTS = (task.key, *make_host_inputs(task), os.getpid())
    return _HOST_INPUTS[1], _HOST_INPUTS[2], _HOST_INPUTS[3]


def make_host_inputs(task: Task) -> tuple[list[Any], Any, Any]:
    """The workload's seeded inputs, with the float64 reference output and its per-output tolerance."""
    workload = get_workload(task.op)
    inputs = workload.inputs(task)
    return (inputs, *workload.reference(task, inputs))


def runner_facts() -> dict:
    """What a runner process says of itself (tests, diagnostics): its pid, the task whose inputs it holds
    and the pid of the process that made them (the zygote's when inherited), whether it warmed up, and
    its OpenBLAS thread setting."""
    return {
        "pid": os.getpid(),
        "inputs_key": None if _HOST_INPUTS is None else _HOST_INPUTS[0],
        "inputs_made_by": None if _HOST_INPUTS is None else _HOST_INPUTS[4],
        "warm": bool(_RUNNER_STATE.get("warm")),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


def device_inputs(task: Task, dev: Any, host: tuple[list[Any], Any, Any] | None = None) -> tuple[list[Any], Any, Any]:
    """The workload's seeded inputs and an output buffer on ``dev`` (local or RPC device), with the float64
    reference output and its per-output tolerance (:meth:`Workload.reference`); ``host``: those arrays
    already made (:func:`host_inputs`)."""
    import tvm

    workload = get_workload(task.op)
    inputs, expected, tol = make_host_inputs(task) if host is None else host
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    args.append(tvm.runtime.empty(workload.output_shape(task), task.dtype, dev))
    return args, expected, tol


def censor_bound_s(protocol: dict, best_s: float | None) -> float | None:
    """The censor bound (see :class:`MeasureProtocol`) of a protocol dict, or None: nothing is censored."""
    ratio = protocol.get("censor_ratio")
    if ratio is None or best_s is None:
        return None
    return max(ratio * best_s, protocol.get("censor_floor_s", 0.0))


def warm_up(seconds: float) -> float:
    """Keep every CPU thread of this process busy for ``seconds`` (NumPy matmuls); the seconds spent."""
    import numpy as np

    if seconds <= 0:
        return 0.0
    a = np.ones((512, 512), dtype=np.float32)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
    return time.perf_counter() - t0


def prepare_runner(task: Task, device: str, warmup_s: float) -> float:
    """Make the task's inputs in the runner process (once per task) and, in a new process, warm up
    (``warmup_s``, CPU only). Returns the warm-up seconds."""
    import tvm

    dev = tvm.device(device, 0)
    key = (task.key, device)
    if _RUNNER_STATE.get("inputs_key") != key:
        _RUNNER_STATE.pop("inputs", None)
        _RUNNER_STATE["inputs"] = device_inputs(task, dev, host_inputs(task))
        _RUNNER_STATE["inputs_key"] = key
    warmed = 0.0
    if not _RUNNER_STATE.get("warm"):
        warmed = warm_up(warmup_s) if device == "cpu" else 0.0
        _RUNNER_STATE["warm"] = True
    return warmed


def load_artifact(path: str, task: Task, device: str, warmup_s: float, fill_nan: bool = False) -> float:
    """Load a kernel in the runner process for the calls below, after :func:`prepare_runner`; with
    ``fill_nan`` fill the output with NaN for the first run's check (here, so the first-run call runs
    the kernel and nothing else)."""
    import tvm

    warmed = prepare_runner(task, device, warmup_s)
    _RUNNER_STATE["module"] = (tvm.runtime.load_module(path), tvm.device(device, 0))
    if fill_nan:
        fill_with_nan(_RUNNER_STATE["inputs"][0][-1], task.dtype)
    return warmed


def first_run_loaded(task: Task, check: bool) -> float:
    """The first run of the loaded kernel (:func:`first_run`; ``check``: fill the output with NaN first)."""
    (module, dev), (args, _, _) = _RUNNER_STATE["module"], _RUNNER_STATE["inputs"]
    return first_run(module["main"], dev, args, task, check)


def finish_loaded(task: Task, protocol: dict, best_s: float | None, first_s: float, reference_s: float | None) -> dict:
    """:func:`check_and_time` of the loaded kernel after its first run."""
    (module, dev), (args, expected, tol) = _RUNNER_STATE.pop("module"), _RUNNER_STATE["inputs"]
    return check_and_time(module, dev, args, (expected, tol), task, protocol, best_s, first_s, reference_s)


def fill_with_nan(out: Any, dtype: str) -> None:
    """Fill an output buffer with NaN, so a kernel that leaves any element unwritten fails the check."""
    import numpy as np

    out.copyfrom(np.full(tuple(out.shape), np.nan, dtype=dtype))


def first_run(kernel: Any, dev: Any, args: Sequence[Any], task: Task, check: bool) -> float:
    """Run ``kernel`` once (the output first filled with NaN when it is to be checked); its seconds."""
    if check:
        fill_with_nan(args[-1], task.dtype)
    t0 = time.perf_counter()
    kernel(*args)
    dev.sync()
    return time.perf_counter() - t0


def check_and_time(
    module: Any,
    dev: Any,
    args: Sequence[Any],
    expected: tuple[Any, Any],
    task: Task,
    protocol: dict,
    best_s: float | None,
    first_s: float | None = None,
    reference_s: float | None = None,
) -> dict:
    """Run ``module``'s kernel once (unless ``first_s`` says it just ran) and check it, then time it under
    ``protocol`` (local or RPC module). ``best_s`` is the best precise latency so far (the early-stop
    rule's), ``reference_s`` the best exact one (the censor bound's; default ``best_s``).

    Returns ``{"costs": [...], "coarse": bool}``, ``{"censored_s": bound}`` (the first run passed the
    censor bound: not checked, not timed) or ``{"error": ..., "kind": "wrong_result"}``.
    """
    kernel = module["main"]
    out = args[-1]
    reference, tol = expected
    if first_s is None:
        first_s = first_run(kernel, dev, args, task, protocol["check_correctness"])
    bound = censor_bound_s(protocol, best_s if reference_s is None else reference_s)
    if bound is not None and first_s > bound:
        return {"censored_s": bound}
    if protocol["check_correctness"]:
        problem = get_workload(task.op).check(task, out.numpy(), reference, tol)
        if problem:
            return {"error": problem, "kind": "wrong_result"}
    ratio, ceiling = protocol["early_stop_ratio"], protocol["coarse_above_s"]
    floor = protocol["early_stop_floor_s"]
    if (ratio is not None and best_s is not None and first_s > max(ratio * best_s, floor)) or (
        ceiling is not None and first_s > ceiling
    ):
        return {"costs": [first_s], "coarse": True}
    for _ in range(max(0, protocol["warmup"] - 1)):
        kernel(*args)
    dev.sync()
    evaluator = module.time_evaluator(
        "main",
        dev,
        number=protocol["number"],
        repeat=protocol["repeat"],
        min_repeat_ms=int(math.ceil(protocol["min_repeat_ms"])),
        f_preproc="cache_flush_cpu_non_first_arg" if protocol["cache_flush"] else "",
    )
    return {"costs": [float(x) for x in evaluator(*args).results], "coarse": False}


# ------------------------------------------------------------------------------------------- export
@dataclass(frozen=True)
class ExportedKernel:
    """A kernel written as a shared library by :func:`export_kernel`.

    Load it with ``tvm.runtime.load_module(path)`` and call ``module[function](*tensors)`` (see
    :attr:`signature`). ``max_abs_error`` is the check against NumPy after export (None: not checked).
    """

    path: str
    function: str
    signature: str
    target: dict
    template: str
    max_abs_error: float | None


def kernel_signature(task: Task, function: str = "main") -> str:
    """How a kernel of ``task`` is called: destination passing, the output is written, nothing returned."""
    return get_workload(task.op).signature(task, function)


def check_artifact(path: str, task: Task, device: str) -> dict:
    """Load a kernel library, run it once on seeded inputs and compare with the reference (in a worker)."""
    import numpy as np
    import tvm

    dev = tvm.device(device, 0)
    args, expected, tol = device_inputs(task, dev)
    tvm.runtime.load_module(path)["main"](*args)
    dev.sync()
    out = args[-1].numpy()
    problem = get_workload(task.op).check(task, out, expected, tol)
    return {"problem": problem, "max_abs_error": float(np.abs(out.astype(np.float64) - expected).max())}


def export_kernel(
    task: Task,
    config: Config,
    path: str | os.PathLike,
    template: str = "auto",
    target: str | dict = "llvm",
    check: bool = True,
) -> ExportedKernel:
    """Compile ``config`` of ``task`` and write it to ``path`` (``.so``; ``.tar`` also works), checked.

    The library exports one function, ``main`` (see :func:`kernel_signature`); its parallel loops run
    on TVM's runtime thread pool (``TVM_NUM_THREADS``). With ``check`` the library is loaded again in a
    worker process (the parent never runs generated code), run once and compared with NumPy; a wrong
    result raises ``RuntimeError``. A CUDA kernel is checked only where a GPU is present.
    """
    import tvm

    target_dict = resolve_target(target)
    chosen = template_of(task, target_dict["kind"]) if template == "auto" else get_template(template)
    chosen.check(task, target_dict["kind"])
    path = os.fspath(path)
    build_artifact(task, config, chosen.name, target_dict, path)
    device = "cpu" if target_dict["kind"] == "llvm" else "cuda"
    error = None
    if check and tvm.device(device, 0).exist:
        worker = IsolatedWorker()
        try:
            outcome = worker.call(check_artifact, (path, task, device), 120.0)
        finally:
            worker.close()
        if outcome["problem"]:
            raise RuntimeError(f"the kernel exported to {path} is wrong: {outcome['problem']}")
        error = outcome["max_abs_error"]
    return ExportedKernel(path, "main", kernel_signature(task), target_dict, chosen.version, error)


# ------------------------------------------------------------------------------------------ backend
#: Build directories are ``<tempdir>/schedule-gym-<owner pid>-<random>``.
BUILD_DIR_PREFIX = "schedule-gym-"
_BUILD_DIR = re.compile(re.escape(BUILD_DIR_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def remove_orphan_build_dirs(root: str | None = None) -> list[str]:
    """Delete the build directories under ``root`` (the temp dir) whose owner process is gone (killed
    before it could clean up); returns them. Directories without an owner pid in their name (older
    versions) are left alone."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = _BUILD_DIR.fullmatch(entry.name)
        if match and entry.is_dir(follow_symlinks=False) and not _pid_alive(int(match.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


@dataclass
class Built:
    """The outcome of building one candidate."""

    config: Config
    path: str | None
    build_s: float
    error: str | None = None
    error_kind: str | None = None

    def failure(self, error: str | None = None, kind: str | None = None) -> MeasureResult:
        """This candidate as an error result (its build error unless another is given)."""
        return MeasureResult.failure(
            self.config, error or self.error or "build failed", kind or self.error_kind or "build", build_s=self.build_s
        )

    def discard(self) -> None:
        """Delete the artifact (the runner process keeps what it loaded)."""
        if self.path:
            try:
                os.remove(self.path)
            except OSError:
                pass


class TVMBackend(LatencyBackend):
    """Latencies of TVM-compiled kernels on this machine (``target="llvm"``) or its GPU (``"cuda"``).

    Args:
        target: ``"llvm"`` (this CPU, detected; never a silent ``generic``), ``"cuda"``, or a TVM
            target dict such as ``{"kind": "llvm", "mcpu": "znver5"}``.
        template: a name from :data:`schedule_gym.templates.TEMPLATES`; ``"auto"`` picks each task's
            template for the target kind: its packed template for a task in packed form, else its
            operator's default (:func:`schedule_gym.templates.template_of`).
        num_threads: threads of the TVM runtime when timing (default: all cores).
        build_workers: concurrent build processes (default: all cores).
        runner_cpus: pin the process that runs kernels to these CPUs (e.g. ``(0,)`` with
            ``num_threads=1`` to time on one core while other work uses the rest).
        protocol: a :class:`MeasureProtocol` or a dict of its fields.
    """

    name = "tvm"
    deterministic = False
    measures_hardware = True
    needs_tvm = True

    def __init__(
        self,
        target: str | dict = "llvm",
        template: str = "auto",
        num_threads: int | None = None,
        build_workers: int | None = None,
        protocol: MeasureProtocol | dict | None = None,
        runner_cpus: Sequence[int] | None = None,
    ) -> None:
        cores = os.cpu_count() or 1
        for name, value in (("num_threads", num_threads), ("build_workers", build_workers)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        self.num_threads = num_threads or cores
        self.protocol = MeasureProtocol.from_value(protocol)
        self.target = resolve_target(target, self.num_threads)
        self.target_kind = self.target["kind"]
        #: the template every task is built with, or None: each operator's default (``"auto"``)
        self.template: Template | None = None if template == "auto" else get_template(template)
        if self.template is not None:
            self.template.check_target(self.target_kind)
        self.device = "cpu" if self.target_kind == "llvm" else "cuda"
        self.build_workers = build_workers or cores
        self.runner_cpus = tuple(int(c) for c in runner_cpus) if runner_cpus else None
        if self.runner_cpus and not set(self.runner_cpus) <= os.sched_getaffinity(0):
            raise ValueError(f"runner_cpus {list(self.runner_cpus)} are not all among this process's CPUs {sorted(os.sched_getaffinity(0))}")
        self.target_key = target_key(self.target, self.num_threads)
        self._builders: list[IsolatedWorker] = []
        self._runner: IsolatedWorker | None = None
        remove_orphan_build_dirs()
        self._tmpdir = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
        # removed on close(), when the backend is collected, or at interpreter exit; a killed owner's
        # directory by the next backend made on this machine (remove_orphan_build_dirs)
        self._remove_tmpdir = weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
        self._counter = itertools.count()
        #: per task key: the best precise latency (the early-stop rule's reference) and the best exact one,
        #: coarse included (the censor bound's)
        self._best_s: dict[str, float] = {}
        self._reference_s: dict[str, float] = {}
        self._closed = False
        _zygote()  # the runners' parent starts importing TVM now, while the first batch builds

    # -------------------------------------------------------------------------------- records
    def template_of(self, task: Task) -> Template:
        """The template that builds ``task`` here (checked against its operator and the target)."""
        template = template_of(task, self.target_kind) if self.template is None else self.template
        template.check(task, self.target_kind)
        return template

    def record_context(self, task: Task) -> tuple[str, str]:
        return (self.target_key, self.template_of(task).version)

    def check_task(self, task: Task) -> None:
        """Refuse, up front, a task this backend could only fail config by config: an operator the
        template cannot build, a dtype and reduction length whose result cannot be checked soundly (with
        ``check_correctness``), or buffers larger than this machine's available memory."""
        self.template_of(task)
        workload = get_workload(task.op)
        need, available = task_memory_bytes(task), available_memory_bytes()
        if available is not None and need > available:
            raise TaskError(
                f"task {task.name!r} needs about {need / 2**30:.1f} GiB for its inputs, output and float64 "
                f"reference; this machine has {available / 2**30:.1f} GiB available"
            )
        if self.protocol.check_correctness:
            try:
                workload.check_is_sound(task)
            except TaskError as exc:
                raise TaskError(f"{exc} (or measure with protocol check_correctness=False)") from None

    def protocol_dict(self) -> dict:
        return self.protocol.to_dict()

    # ---------------------------------------------------------------------------------- build
    def build(self, task: Task, configs: Sequence[Config]) -> list[Built]:
        """Build every config concurrently; an artifact path or an error for each."""
        template = self.template_of(task)
        while len(self._builders) < min(self.build_workers, len(configs)):
            self._builders.append(IsolatedWorker({"TVM_NUM_THREADS": "1"}, maximum_uses=2048))
        free = list(self._builders)
        lock = threading.Lock()

        def build_one(config: Config) -> Built:
            with lock:
                worker = free.pop()
            path = os.path.join(self._tmpdir, f"k{next(self._counter)}.so")
            t0 = time.perf_counter()
            try:
                worker.call(
                    build_artifact,
                    (task, config, template.name, self.target, path),
                    self.protocol.build_timeout_s,
                )
                return Built(config, path, time.perf_counter() - t0)
            except TimeoutError:
                return Built(config, None, time.perf_counter() - t0,
                             f"build timed out after {self.protocol.build_timeout_s:g} s", "timeout")
            except ChildProcessError:
                return Built(config, None, time.perf_counter() - t0, "the build process crashed", "build")
            except Exception as exc:  # noqa: BLE001 - a failed build is a result
                return Built(config, None, time.perf_counter() - t0, f"build failed: {_short(exc)}", "build")
            finally:
                with lock:
                    free.append(worker)

        if len(configs) == 1:
            return [build_one(configs[0])]
        with ThreadPoolExecutor(max_workers=len(self._builders)) as pool:
            return list(pool.map(build_one, configs))

    # ------------------------------------------------------------------------------------ run
    def _runner_worker(self) -> ForkedWorker:
        if self._runner is None:
            self._runner = ForkedWorker({"TVM_NUM_THREADS": str(self.num_threads)}, maximum_uses=1024, cpus=self.runner_cpus)
        return self._runner

    def _result(self, task: Task, built: Built, outcome: dict | None, error: tuple[str, str] | None, run_s: float) -> MeasureResult:
        if error is not None:
            return MeasureResult.failure(built.config, error[0], error[1], build_s=built.build_s, run_s=run_s)
        assert outcome is not None
        if "error" in outcome:
            return MeasureResult.failure(built.config, outcome["error"], outcome["kind"], build_s=built.build_s, run_s=run_s)
        if "censored_s" in outcome:
            return MeasureResult.censored_at(built.config, outcome["censored_s"], build_s=built.build_s, run_s=run_s)
        costs = tuple(outcome["costs"])
        latency = STATISTICS[self.protocol.statistic](costs)
        reference = self._reference_s.get(task.key)
        if reference is None or latency < reference:
            self._reference_s[task.key] = latency
        if not outcome["coarse"]:
            best = self._best_s.get(task.key)
            if best is None or latency < best:
                self._best_s[task.key] = latency
        return MeasureResult(built.config, latency, costs_s=costs, build_s=built.build_s, run_s=run_s, coarse=outcome["coarse"])

    def run_one(self, task: Task, built: Built, protocol: MeasureProtocol | None = None) -> MeasureResult:
        """Check and time one built artifact in the runner process (under ``protocol``, default ours).

        Three calls to the runner: load (and, in a new runner, inputs and warm-up), the first run, then
        check and timing. The first run's call times out at the censor bound (``bound x 1.05 +
        CENSOR_SLACK``): the runner is killed and the config reported censored. The three calls
        together have ``run_timeout_s``.
        """
        protocol = protocol or self.protocol
        best_s, reference_s = self._best_s.get(task.key), self._reference_s.get(task.key)
        bound = protocol.censor_bound_s(reference_s)
        try:  # a fork, or once per process the zygote's start (importing TVM): not part of the run
            self._runner_worker().task = task
            self._runner_worker().start()
        except ChildProcessError:
            pass  # the call below fails the same way and reports it
        t0 = time.perf_counter()
        deadline = t0 + protocol.run_timeout_s

        def left() -> float:
            return max(1e-3, deadline - time.perf_counter())

        outcome, error = None, None
        try:
            runner = self._runner_worker()
            runner.call(load_artifact, (built.path, task, self.device, protocol.warmup_s, protocol.check_correctness), left())
            kill_s = None if bound is None else bound * 1.05 + CENSOR_SLACK
            if kill_s is not None and kill_s < left():
                try:
                    first_s = runner.call(first_run_loaded, (task, False), kill_s)
                except TimeoutError:  # stopped at the bound: the runner was killed
                    outcome = {"censored_s": bound}
                    # Its replacement (forked with the task's inputs and reference) is made ready now, while
                    # the caller goes on. No warm-up: the killed kernel kept the cores busy to this moment,
                    # and a runner forked just after a kill ran its first kernel as fast with a warm-up as
                    # without (examples/benchmarks/fresh_runner.py).
                    runner.send_ahead(prepare_runner, (task, self.device, 0.0))
            else:
                first_s = runner.call(first_run_loaded, (task, False), left())
            if outcome is None:
                outcome = runner.call(finish_loaded, (task, protocol.to_dict(), best_s, first_s, reference_s), left())
        except TimeoutError:
            error = (f"run timed out after {protocol.run_timeout_s:g} s (the runner was restarted)", "timeout")
        except ChildProcessError:
            error = (self._death_cause(task), "crash")
        except MemoryError:
            error = (self._out_of_memory(task), "run")
        except Exception as exc:  # noqa: BLE001 - a failed run is a result
            text = _short(exc)
            if "MemoryError" in text or "out of memory" in text.lower() or "failed to allocate" in text.lower():
                error = (f"{self._out_of_memory(task)}: {text}", "run")
            else:
                error = (f"run failed: {text}", "run")
        finally:
            built.discard()
        return self._result(task, built, outcome, error, time.perf_counter() - t0)

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """:meth:`measure` with ``censor_ratio=None``: every kernel is run and timed in full."""
        saved = self.protocol
        self.protocol = replace(saved, censor_ratio=None)
        try:
            return self.measure(task, configs, on_result)
        finally:
            self.protocol = saved

    def _out_of_memory(self, task: Task) -> str:
        available = available_memory_bytes()
        return (
            f"out of memory allocating the task's buffers (about {task_memory_bytes(task) / 2**30:.2f} GiB for inputs, "
            f"output and float64 reference; {'?' if available is None else f'{available / 2**30:.1f}'} GiB available)"
        )

    def _death_cause(self, task: Task) -> str:
        """Why the runner process died: a kernel crash, or (killed while its buffers fill most of the
        available memory) the out-of-memory killer."""
        available = available_memory_bytes()
        if available is not None and 2 * task_memory_bytes(task) > available:
            return f"the runner process was killed, probably {self._out_of_memory(task)} (it was restarted)"
        return "the kernel crashed the runner process (it was restarted)"

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError("this TVMBackend is closed")
        results = []
        for position, built in enumerate(self.build(task, configs)):  # builds first: never during timings
            if built.path is None:
                results.append(built.failure())
            else:
                results.append(self.run_one(task, built))
            if on_result is not None:
                on_result(position, results[-1])
        return results

    def close(self) -> None:
        for worker in self._builders:
            worker.close()
        self._builders.clear()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self._remove_tmpdir()
        self._closed = True
