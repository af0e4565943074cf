"""A disk cache of whole mock latency tables: a space scored once is loaded, not scored again.

Scoring every config of a protocol's spaces (an imitation expert, the oracle walker, a throughput benchmark
on warm tables) takes minutes: v1's training split holds 77 million configs. :func:`whole_table` keeps each
whole table of at least :data:`MIN_CONFIGS` configs in ``<cache>/mock-tables/<key>.npy``
(:func:`schedule_gym.cache.cache_dir`), the key a hash of everything the latencies depend on: the mock
model's version, every number of the profile, the task's key (shape, splits, parameters, loop order), the
space's size, and the NumPy version and CPU that computed it (NumPy's ``exp`` and ``log`` take other code
paths on other CPUs, and a cached table must equal a scored one to the bit). Smaller tables are scored every
time (a tenth of a second at most): not worth a file each.

A file is written to a temporary name and renamed, so a run that stops mid-write leaves no partial table;
one whose size is not the space's (a foreign or damaged file) is scored again and replaced. The folder may
be deleted at any time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from schedule_gym.cache import cache_dir

__all__ = ["MIN_CONFIGS", "table_key", "table_path", "whole_table"]

#: the smallest space whose table is kept on disk (65,536 configs score in about 0.1 s)
MIN_CONFIGS = 1 << 16


def table_key(model_version: str, profile_digest: str, task_key: str, size: int) -> str:
    """The cache key of a table: a hash of the model, the profile's numbers (``CPUProfile.digest``), the task, the
    size, NumPy and the CPU."""
    from schedule_gym.hardware import cpu_name

    facts = {"model": model_version, "profile": profile_digest, "task": task_key, "size": int(size),
             "numpy": np.__version__, "cpu": cpu_name()}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def table_path(key: str) -> Path:
    """The file of the table with ``key``."""
    return cache_dir() / "mock-tables" / f"{key}.npy"


def whole_table(key: str, size: int, score: Callable[[], np.ndarray]) -> np.ndarray:
    """The ``size`` latencies of the table with ``key``: from its file if there is one of that size, else
    ``score()`` (kept on disk from :data:`MIN_CONFIGS` configs up)."""
    path = table_path(key)
    if size >= MIN_CONFIGS and path.is_file():
        try:
            table = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            table = None
        if table is not None and table.shape == (size,) and table.dtype == np.float64:
            return table
    table = np.asarray(score(), dtype=np.float64)
    if table.shape != (size,):
        raise ValueError(f"the scored table has shape {table.shape}, not ({size},)")
    if size >= MIN_CONFIGS:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npy")
        np.save(partial, table, allow_pickle=False)
        os.replace(partial, path)
    return table
