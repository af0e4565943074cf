"""Worker processes: where kernels are built and run, so that the parent process never runs generated code.

* :class:`IsolatedWorker`: a TVM ``PopenWorker`` called with a timeout enforced from the parent (builds,
  and one-off checks of exported kernels);
* :class:`ForkedWorker`: the runner process, forked from a *zygote* (a process that imported TVM once), so
  that a runner killed at a timeout or a censor bound is replaced by a fork rather than a new interpreter.
  The zygote and its runners run with :data:`RUNNER_ENV`.

A call past its timeout kills the process (``TimeoutError``), a process that dies raises
``ChildProcessError``, and the next call starts a new one. Workers ignore SIGINT from their first
instruction (they are started with it blocked, :func:`sigint_blocked`, and ignore it before unblocking):
a Ctrl-C reaches only the parent, which ends the worker and lets the interrupt propagate, even while a
worker is still importing TVM.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from schedule_gym.backends.tvm.runner import host_inputs, task_memory_bytes
from schedule_gym.hardware import available_memory_bytes
from schedule_gym.tasks.task import Task

__all__ = ["RUNNER_ENV", "ForkedWorker", "IsolatedWorker", "restart_zygote", "short_error", "sigint_blocked",
           "zygote_pid"]

#: Set in the zygote's environment, so in every runner:
#:
#: * NumPy's OpenBLAS on one thread. After a BLAS call (the task's float64 reference, the warm-up)
#:   OpenBLAS's threads spin for a while, and a kernel timed meanwhile would share the cores with them.
#: * Nothing initialises CUDA in the zygote: a child forked after ``cuInit`` cannot use the GPU (every
#:   CUDA kernel then fails its run with "initialization error", seen on an H100). ``import tvm`` imports
#:   ``tvm_ffi``, whose optional torch extension asks ``torch.cuda.is_available()`` at import, and that
#:   calls ``cuInit``: the extension is disabled, and any other such question is answered through NVML,
#:   which does not initialise CUDA.
RUNNER_ENV = {"OPENBLAS_NUM_THREADS": "1", "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in the calling thread meanwhile: a process started inside inherits the mask, so a Ctrl-C
    stays pending in it (no ``KeyboardInterrupt`` traceback while it imports) until it ignores SIGINT
    (:func:`ignore_sigint`). A Ctrl-C meanwhile reaches this process when the block ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_sigint() -> None:
    """Ignore SIGINT from now on (a pending one is discarded) and unblock it: what a worker does first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _init_worker(env: dict[str, str], cpus: tuple[int, ...] | None) -> None:
    # Workers share the terminal's process group: a Ctrl-C reaches them too. Only the parent may react
    # (it stops the search and ends the workers); a worker killed by the interrupt would otherwise
    # report a false failure (a "crash") that could be written to the records.
    ignore_sigint()
    os.environ.update(env)
    if cpus:
        os.sched_setaffinity(0, cpus)


def short_error(exc: BaseException, limit: int = 600) -> str:
    """The useful end of a (long, TVM) error message."""
    text = str(exc).replace("\x00", "").strip() or type(exc).__name__  # nvcc's output holds NULs
    lines = [line for line in text.splitlines() if line.strip()]
    tail = lines[-1] if lines else text
    for line in reversed(lines):  # TVM puts the reason on an "...Error: ..." line
        if "Error" in line or "error" in line:
            tail = line.strip()
            break
    return tail[:limit]


@functools.cache
def _popen_worker_class() -> type:
    """TVM's ``PopenWorker``, its process started with SIGINT blocked (:func:`sigint_blocked`), and a start
    interrupted half-way undone (the process ended), so that the worker can still be closed."""
    from tvm.support.popen_pool import PopenWorker

    class QuietPopenWorker(PopenWorker):
        def _start(self) -> None:  # PopenWorker.send calls it only while no process runs
            with sigint_blocked():
                try:
                    super()._start()
                except BaseException:
                    self._abandon_start()
                    raise

        def _abandon_start(self) -> None:
            # A Ctrl-C that another thread of this process received is raised in this (main) thread even
            # with SIGINT blocked here, possibly between the process's start and its pipes' creation, where
            # PopenWorker.kill() would fail on a pipe it never had: end the process here and leave the
            # worker as if never started (the next call starts a new one).
            proc, self._proc = self._proc, None
            self._remaining_uses = None
            for pipe in (getattr(self, "_reader", None), getattr(self, "_writer", None)):
                if pipe is not None:
                    pipe.close()
            if proc is not None:
                proc.kill()
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5.0)

    return QuietPopenWorker


