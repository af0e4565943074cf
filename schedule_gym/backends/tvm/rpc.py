"""Measuring on remote devices through a TVM RPC tracker, several devices at once.

Builds happen here, as in :class:`~schedule_gym.backends.tvm.backend.TVMBackend`; the artifacts are then
spread over ``devices`` RPC sessions requested from the tracker under ``key``, one thread per session.
Each session uploads a kernel, runs it once on seeded inputs and checks the answer against NumPy, and
times it with the remote ``time_evaluator`` under the same
:class:`~schedule_gym.backends.tvm.protocol.MeasureProtocol`.

Censoring (``MeasureProtocol.censor_ratio``) follows the same rule as the local backend, with the bound
from the best exact latency measured on the devices, but a remote kernel cannot be stopped without
losing its server: a first run past the bound runs to its end and is then reported censored, neither
checked nor timed. The local pre-check is never censored. ``warmup_s`` warms the local runner only.

Robustness. A kernel that crashes an RPC server leaves that server unable to serve, so by default every
new kernel first runs once in the local isolated runner (``precheck=True``, for targets this machine can
run): a crash, hang or wrong answer is caught here and never reaches a device.
A session that fails anyway (a server that died, or one that stopped answering: see deadlines) is
dropped, its config goes back to the queue for the other sessions, and a replacement session is
requested from the tracker; a config is given up on only when no session is left. A dropped session's
late answer is discarded, so every config is reported exactly once. Every remote object a session makes is
let go of with the GIL released (:class:`~schedule_gym.backends.tvm.rpc_device.RPCDevice`): a server that stops
answering blocks its own device thread, never the thread that enforces the deadlines.

Deadlines. Every call that crosses a socket has one (TVM's own tracker and session calls have none):

- the tracker handshake and every tracker query: ``connect_timeout_s`` (socket timeout); an address
  where something other than a tracker listens (an HTTP server, a listener that never answers) is a
  ``ConnectionError`` within ``connect_timeout_s`` of the backend being made;
- a session request (tracker match plus the server handshake, in TVM's C++ client): ``connect_timeout_s``;
- one remote run (upload, first run and check, timing): :meth:`RPCBackend.run_deadline_s`, the
  protocol's ``run_timeout_s`` plus ``connect_timeout_s`` plus the bytes sent at ``upload_bytes_per_s``.
  Past it the session is dropped as above.

Start a tracker and servers bound to loopback (TVM's defaults bind every interface):

    python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190
    python -m tvm.exec.rpc_server --host 127.0.0.1 --tracker 127.0.0.1:9190 --key schedule-gym
"""

from __future__ import annotations

import gc
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from schedule_gym.backends.base import MeasureResult, ResultCallback, valid_configs
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.backends.tvm.builder import Built
from schedule_gym.backends.tvm.export import KernelTarget
from schedule_gym.backends.tvm.rpc_device import RPCDevice
from schedule_gym.backends.tvm.runner import check_and_time, device_inputs, host_inputs, laid_out_args, upload_bytes
from schedule_gym.backends.tvm.workers import short_error
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["RPCBackend"]


def _tracker_session(host: str, port: int, timeout_s: float) -> Any:
    """TVM's ``TrackerSession`` on a socket with a timeout (TVM's has none, and retries a refused port
    for 60 s): a listener that is not a tracker fails the handshake within ``timeout_s``."""
    from tvm.rpc import base
    from tvm.rpc.client import TrackerSession

    class TimedTrackerSession(TrackerSession):
        def _connect(self) -> None:
            sock = socket.create_connection(self._addr, timeout=timeout_s)
            sock.settimeout(timeout_s)  # every later summary/request on this socket too
            try:
                sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
                answer = b""
                while len(answer) < 4:
                    chunk = sock.recv(4 - len(answer))
                    if not chunk:
                        break
                    answer += chunk
            except socket.timeout:
                sock.close()
                raise _NotATracker(f"no tracker handshake within {timeout_s:g} s") from None
            except BaseException:
                sock.close()
                raise
            if len(answer) < 4 or struct.unpack("<i", answer)[0] != base.RPC_TRACKER_MAGIC:
                sock.close()
                raise _NotATracker(f"it answered the tracker handshake with {answer!r}")
            self._sock = sock

    return TimedTrackerSession((host, port))


class _NotATracker(Exception):
    """Something listens at the tracker address but does not speak the tracker protocol."""


