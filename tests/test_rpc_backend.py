"""RPC: a tracker and two servers on loopback; tuning survives a server killed mid-run."""

import socket
import time

import numpy as np
import pytest

from schedule_gym import TileSpace, TilingEnv, gemm
from schedule_gym.records import RecordStore

pytestmark = pytest.mark.tvm
pytest.importorskip("tvm")

from tvm import rpc  # noqa: E402
from tvm.rpc.server import Server  # noqa: E402
from tvm.rpc.tracker import Tracker  # noqa: E402

from schedule_gym.backends import make_backend  # noqa: E402
from schedule_gym.backends.tvm.rpc import RPCBackend  # noqa: E402

TASK = gemm(128, 64, 96)
KEY = "schedule-gym-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster():
    # fresh ports for every cluster: a tracker that meets servers on ports its predecessor's servers just
    # left can count them as busy
    tracker = Tracker(host="127.0.0.1", port=free_port(), port_end=65000, silent=True)
    servers = [
        Server(host="127.0.0.1", port=free_port(), port_end=65000, key=KEY, tracker_addr=("127.0.0.1", tracker.port), silent=True)
        for _ in range(2)
    ]
    # servers start in subprocesses that import TVM before they register: wait until both have
    session = rpc.connect_tracker("127.0.0.1", tracker.port)
    deadline = time.monotonic() + 60
    while session.summary().get("queue_info", {}).get(KEY, {}).get("free", 0) < 2:
        assert time.monotonic() < deadline, f"RPC servers did not register: {session.summary()}"
        time.sleep(0.2)
    session.close()
    yield tracker, servers
    for server in servers:
        server.terminate()
    tracker.terminate()


def configs(seed, n=12):
    space = TileSpace(TASK)
    return [space.config(int(i)) for i in np.random.default_rng(seed).choice(space.size, n, replace=False)]


def test_unreachable_tracker_is_a_precise_error():
    with pytest.raises(ConnectionError, match=r"no RPC tracker answers at 127.0.0.1:1 .*rpc_tracker --host 127.0.0.1 --port 1"):
        RPCBackend(tracker="127.0.0.1:1", connect_timeout_s=0.5)
    with pytest.raises(ValueError, match="tracker must be 'host:port', got 'localhost'"):
        RPCBackend(tracker="localhost")


def test_tuning_completes_on_the_other_server_when_one_dies(cluster, tmp_path):
    tracker, servers = cluster
    path = tmp_path / "rpc.jsonl"
    backend = make_backend(
        "rpc", records=str(path), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, protocol={"min_repeat_ms": 5}
    )
    seen = []

    def kill_one(position, result):
        seen.append(position)
        if len(seen) == 3:
            servers[0].terminate()

    batch = configs(0)
    results = backend.measure(TASK, batch, on_result=kill_one)
    assert all(r.ok for r in results), [r.error for r in results]
    assert sorted(seen) == list(range(len(batch)))
    more = backend.measure(TASK, configs(1))  # the surviving server carries on alone
    assert all(r.ok for r in more)
    store = RecordStore(path)
    assert len(store) == len({*batch, *configs(1)})
    assert all(r.target.startswith(f"rpc:{KEY}:") for r in store)
    backend.close()


def test_crashing_kernel_is_caught_before_it_reaches_a_server(cluster):
    tracker, _ = cluster
    faulty = RPCBackend(tracker=f"127.0.0.1:{tracker.port}", key=KEY, template="fault-crash")
    (result,) = faulty.measure(TASK, configs(2, 1))
    assert result.error_kind == "crash"
    faulty.close()
    healthy = RPCBackend(
        tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, protocol={"min_repeat_ms": 5}, connect_timeout_s=30
    )
    env = TilingEnv(TASK, backend=healthy)
    _, info = env.reset(seed=0)
    assert info["latency_s"] is not None
    env.close()