class IsolatedWorker:
    """A TVM ``PopenWorker`` subprocess called with a parent-side timeout.

    On a timeout the subprocess is killed (and started again by the next call): :meth:`call` raises
    ``TimeoutError``. A subprocess that dies (a crashing kernel) raises ``ChildProcessError``. The
    subprocess ignores SIGINT; a Ctrl-C in the parent during :meth:`call` kills it and propagates. With
    ``capture_stderr`` what the subprocess writes on stderr goes to a file instead of the terminal, read
    by :meth:`take_stderr`.
    """

    def __init__(
        self, env: dict[str, str] | None = None, maximum_uses: int | None = None, cpus: tuple[int, ...] | None = None,
        capture_stderr: bool = False,
    ) -> None:
        # one file for every process this worker starts; read and emptied between calls only, when the
        # process writes nothing (the file's offset is shared with it)
        self._stderr = tempfile.TemporaryFile() if capture_stderr else None
        if self._stderr is not None:  # a worker left to the garbage collector closes its file quietly too
            weakref.finalize(self, self._stderr.close)
        self._worker = _popen_worker_class()(
            initializer=_init_worker, initargs=(dict(env or {}), cpus), maximum_uses=maximum_uses, stderr=self._stderr
        )

    def take_stderr(self, limit: int = 4000) -> str:
        """The end (``limit`` characters) of what the subprocess wrote on stderr since the last call of this,
        which empties the file ("" without ``capture_stderr``). Call it between calls only."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        said = self._stderr.read()
        self._stderr.seek(0)
        self._stderr.truncate()
        return said[-limit:].decode("utf-8", errors="replace")

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
        if self._stderr is not None:
            self._stderr.close()


class _Zygote:
    """A process that has imported TVM and the runner's functions once, and forks runner processes on request.

    Importing TVM takes seconds (it imports torch); a runner killed at a censor bound is replaced by a
    fork of this process instead. The zygote runs no kernels and starts no threads; it reaps its
    children. One per parent process (see :func:`_zygote`); it exits when its control socket closes (the
    parent ended).
    """

    def __init__(self) -> None:
        import socket
        import subprocess
        import sys

        # message boundaries kept: one request, one answer (a pid), never split or merged
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # the folder holding the schedule_gym package (this file is schedule_gym/backends/tvm/workers.py)
        package_root = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))
        env = {**os.environ, **RUNNER_ENV}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        with sigint_blocked():  # a Ctrl-C while it imports stays pending until _zygote_main ignores it
            self._proc = subprocess.Popen(
                [sys.executable, "-c", f"from {__name__} import _zygote_main; _zygote_main()", str(theirs.fileno())],
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


_ZYGOTE: _Zygote | None = None
_ZYGOTE_PID = -1
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote:
    """This process's zygote, started on first use (and again if it died or this process is a fork)."""
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive() or _ZYGOTE_PID != os.getpid():
            _set_zygote(_Zygote())
        return _ZYGOTE  # type: ignore[return-value]


def start_zygote() -> None:
    """Start this process's zygote now if it is not running (it imports TVM while the caller goes on)."""
    _zygote()


def restart_zygote() -> None:
    """Replace this process's zygote by a new one (which reads :data:`RUNNER_ENV` as it is now); runners
    forked from the old one keep running."""
    with _ZYGOTE_LOCK:
        _set_zygote(_Zygote())


def zygote_pid() -> int | None:
    """The pid of this process's zygote while it runs, else None: a helper kept for the life of the process
    (closed at its exit), which a check for leaked child processes must not count."""
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or _ZYGOTE_PID != os.getpid() or not _ZYGOTE.alive():
            return None
        return _ZYGOTE._proc.pid


def _set_zygote(zygote: _Zygote) -> None:
    global _ZYGOTE, _ZYGOTE_PID
    _ZYGOTE, _ZYGOTE_PID = zygote, os.getpid()
    weakref.finalize(zygote, zygote.close)  # at interpreter exit at the latest


def _zygote_main() -> None:  # pragma: no cover - runs in the zygote process
    import pickle
    import socket
    import sys

    ignore_sigint()  # before the imports: they take seconds, and a Ctrl-C meanwhile is the parent's
    import numpy  # noqa: F401 - preloaded for the runners
    import tvm  # noqa: F401

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
