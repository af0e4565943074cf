"""Measuring on remote devices through a TVM RPC tracker, several devices at once.

Builds happen here, as in :class:`~schedule_gym.backends.tvm_backend.TVMBackend`; the artifacts are then
spread over ``devices`` RPC sessions requested from the tracker under ``key``, one thread per session.
Each session uploads a kernel, runs it once on seeded inputs and checks the answer against NumPy, and
times it with the remote ``time_evaluator`` under the same :class:`MeasureProtocol`.

Robustness. A kernel that crashes an RPC server leaves that server unable to serve (shared/TVM_NOTES.md),
so by default every new kernel first runs once in the local isolated runner (``precheck=True``, for
targets this machine can run): a crash, hang or wrong answer is caught here and never reaches a device.
A session that fails anyway (a server that died or stopped answering) is dropped, its config goes back
to the queue for the other sessions, and a replacement session is requested from the tracker; a config
is given up on only when no session is left.

Start a tracker and servers bound to loopback (TVM's defaults bind every interface):

    python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190
    python -m tvm.exec.rpc_server --host 127.0.0.1 --tracker 127.0.0.1:9190 --key schedule-gym
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from schedule_gym.backends.base import MeasureResult, ResultCallback
from schedule_gym.backends.tvm_backend import Built, TVMBackend, _short, check_and_time, device_inputs
from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

__all__ = ["RPCBackend"]


class _Device:
    """One RPC session and the task inputs already uploaded to it."""

    def __init__(self, session: Any, name: str) -> None:
        self.session = session
        self.name = name
        self.inputs: dict[str, Any] = {}


class RPCBackend(TVMBackend):
    """Latencies of TVM kernels measured on RPC devices registered with a tracker.

    Args:
        tracker: ``"host:port"`` of the tracker (default ``127.0.0.1:9190``).
        key: the device key the servers registered with.
        devices: how many sessions to measure on concurrently.
        precheck: run each new kernel once locally first (crash/hang/correctness guard).
        session_timeout_s: the tracker's limit on one session's life (0: none).
        connect_timeout_s: how long to wait for the tracker and for free devices.
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
        **options: Any,
    ) -> None:
        if not isinstance(tracker, str) or tracker.count(":") != 1 or not tracker.rsplit(":", 1)[1].isdigit():
            raise ValueError(f"tracker must be 'host:port', got {tracker!r}")
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise ValueError(f"devices must be a positive integer, got {devices!r}")
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        super().__init__(**options)
        host, port = tracker.rsplit(":", 1)
        self.tracker_host, self.tracker_port = host, int(port)
        self.key = key
        self.n_devices = devices
        self.precheck = precheck and self.target_kind == "llvm"
        self.session_timeout_s = session_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._devices: list[_Device] = []
        self._lock = threading.Lock()
        self._tracker = self._connect_tracker()

    def _connect_tracker(self) -> Any:
        from tvm import rpc

        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                # probe first: TVM's own connect retries a refused port for 60 s, leaking sockets
                with socket.create_connection((self.tracker_host, self.tracker_port), timeout=self.connect_timeout_s):
                    pass
                tracker = rpc.connect_tracker(self.tracker_host, self.tracker_port)
                tracker.summary()
                return tracker
            except Exception as exc:  # noqa: BLE001 - becomes a precise error below
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"no RPC tracker answers at {self.tracker_host}:{self.tracker_port} "
                        f"({_short(exc)}); start one with: python -m tvm.exec.rpc_tracker "
                        f"--host {self.tracker_host} --port {self.tracker_port}"
                    ) from None
                time.sleep(0.2)

    def _request(self) -> _Device | None:
        """A new session from the tracker, or None if no device of ``key`` frees up in time."""
        deadline = time.monotonic() + self.connect_timeout_s
        while time.monotonic() < deadline:
            try:
                free = self._free_devices()
                if free > 0:
                    session = self._tracker.request(self.key, priority=1, session_timeout=self.session_timeout_s, max_retry=1)
                    return _Device(session, f"{self.key}#{len(self._devices)}")
            except Exception:  # noqa: BLE001 - the tracker or a server went away: try again
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

    def record_context(self, task: Task) -> tuple[str, str]:
        return (f"rpc:{self.key}:{self.target_key}", self.template_of(task).version)

    def _devices_for(self, wanted: int) -> list[_Device]:
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
    def _remote_run(self, device: _Device, task: Task, path: str) -> dict:
        session = device.session
        dev = session.cpu(0) if self.device == "cpu" else session.cuda(0)
        if task.key not in device.inputs:
            device.inputs = {task.key: device_inputs(task, dev)}
        args, expected, tol = device.inputs[task.key]
        name = os.path.basename(path)
        with open(path, "rb") as f:  # upload bytes: TVM's upload(path) leaves the file open
            session.upload(bytearray(f.read()), target=name)
        outcome = check_and_time(
            session.load_module(name), dev, args, (expected, tol), task, self.protocol.to_dict(), self._best_s.get(task.key)
        )
        try:
            session.remove(name)
        except Exception:  # noqa: BLE001 - a leftover file on the device is harmless
            pass
        return outcome

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError("this RPCBackend is closed")
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

        def serve(device: _Device) -> None:
            while True:
                with self._lock:
                    if remaining[0] == 0:
                        return
                try:
                    position, built = pending.get(timeout=0.05)
                except queue.Empty:
                    continue
                t0 = time.perf_counter()
                try:
                    outcome = self._remote_run(device, task, built.path)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - the device failed: hand the config to another one
                    pending.put((position, built))
                    replacement = self._request()
                    with self._lock:
                        if device in self._devices:
                            self._devices.remove(device)
                        if replacement is not None:
                            self._devices.append(replacement)
                    if replacement is not None:
                        threading.Thread(target=serve, args=(replacement,), daemon=True).start()
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
                finished = remaining[0] == 0
                alive = bool(self._devices)
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
        one_checked_run = replace(self.protocol, coarse_above_s=1e-12)  # stop right after the check
        result = self.run_one(task, Built(built.config, local_path, built.build_s), one_checked_run)
        return None if result.ok else result

    def close(self) -> None:
        self._devices.clear()
        if getattr(self, "_tracker", None) is not None:
            self._tracker.close()
            self._tracker = None
        super().close()

