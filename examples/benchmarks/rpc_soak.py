"""Soak test of the RPC backend: tune through two loopback RPC servers while a chaos loop stops,
resumes and kills them at random, then check that nothing was lost or measured twice.

Run (it uses both cores for builds; do not run it next to timing work):

    nice -n 19 python examples/benchmarks/rpc_soak.py --configs 48 --seed 0

Checks, after the run: every config reported exactly once; the record file parses and holds each
config exactly once; no child process left but the runners' zygote (kept for the process's life); no build
directory of this process left.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from schedule_gym import TileSpace
from schedule_gym.backends import make_backend
from schedule_gym.backends.tvm.workers import zygote_pid
from schedule_gym.records import RecordStore
from schedule_gym.tasks import get_task

KEY = "schedule-gym-soak"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tracker_port: int):
    from tvm.rpc.server import Server

    return Server(host="127.0.0.1", port=free_port(), port_end=65000, key=KEY,
                  tracker_addr=("127.0.0.1", tracker_port), silent=True)


def signal_tree(server, sig: int) -> None:
    try:
        root = psutil.Process(server.proc._proc.pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, AttributeError):
        return
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


class Chaos(threading.Thread):
    """Every 1-3 s: stop a server for 1-6 s, or kill one and start a replacement."""

    def __init__(self, servers: list, tracker_port: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.servers, self.tracker_port = servers, tracker_port
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.stopped: set[int] = set()
        self.counts = {"stop": 0, "kill": 0}

    def run(self) -> None:
        while not self.done.wait(self.rng.uniform(1.0, 3.0)):
            with self.lock:
                i = self.rng.randrange(len(self.servers))
                if i in self.stopped:
                    continue
                if self.rng.random() < 0.6:
                    signal_tree(self.servers[i], signal.SIGSTOP)
                    self.stopped.add(i)
                    self.counts["stop"] += 1
                    threading.Timer(self.rng.uniform(1.0, 6.0), self.resume, args=(i,)).start()
                else:
                    self.servers[i].terminate()
                    self.servers[i] = start_server(self.tracker_port)
                    self.counts["kill"] += 1

    def resume(self, i: int) -> None:
        with self.lock:
            signal_tree(self.servers[i], signal.SIGCONT)
            self.stopped.discard(i)

    def stop(self) -> None:
        self.done.set()
        with self.lock:
            for i in list(self.stopped):
                signal_tree(self.servers[i], signal.SIGCONT)
            self.stopped.clear()


def main() -> int:
    from tvm.rpc.tracker import Tracker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="gemm-128x64x96")
    parser.add_argument("--configs", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    task = get_task(args.task)
    space = TileSpace(task)
    picks = np.random.default_rng(args.seed).choice(space.size, min(args.configs, space.size), replace=False)
    configs = [space.config(int(i)) for i in picks]
    records = Path(tempfile.mkdtemp(prefix="rpc-soak-")) / "soak.jsonl"

    tracker = Tracker(host="127.0.0.1", port=free_port(), port_end=65000, silent=True)
    servers = [start_server(tracker.port) for _ in range(2)]
    time.sleep(5.0)  # servers import TVM before they register
    backend = make_backend("rpc", records=str(records), tracker=f"127.0.0.1:{tracker.port}", key=KEY, devices=2,
                           connect_timeout_s=3.0, protocol={"min_repeat_ms": 5, "run_timeout_s": 3.0})
    chaos = Chaos(servers, tracker.port, args.seed)
    reported: dict[tuple, int] = {}
    failed: dict[str, int] = {}
    t0 = time.monotonic()
    chaos.start()
    try:
        for start in range(0, len(configs), args.batch):
            batch = configs[start:start + args.batch]

            def count(position, result, batch=batch):
                reported[batch[position]] = reported.get(batch[position], 0) + 1
                if not result.ok:
                    failed[result.error[:60]] = failed.get(result.error[:60], 0) + 1

            backend.measure(task, batch, on_result=count)
            print(f"{start + len(batch)}/{len(configs)} configs after {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        chaos.stop()
        wall_s = time.monotonic() - t0
        backend.close()
        for server in chaos.servers:
            server.terminate()
        tracker.terminate()

    lines = records.read_text().splitlines()
    store = RecordStore(records)
    recorded = [r.result.config for r in store]
    time.sleep(1.0)
    zygote = zygote_pid()  # the runners' parent lives as long as this process: not a leak
    leaked = [p for p in psutil.Process().children(recursive=True)
              if p.is_running() and p.status() != "zombie" and p.pid != zygote]
    build_dirs = [d for d in os.listdir(tempfile.gettempdir()) if d.startswith(f"schedule-gym-{os.getpid()}-")]
    checks = {
        "every config reported exactly once": sorted(reported) == sorted(configs) and set(reported.values()) == {1},
        "records parse, each config once": len(lines) == len(configs) and sorted(recorded) == sorted(configs),
        "no leaked processes": not leaked,
        "no leaked build directories": not build_dirs,
    }
    print(f"task {task.name}, {len(configs)} configs in {wall_s:.0f} s; chaos: {chaos.counts['stop']} stops, "
          f"{chaos.counts['kill']} kills; failed results: {sum(failed.values())} {failed or ''}")
    for what, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if leaked:
        print("  leaked:", [(p.pid, p.name()) for p in leaked])
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
