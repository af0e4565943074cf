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
from schedule_gym.backends.rpc_backend import RPCBackend  # noqa: E402

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