# ------------------------------------------------------------------------------------ deadlines
def _silent_listener():
    """A TCP listener whose connections the kernel accepts and nobody ever answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_a_silent_listener_is_not_a_tracker_within_the_deadline():
    # deadline: connect_timeout_s (1 s) plus scheduling slack
    listener = _silent_listener()
    port = listener.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"the listener at 127.0.0.1:{port} is not an RPC tracker: no tracker handshake within"):
        RPCBackend(tracker=f"127.0.0.1:{port}", connect_timeout_s=1.0)
    assert time.monotonic() - t0 < 5
    listener.close()


def test_an_http_server_is_not_a_tracker_within_the_deadline():
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"the listener at 127.0.0.1:{port} is not an RPC tracker"):
        RPCBackend(tracker=f"127.0.0.1:{port}", connect_timeout_s=1.0)
    assert time.monotonic() - t0 < 5
    httpd.shutdown()
    httpd.server_close()


def test_a_tracker_without_servers_for_the_key_is_a_precise_error():
    tracker = Tracker(host="127.0.0.1", port=free_port(), port_end=65000, silent=True)
    try:
        backend = RPCBackend(tracker=f"127.0.0.1:{tracker.port}", key="nobody-serves-this", connect_timeout_s=1.0)
        assert backend.measures_hardware and backend.needs_tvm and not backend.scores_in_bulk
        assert backend.kernel_target.remote and backend.kernel_target.target == backend.target  # exports are not checked here
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=r"no free RPC device with key 'nobody-serves-this' at tracker 127.0.0.1:\d+ within 1 s"):
            backend.measure(TASK, configs(3, 1))
        assert time.monotonic() - t0 < 60  # the build (worker start) plus connect_timeout_s
        backend.close()
    finally:
        tracker.terminate()


def _signal_server(server, sig):
    import psutil

    root = psutil.Process(server.proc._proc.pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def test_a_server_that_stops_answering_is_dropped_and_its_config_measured_elsewhere(cluster, tmp_path):
    # deadline of one run: run_timeout_s 2 + connect_timeout_s 2 + upload (~0.1 s); the batch must finish
    import signal

    tracker, servers = cluster
    path = tmp_path / "rpc.jsonl"
    backend = make_backend(
        "rpc", records=str(path), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, connect_timeout_s=2.0,
        protocol={"min_repeat_ms": 5, "run_timeout_s": 2.0},
    )
    seen = []

    def stop_one(position, result):
        seen.append(position)
        if len(seen) == 1:
            _signal_server(servers[0], signal.SIGSTOP)

    batch = configs(4)
    try:
        t0 = time.monotonic()
        results = backend.measure(TASK, batch, on_result=stop_one)
        elapsed = time.monotonic() - t0
    finally:
        _signal_server(servers[0], signal.SIGCONT)
    assert all(r.ok for r in results), [r.error for r in results]
    assert sorted(seen) == list(range(len(batch)))  # each config reported exactly once
    assert elapsed < 90, elapsed
    assert len(backend.delegate._devices) == 1  # the stopped server's session was dropped (it holds its server)
    time.sleep(0.5)  # the stopped session's late answer (if any) must not be recorded
    backend.close()
    lines = path.read_text().splitlines()
    assert len(lines) == len(batch)  # nothing measured twice, nothing lost
    assert sorted(r.result.config for r in RecordStore(path)) == sorted(batch)


def _connected_ports(servers):
    """The ports of the servers this process holds a session with (a session is a direct connection to the port its
    server registered)."""
    import psutil

    ports = {c.raddr.port for c in psutil.Process().net_connections("tcp") if c.raddr}
    return {server.port for server in servers} & ports


@pytest.fixture
def hang_is_a_failure(capfd):
    """A test that freezes this process (a thread holding the GIL in a remote call) fails within 240 s instead of
    hanging the suite: faulthandler's watchdog needs no GIL; it prints every thread's stack to the terminal's
    stderr (pytest's capture would lose it with the process) and exits."""
    import faulthandler
    import os
    import sys

    with capfd.disabled():
        terminal = os.fdopen(os.dup(sys.stderr.fileno()), "w")
    faulthandler.dump_traceback_later(240, exit=True, file=terminal)
    yield
    faulthandler.cancel_dump_traceback_later()
    terminal.close()


def test_a_server_that_stops_as_a_run_ends_does_not_freeze_the_deadline_loop(cluster, tmp_path, monkeypatch,
                                                                             hang_is_a_failure):
    """The server stops answering just as its run returns, before the run's kernel, module and timer are freed:
    freeing one asks the server, and tvm_ffi's destructor asks holding the GIL, which froze every thread, the
    deadline loop's included. The device lets go of them with the GIL released: the session is dropped at its
    deadline (run_timeout_s 2 + connect_timeout_s 2) and the config measured on the other server."""
    import signal

    from schedule_gym.backends.tvm import rpc as rpc_module

    tracker, servers = cluster
    stopped = []
    real = rpc_module.check_and_time

    def run_then_stop(module, *args, **kwargs):
        outcome = real(module, *args, **kwargs)
        if not stopped:
            (port,) = _connected_ports(servers)  # devices=1: one session
            server = next(s for s in servers if s.port == port)
            stopped.append(server)
            _signal_server(server, signal.SIGSTOP)
        return outcome  # ``module`` and the kernel and timer made from it are let go of on return

    monkeypatch.setattr(rpc_module, "check_and_time", run_then_stop)
    path = tmp_path / "rpc.jsonl"
    backend = make_backend(
        "rpc", records=str(path), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=1, connect_timeout_s=2.0,
        protocol={"min_repeat_ms": 5, "run_timeout_s": 2.0},
    )
    batch = configs(7, 3)
    try:
        t0 = time.monotonic()
        results = backend.measure(TASK, batch)
        elapsed = time.monotonic() - t0
    finally:
        for server in stopped:
            _signal_server(server, signal.SIGCONT)
    assert len(stopped) == 1
    assert all(r.ok for r in results), [r.error for r in results]
    assert elapsed < 90, elapsed
    (device,) = backend.delegate._devices  # the replacement, on the other server
    assert device.name == f"{KEY}#2"
    backend.close()
    assert sorted(r.result.config for r in RecordStore(path)) == sorted(batch)  # each config recorded once


def test_closing_with_a_server_that_stopped_answering_returns_within_connect_timeout(cluster, hang_is_a_failure):
    """close() lets go of each session on a thread of its own: one whose server stopped answering holds it up
    for connect_timeout_s (2 s) at most, and the healthy session is still closed (its server free again)."""
    import signal

    tracker, servers = cluster
    backend = RPCBackend(
        tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, connect_timeout_s=2.0, protocol={"min_repeat_ms": 5}
    )
    results = backend.measure(TASK, configs(8, 4))
    assert all(r.ok for r in results), [r.error for r in results]
    assert len(backend._devices) == 2
    _signal_server(servers[0], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        backend.close()
        elapsed = time.monotonic() - t0
    finally:
        _signal_server(servers[0], signal.SIGCONT)
    assert elapsed < 2.0 + 1.0, elapsed  # connect_timeout_s plus scheduling slack
    session = rpc.connect_tracker("127.0.0.1", tracker.port)
    deadline = time.monotonic() + 30
    while session.summary().get("queue_info", {}).get(KEY, {}).get("free", 0) < 2:  # both servers serve again
        assert time.monotonic() < deadline, session.summary()
        time.sleep(0.2)
    session.close()


# ------------------------------------------------------------------------------ death mid-upload
def _kill_tree(server):
    """SIGKILL a server: its listening process (so the tracker forgets it) and the session it serves."""
    import signal

    _signal_server(server, signal.SIGKILL)


def _kill_during_upload(backend, servers, victims):
    """Make ``victims`` of the backend's sessions (``"first"``: the first to upload; ``"all"``: every one)
    lose their server while ``RPCDevice.upload`` is in flight.

    Each session's server is found from this process's TCP connection to the server's port (a session is
    a direct connection to the port the server registered). The wrapped upload stops the server, starts
    sending 32 MiB (more than loopback socket buffers hold, so the send blocks part-way), and a timer
    kills the server 0.5 s later: the upload is cut off mid-stream. Returns the ports killed and the
    ports whose upload raised (rather than hanging until the run's deadline).
    """
    import signal
    import threading

    by_port = {s.port: s for s in servers}
    request, killed, cut, lock = backend._request, [], [], threading.Lock()

    def traced_request():
        before = _connected_ports(servers)
        device = request()
        if device is None:
            return None
        (port,) = _connected_ports(servers) - before
        upload = device.upload

        def upload_then_die(data, name):
            with lock:
                victim = victims == "all" or not killed
                if victim:
                    killed.append(port)
            if victim:
                server = by_port[port]
                _signal_server(server, signal.SIGSTOP)
                threading.Timer(0.5, _kill_tree, args=(server,)).start()
                try:
                    upload(bytearray(32 << 20), "stall.bin")
                except Exception:  # noqa: BLE001 - the upload was cut off by the server's death
                    cut.append(port)
                    raise
                raise AssertionError("an upload to a stopped server completed")  # pragma: no cover
            return upload(data, name)

        device.upload = upload_then_die
        return device

    backend._request = traced_request
    return killed, cut


def test_a_server_that_dies_mid_upload_loses_nothing_and_measures_nothing_twice(cluster, tmp_path):
    # deadline: the batch (6 builds and prechecks, ~10 s here) plus the upload cut off 0.5 s in; 90 s allowed
    tracker, servers = cluster
    path = tmp_path / "rpc.jsonl"
    backend = make_backend(
        "rpc", records=str(path), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, connect_timeout_s=2.0,
        protocol={"min_repeat_ms": 5, "run_timeout_s": 2.0},
    )
    killed, cut = _kill_during_upload(backend.delegate, servers, "first")
    seen = []
    batch = configs(5, 6)
    t0 = time.monotonic()
    results = backend.measure(TASK, batch, on_result=lambda position, result: seen.append(position))
    elapsed = time.monotonic() - t0
    assert len(killed) == 1 and cut == killed  # the upload failed when its server died
    assert all(r.ok for r in results), [r.error for r in results]
    assert sorted(seen) == list(range(len(batch)))  # each config reported exactly once
    assert elapsed < 90, elapsed
    assert len(backend.delegate._devices) == 1  # the dead server's session was dropped, no replacement exists
    backend.close()
    records = list(RecordStore(path))
    assert sorted(r.result.config for r in records) == sorted(batch)  # each config recorded exactly once
    assert all(r.result.ok for r in records)


def test_when_every_server_dies_mid_upload_the_batch_fails_precisely_within_its_deadline(cluster, tmp_path):
    # deadline: the builds, plus 0.5 s to the kill, plus connect_timeout_s (2 s) for a replacement session
    # that never comes; 90 s allowed
    tracker, servers = cluster
    path = tmp_path / "rpc.jsonl"
    backend = make_backend(
        "rpc", records=str(path), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2, connect_timeout_s=2.0,
        protocol={"min_repeat_ms": 5, "run_timeout_s": 2.0},
    )
    killed, cut = _kill_during_upload(backend.delegate, servers, "all")
    seen = []
    batch = configs(6, 4)
    t0 = time.monotonic()
    results = backend.measure(TASK, batch, on_result=lambda position, result: seen.append(position))
    elapsed = time.monotonic() - t0
    assert sorted(killed) == sorted(s.port for s in servers) and sorted(cut) == sorted(killed)
    assert sorted(seen) == list(range(len(batch)))
    assert [(r.error_kind, r.error) for r in results] == [("run", "no RPC device left to run on")] * len(batch)
    assert elapsed < 90, elapsed
    assert backend.delegate._devices == []
    backend.close()
    records = list(RecordStore(path))
    assert sorted(r.result.config for r in records) == sorted(batch)  # each config recorded exactly once


def test_a_kernel_that_takes_its_weight_packed_is_measured_on_a_server(cluster):
    """dense-cpu-v8 takes its weight packed as its micro-tile's columns: the server's copy of the weight is laid
    out for each tile the configs use (two here) and every kernel passes the check against the reference."""
    from schedule_gym.operators import packed_task
    from schedule_gym.tasks import dense

    tracker, _ = cluster
    task = packed_task(dense(12, 16, 24, bias=True, activation="relu"))
    backend = RPCBackend(tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=1, protocol={"min_repeat_ms": 1})
    try:
        assert backend.template_of(task).name == "dense-cpu-v8"
        batch = [((1, 3, 4), (2, 8), (1, 3, 8)), ((3, 1, 4), (1, 16), (2, 3, 4)), ((1, 12, 1), (4, 4), (3, 1, 8))]
        results = backend.measure(task, batch)
        assert all(r.ok for r in results), [r.error for r in results]
    finally:
        backend.close()
