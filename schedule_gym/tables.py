"""Exhaustive real-hardware tables: measure every config of a (small) task into a record file.

A table is an ordinary record file (see :mod:`schedule_gym.records`) that holds every config of a task;
served by the replay backend it gives real-hardware rewards at mock speed and the exact optimum. The
measurement resumes where it stopped: configs already in the file are skipped.

    schedule-gym table --shape 256 256 256 --splits 3 2 3 --threads 1 --out table.jsonl
"""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.backends.replay import ReplayBackend
from schedule_gym.records import RecordStore
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task

__all__ = ["TableSummary", "compress", "measure_space", "summarize"]


def measure_space(task: Task, out: str | Path, backend_options: dict[str, Any] | None = None, batch: int = 64) -> RecordStore:
    """Measure every config of ``task`` with the TVM backend into ``out`` (resumable)."""
    from schedule_gym.backends.tvm.backend import TVMBackend

    backend = ReplayBackend(out, delegate=TVMBackend(**(backend_options or {})))
    store = backend.stores[0]
    target, template = backend.record_context(task)
    space = TileSpace(task)
    todo = [i for i in range(space.size) if store.get(task, target, template, space.config(i)) is None]
    print(f"{task.describe()}: {space.size} configs, {space.size - len(todo)} already in {out}", flush=True)
    t0 = time.perf_counter()
    done = 0
    try:
        for start in range(0, len(todo), batch):
            chunk = todo[start : start + batch]
            backend.measure(task, [space.config(i) for i in chunk])
            done += len(chunk)
            rate = done / (time.perf_counter() - t0)
            print(
                f"  {space.size - len(todo) + done}/{space.size}  {rate:.1f} configs/s  "
                f"ETA {(len(todo) - done) / rate / 60:.1f} min",
                flush=True,
            )
    finally:
        backend.close()
    return RecordStore(out)


def compress(src: str | Path, dst: str | Path) -> None:
    with open(src, "rb") as f_in, gzip.open(dst, "wb", compresslevel=9) as f_out:
        shutil.copyfileobj(f_in, f_out)


class TableSummary:
    """Facts about a table: size, failures, optimum."""

    def __init__(self, store: RecordStore, task: Task) -> None:
        records = store.records_of(task)
        self.task = task
        self.count = len(records)
        self.space_size = TileSpace(task).size
        ok = [r.result for r in records if r.result.ok]
        self.failures = self.count - len(ok)
        self.coarse = sum(r.coarse for r in ok)
        best = min(ok, key=lambda r: r.latency_s)
        self.best_config = best.config
        self.best_latency_s = best.latency_s
        self.best_gflops = task.flops / best.latency_s * 1e-9
        lat = np.array([r.latency_s for r in ok])
        self.median_gflops = float(np.median(task.flops / lat * 1e-9))
        self.target = records[0].target
        self.template = records[0].template

    def __str__(self) -> str:
        return (
            f"{self.task.describe()}: {self.count}/{self.space_size} configs, {self.failures} failed, "
            f"{self.coarse} timed from one run; optimum {self.best_config} at {self.best_latency_s * 1e6:.1f} us "
            f"({self.best_gflops:.1f} GFLOP/s; median config {self.median_gflops:.1f} GFLOP/s); "
            f"target {self.target}, template {self.template}"
        )


def summarize(path: str | Path, task: Task) -> TableSummary:
    return TableSummary(RecordStore(path), task)