def _call_with_deadline(fn: Callable[[], Any], deadline_s: float) -> Any:
    """``fn()`` in a daemon thread; ``TimeoutError`` if it has not returned within ``deadline_s``.

    For TVM calls that block in C++ (a session handshake) where no socket timeout can be set: the
    thread is left behind and whatever it returns later is dropped.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {deadline_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class RPCBackend(TVMBackend):
    """Latencies of TVM kernels measured on RPC devices registered with a tracker.

    Args:
        tracker: ``"host:port"`` of the tracker (default ``127.0.0.1:9190``).
        key: the device key the servers registered with.
        devices: how many sessions to measure on concurrently.
        precheck: run each new kernel once locally first (crash/hang/correctness guard).
        session_timeout_s: the tracker's limit on one session's life (0: none).
        connect_timeout_s: the deadline of the tracker handshake, of each tracker query and session
            request, and how long to wait for free devices.
        upload_bytes_per_s: the slowest link speed assumed when a run's deadline is set
            (:meth:`run_deadline_s`).
        **options: as for :class:`TVMBackend` (target, template, num_threads, protocol, ...).
    """

    name = "rpc"

    def __init__(
        self,
        tracker: str = "127.0.0.1:9190",
        key: str = "schedule-gym",
        devices: int = 1,
        precheck: bool = True,
        session_timeout_s: float = 0.0,
        connect_timeout_s: float = 10.0,
        upload_bytes_per_s: float = 1e6,
        **options: Any,
    ) -> None:
        if not isinstance(tracker, str) or tracker.count(":") != 1 or not tracker.rsplit(":", 1)[1].isdigit():
            raise ValueError(f"tracker must be 'host:port', got {tracker!r}")
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise ValueError(f"devices must be a positive integer, got {devices!r}")
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        for name, value in (("connect_timeout_s", connect_timeout_s), ("upload_bytes_per_s", upload_bytes_per_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        super().__init__(**options)
        host, port = tracker.rsplit(":", 1)
        self.tracker_host, self.tracker_port = host, int(port)
        self.key = key
        self.n_devices = devices
        self.precheck = precheck and self.target_kind == "llvm"
        self.session_timeout_s = session_timeout_s
        self.connect_timeout_s = float(connect_timeout_s)
        self.upload_bytes_per_s = float(upload_bytes_per_s)
        self._devices: list[RPCDevice] = []
        self._lock = threading.Lock()
        self._tracker_lock = threading.Lock()  # TVM's TrackerSession is one socket: one caller at a time
        self._requested = 0
        try:
            self._tracker = self._connect_tracker()
        except BaseException:
            super().close()
            raise

    def _connect_tracker(self) -> Any:
        """A tracker session, or ``ConnectionError`` within ``connect_timeout_s`` (plus one retry period)."""
        where = f"{self.tracker_host}:{self.tracker_port}"
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            left = max(0.05, deadline - time.monotonic())
            try:
                tracker = _tracker_session(self.tracker_host, self.tracker_port, left)
                try:
                    tracker.summary()
                except socket.timeout:
                    tracker.close()
                    raise _NotATracker(f"it accepted the handshake but sent no summary within {left:g} s") from None
                return tracker
            except _NotATracker as exc:  # a definite answer: no retry
                raise ConnectionError(
                    f"the listener at {where} is not an RPC tracker: {exc} (connect_timeout_s={self.connect_timeout_s:g})"
                ) from None
            except Exception as exc:  # noqa: BLE001 - refused or unreachable: retry until the deadline
                if time.monotonic() + 0.2 > deadline:
                    raise ConnectionError(
                        f"no RPC tracker answers at {where} ({short_error(exc)}) within {self.connect_timeout_s:g} s; "
                        f"start one with: python -m tvm.exec.rpc_tracker --host {self.tracker_host} --port {self.tracker_port}"
                    ) from None
                time.sleep(0.2)

    def _request(self) -> RPCDevice | None:
        """A new session from the tracker, or None if no device of ``key`` frees up in time.

        Each tracker query has the socket deadline, each session request (tracker match and server
        handshake) ``connect_timeout_s``; the whole wait is bounded by ``connect_timeout_s`` plus one
        request.
        """
        deadline = time.monotonic() + self.connect_timeout_s
        while time.monotonic() < deadline:
            with self._tracker_lock:
                try:
                    if self._tracker is None:
                        return None  # closed
                    if self._free_devices() > 0:
                        tracker = self._tracker
                        session = _call_with_deadline(
                            lambda: tracker.request(
                                self.key, priority=1, session_timeout=self.session_timeout_s, max_retry=1
                            ),
                            self.connect_timeout_s,
                        )
                        self._requested += 1
                        return RPCDevice(session, f"{self.key}#{self._requested}")
                except Exception:  # noqa: BLE001 - the tracker or a server went away or hung: try again
                    # the old tracker socket may be mid-answer: never reuse it
                    old, self._tracker = self._tracker, None
                    if old is not None:
                        old.close()
                    try:
                        self._tracker = self._connect_tracker()
                    except ConnectionError:
                        return None
            time.sleep(0.2)
        return None

    def _free_devices(self) -> int:
        summary = self._tracker.summary()
        info = summary.get("queue_info", {}).get(self.key, {})
        return int(info.get("free", 0))

    @property
    def kernel_target(self) -> KernelTarget:
        """As :class:`TVMBackend`'s, run on the RPC devices (``remote``)."""
        return replace(super().kernel_target, remote=True)

    def record_context(self, task: Task) -> tuple[str, str]:
        return (f"rpc:{self.key}:{self.target_key}", self.template_of(task).version)

    def run_deadline_s(self, task: Task, path: str, with_inputs: bool) -> float:
        """How long one remote run may take before its session is dropped: the protocol's
        ``run_timeout_s``, plus ``connect_timeout_s`` for the round trips, plus the kernel (and, on a
        session's first run of ``task``, its inputs) sent at ``upload_bytes_per_s``."""
        sent = os.path.getsize(path)
        if with_inputs:
            sent += upload_bytes(task)
        return self.protocol.run_timeout_s + self.connect_timeout_s + sent / self.upload_bytes_per_s

    def _devices_for(self, wanted: int) -> list[RPCDevice]:
        while len(self._devices) < wanted:
            device = self._request()
            if device is None:
                break
            self._devices.append(device)
        if not self._devices:
            raise ConnectionError(
                f"no free RPC device with key {self.key!r} at tracker {self.tracker_host}:{self.tracker_port} "
                f"within {self.connect_timeout_s:g} s"
            )
        return list(self._devices)

    # ------------------------------------------------------------------------------ remote run
    def _remote_run(self, device: RPCDevice, task: Task, path: str, config: Config) -> dict:
        """Upload, check and time one kernel on ``device``. On an exception the remote objects of the run are
        left held by ``device`` (the traceback still references them), to be let go of with it."""
        session = device.session
        dev = session.cpu(0) if self.device == "cpu" else session.cuda(0)
        if task.key not in device.inputs:
            device.forget_inputs()
            device.keep_inputs(task.key, device_inputs(task, dev, host_inputs(task)))
        layout = self.template_of(task).input_layout(task, config)
        key = (task.key, layout) if layout else task.key
        if key not in device.inputs:  # the inputs a kernel takes laid out otherwise: sent once per layout and task
            args, expected, tol = device.inputs[task.key]
            device.keep_inputs(key, (laid_out_args(args, host_inputs(task)[0], layout, dev), expected, tol))
        args, expected, tol = device.inputs[key]
        name = os.path.basename(path)
        with open(path, "rb") as f:
            device.upload(bytearray(f.read()), name)
        outcome = check_and_time(
            device.run_refs.hold(session.load_module(name)), dev, args, (expected, tol), task, self.protocol.to_dict(),
            self._best_s.get(task.key), reference_s=self._reference_s.get(task.key), hold=device.run_refs.hold,
        )
        try:
            device.remove(name)
        except Exception:  # noqa: BLE001 - a leftover file on the device is harmless
            pass
        device.end_run()  # the run's module, kernel and timer were check_and_time's: gone with its frame
        return outcome

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        configs = valid_configs(task, configs)
        results: list[MeasureResult | None] = [None] * len(configs)
        # Results found on the device threads are handed to this (the calling) thread through a queue,
        # which reports them: ``on_result`` always runs on the caller's thread (LatencyBackend.measure).
        done: queue.SimpleQueue[tuple[int, MeasureResult]] = queue.SimpleQueue()

        def finish(position: int, result: MeasureResult) -> None:
            done.put((position, result))

        def report() -> None:
            while True:
                try:
                    position, result = done.get_nowait()
                except queue.Empty:
                    return
                results[position] = result
                if on_result is not None:
                    on_result(position, result)

        pending: queue.Queue[tuple[int, Built]] = queue.Queue()
        for position, built in enumerate(self.build(task, configs)):
            report()
            if built.path is None:
                finish(position, built.failure())
                continue
            if self.precheck:
                checked = self._precheck(task, built)
                if checked is not None:
                    finish(position, checked)
                    continue
            pending.put((position, built))
        report()
        if pending.empty():
            return results  # type: ignore[return-value]

        devices = self._devices_for(min(self.n_devices, pending.qsize()))
        remaining = [pending.qsize()]
        replacing = [0]  # replacement requests in flight

        def drop(device: RPCDevice) -> None:
            """Drop ``device`` (lock held): its run goes back to the queue, a replacement is requested."""
            device.dropped = True
            if device.current is not None:
                pending.put(device.current[:2])
                device.current = None
            if device in self._devices:
                self._devices.remove(device)
            replacing[0] += 1
            threading.Thread(target=replace_device, daemon=True).start()

        def replace_device() -> None:
            replacement = self._request()
            with self._lock:
                replacing[0] -= 1
                if replacement is None or self._closed:
                    return
                self._devices.append(replacement)
            serve(replacement)

        def serve(device: RPCDevice) -> None:
            while True:
                with self._lock:
                    if remaining[0] == 0 or device.dropped:
                        return
                try:
                    position, built = pending.get(timeout=0.05)
                except queue.Empty:
                    continue
                t0 = time.perf_counter()
                deadline_s = self.run_deadline_s(task, built.path, task.key not in device.inputs)  # type: ignore[arg-type]
                with self._lock:
                    if device.dropped:  # dropped while waiting: the config is not ours
                        pending.put((position, built))
                        return
                    device.current = (position, built, time.monotonic() + deadline_s)
                try:
                    outcome = self._remote_run(device, task, built.path, built.config)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - the device failed: hand the config to another one
                    outcome = None
                with self._lock:
                    if outcome is None and not device.dropped:
                        drop(device)
                    dropped = device.dropped  # failed, or past its deadline: the config went to another device
                    if not dropped:
                        device.current = None
                if dropped:  # let go of it outside the lock: a server slow to answer holds up this thread alone
                    if outcome is None:
                        gc.collect()  # the traceback's frames (the run's objects) gone, cycles included
                    device.release()
                    return
                finish(position, self._result(task, built, outcome, None, time.perf_counter() - t0))
                built.discard()
                with self._lock:
                    remaining[0] -= 1

        threads = [threading.Thread(target=serve, args=(d,), daemon=True) for d in devices]
        for t in threads:
            t.start()
        while True:
            report()
            with self._lock:
                now = time.monotonic()
                for device in list(self._devices):
                    if device.current is not None and now > device.current[2]:
                        drop(device)  # stopped answering: its thread is left blocked, its answer dropped
                finished = remaining[0] == 0
                alive = bool(self._devices) or replacing[0] > 0
            if finished:
                break
            if not alive:  # every device failed and no replacement came: give the rest up
                while not pending.empty():
                    position, built = pending.get()
                    finish(position, built.failure("no RPC device left to run on", "run"))
                    built.discard()
                    with self._lock:
                        remaining[0] -= 1
                break
            time.sleep(0.02)
        report()
        return results  # type: ignore[return-value]

    def _precheck(self, task: Task, built: Built) -> MeasureResult | None:
        """Run the kernel once in the local isolated runner; a failure result, or None if it is sound."""
        local_path = built.path + ".local.so"  # type: ignore[operator]
        os.link(built.path, local_path)  # the runner deletes what it ran; keep the original
        # stop right after the check; never censored: the guard must check every kernel, and the bound
        # (the device's best) says nothing about this machine's speed
        one_checked_run = replace(self.protocol, coarse_above_s=1e-12, censor_ratio=None)
        result = self.run_one(task, Built(built.config, local_path, built.build_s), one_checked_run)
        return None if result.ok else result

    def close(self) -> None:
        with self._lock:
            devices, self._devices = self._devices, []
            for device in devices:
                device.dropped = True
        # each session let go of on a thread of its own: a server that stopped answering holds up close()
        # for connect_timeout_s at most, and then only its own thread
        releasing = [threading.Thread(target=device.release, daemon=True) for device in devices]
        for thread in releasing:
            thread.start()
        deadline = time.monotonic() + self.connect_timeout_s
        for thread in releasing:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._tracker_lock:
            if getattr(self, "_tracker", None) is not None:
                self._tracker.close()
                self._tracker = None
        super().close()

