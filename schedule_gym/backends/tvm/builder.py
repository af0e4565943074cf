"""Building kernels: schedule a config with its template, compile it for the target, export a shared library.

:class:`LocalBuilder` builds a batch concurrently, one :class:`~schedule_gym.backends.tvm.workers.
IsolatedWorker` per build slot, into a build directory of its own; every candidate comes back as a
:class:`Built` (an artifact path, or an error: a failed build is a result). Every artifact gets a fresh
file name: ``dlopen`` returns the library already loaded for a path it has seen. A build directory is
removed when its builder closes, is collected, or the interpreter exits; one left by a killed process is
removed by the next builder made on the machine (:func:`remove_orphan_build_dirs`).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from schedule_gym.backends.machine import DISK_FULL, MACHINE, machine_cause, machine_failure
from schedule_gym.backends.tvm.workers import IsolatedWorker, short_error
from schedule_gym.tasks.task import Task
from schedule_gym.templates import get_template
from schedule_gym.types import Config, MeasureResult

__all__ = [
    "BUILD_DIR_PREFIX",
    "Built",
    "MIN_FREE_BYTES",
    "LocalBuilder",
    "build_artifact",
    "compile_cuda_source",
    "link_shared",
    "remove_orphan_build_dirs",
]


# these run inside build processes ------------------------------------------------------------------
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


def link_shared(output: str, objects: Sequence[str], options: Sequence[str] | None = None, **kwargs: Any) -> None:
    """``export_library``'s link step for CPU kernels with the system linker alone (``ld -shared``): the
    objects LLVM writes need no compiler driver, and ``ld`` links them faster than TVM's default
    ``g++ -shared``. The C and math libraries are named so that the kernel's calls (``expf``, ``memset``)
    resolve as with the compiler. Anything but object files (C sources TVM may add), or a Linux without
    ``ld`` on PATH, goes to TVM's default, the compiler; with neither, a ``FileNotFoundError`` says so."""
    import subprocess

    linker = shutil.which("ld") if sys.platform.startswith("linux") else None
    if not linker or any(not str(name).endswith(".o") for name in objects):
        from tvm.support import cc

        if cc.get_cc() is None:  # TVM would fail with a TypeError of subprocess
            raise FileNotFoundError(
                errno.ENOENT, "no linker: neither ld nor a C/C++ compiler (g++, gcc, clang++, clang, c++, cc, or $CXX) "
                f"is on PATH {os.environ.get('PATH', '')!r}"
            )
        return cc.create_shared(output, list(objects), options, **kwargs)
    command = [linker, "-shared", "-o", output, *map(str, objects), "-lm", "-lc"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode:
        why = done.stderr.strip()[-600:] or (
            f"ld was killed by signal {-done.returncode} ({signal.strsignal(-done.returncode)})"
            if done.returncode < 0 else f"exit status {done.returncode}"
        )
        raise RuntimeError(f"linking {output} failed ({' '.join(command)}): {why}")


def compile_cuda_source(executable: Any, target: dict) -> bytes:
    """Compile the generated CUDA source with nvcc; raises if it does not compile.

    The PyPI wheel of TVM keeps CUDA kernels as source until a CUDA runtime loads them, so without this
    a config whose kernel does not compile would only fail at run time (or never, on a machine without
    a GPU).
    """
    from tvm.support import nvcc

    source = executable.mod.imports[0].inspect_source("")
    return bytes(nvcc.compile_cuda(source, target_format="cubin", arch=target["arch"], compiler="nvcc"))


# build directories ----------------------------------------------------------------------------------
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


# the builder -----------------------------------------------------------------------------------------
#: A build that fails with less free space than this in the build directory failed for want of space (a
#: kernel's object files and library take up to a few MiB, and a full disk leaves no room for its message).
MIN_FREE_BYTES = 16 << 20


@dataclass
class Built:
    """The outcome of building one candidate; ``cause`` names the machine's fault in a build that failed
    because of the machine (:mod:`schedule_gym.backends.machine`), None otherwise."""

    config: Config
    path: str | None
    build_s: float
    error: str | None = None
    error_kind: str | None = None
    cause: str | None = None

    def failure(self, error: str | None = None, kind: str | None = None) -> MeasureResult:
        """This candidate as an error result (its build error unless another is given)."""
        if error is None and self.cause is not None:
            error = f"{self.cause}; not a failure of the config ({self.error})"
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


class LocalBuilder:
    """Builds candidates for ``target`` in up to ``workers`` build processes (started as needed, each on one
    TVM thread) into :attr:`build_dir`. Close it to end the processes and remove the directory.

    What a build process writes on stderr (LLVM's last words before it aborts) is kept, not shown: it
    becomes part of that build's error. A build that fails because of the machine (a file-size limit, a
    full disk, a missing linker or compiler, no memory) is a result of ``error_kind`` ``"machine"``; when
    every build of a batch fails the same machine way, :meth:`build` raises
    :class:`~schedule_gym.errors.MachineError` naming the cause instead."""

    def __init__(self, target: dict, workers: int) -> None:
        self.target = target
        self.workers = workers
        self._pool: list[IsolatedWorker] = []
        remove_orphan_build_dirs()
        #: where the artifacts are written
        self.build_dir = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
        # removed on close(), when the builder is collected, or at interpreter exit; a killed owner's
        # directory by the next builder made on this machine (remove_orphan_build_dirs)
        self._remove_build_dir = weakref.finalize(self, shutil.rmtree, self.build_dir, True)
        self._counter = itertools.count()

    def build(self, task: Task, template_name: str, configs: Sequence[Config], timeout_s: float) -> list[Built]:
        """Build every config concurrently with the template ``template_name``; an artifact path or an
        error for each, in order. A build past ``timeout_s`` is killed and reported as a timeout."""
        while len(self._pool) < min(self.workers, len(configs)):
            self._pool.append(IsolatedWorker({"TVM_NUM_THREADS": "1"}, maximum_uses=2048, capture_stderr=True))
        free = list(self._pool)
        lock = threading.Lock()

        def build_one(config: Config) -> Built:
            with lock:
                worker = free.pop()
            path = os.path.join(self.build_dir, f"k{next(self._counter)}.so")
            t0 = time.perf_counter()
            try:
                worker.call(build_artifact, (task, config, template_name, self.target, path), timeout_s)
                worker.take_stderr()
                return Built(config, path, time.perf_counter() - t0)
            except TimeoutError:
                worker.take_stderr()  # what the killed build said is no one's
                return Built(config, None, time.perf_counter() - t0, f"build timed out after {timeout_s:g} s", "timeout")
            except ChildProcessError:
                said = worker.take_stderr()
                error = "the build process crashed" + (f": {short_error(said)}" if said.strip() else "")
                return self._failed(config, t0, error, said)
            except Exception as exc:  # noqa: BLE001 - a failed build is a result
                said = f"{type(exc).__name__}: {exc}\n{worker.take_stderr()}"
                return self._failed(config, t0, f"build failed: {short_error(exc)}", said)
            finally:
                with lock:
                    free.append(worker)

        if len(configs) == 1:
            built = [build_one(configs[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(self._pool)) as pool:
                built = list(pool.map(build_one, configs))
        stop = machine_failure([(b.cause, b.error or "") for b in built], task.name)
        if stop is not None:
            raise stop
        return built

    def _failed(self, config: Config, t0: float, error: str, said: str) -> Built:
        """A failed build: of the machine if what the build said names a machine cause, or if the build
        directory's disk is (nearly) full; of the config otherwise."""
        cause = machine_cause(said)
        if cause is None:
            try:
                free = shutil.disk_usage(self.build_dir).free
            except OSError:
                free = MIN_FREE_BYTES
            if free < MIN_FREE_BYTES:
                cause = f"{DISK_FULL}: {free / 2**20:.1f} MiB free for {self.build_dir}"
        build_s = time.perf_counter() - t0
        if cause is None:
            return Built(config, None, build_s, error, "build")
        return Built(config, None, build_s, error, MACHINE, cause)

    def close(self) -> None:
        """End the build processes and remove the build directory. Safe to call more than once."""
        for worker in self._pool:
            worker.close()
        self._pool.clear()
        self._remove_build_dir()
