"""The reference latency each held-out task's regret is measured against, and its cache.

The reference is

* ``"exact"``: the mock's optimum over the whole space (:meth:`MockBackend.score_space`), for spaces of at
  most the protocol's ``exact_limit`` configs;
* ``"search"``: for larger spaces, the best of :data:`REFERENCE_SAMPLES` configs drawn uniformly (seed 0) and
  greedy descent (best neighbour, until none is better) from the best :data:`REFERENCE_STARTS` of them. It is
  a strong reference, not the optimum: an agent can beat it, giving a negative regret.

References are cached in the user cache (``<cache>/benchmark/references.json``) by mock target and task key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task

__all__ = ["REFERENCE_SAMPLES", "REFERENCE_STARTS", "cached_reference", "compute_reference", "reference_kind",
           "reference_latency", "store_reference"]

#: configs drawn for a ``"search"`` reference, and how many of the best start a greedy descent
REFERENCE_SAMPLES = 20_000
REFERENCE_STARTS = 8


def _references_path() -> Path:
    from schedule_gym.cache import cache_dir

    return cache_dir() / "benchmark" / "references.json"


def _greedy_descent(backend: MockBackend, task: Task, space: TileSpace, index: int, latency: float) -> tuple[int, float]:
    strides = space.strides
    while True:
        rows = space.rows_of_index(index)
        neighbours = []
        for x, d in enumerate(space.dims):
            for new_row in d.next_row_lists[rows[x]]:
                if new_row >= 0:
                    neighbours.append(index + (new_row - rows[x]) * strides[x])
        if not neighbours:
            return index, latency
        scores = backend.model_latency_s(task, np.array(neighbours, dtype=np.int64))
        best = int(np.argmin(scores))
        if scores[best] >= latency:
            return index, latency
        index, latency = neighbours[best], float(scores[best])


def reference_kind(task: Task, backend: MockBackend, exact_limit: int) -> str:
    """``"exact"`` for a space of at most ``exact_limit`` configs, else ``"search"``."""
    return "exact" if backend.space(task).size <= exact_limit else "search"


def _reference_key(task: Task, backend: MockBackend, kind: str) -> str:
    target = backend.record_context(task)[0]
    return f"{target}|{task.key}|{kind}" + ("" if kind == "exact" else f"|{REFERENCE_SAMPLES}x{REFERENCE_STARTS}")


def _read_references() -> dict[str, float]:
    path = _references_path()
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def cached_reference(task: Task, backend: MockBackend, exact_limit: int) -> tuple[float, str] | None:
    """The task's reference ``(latency_s, kind)`` from the cache (None: not there). Reads only."""
    kind = reference_kind(task, backend, exact_limit)
    latency = _read_references().get(_reference_key(task, backend, kind))
    return None if latency is None else (float(latency), kind)


def compute_reference(task: Task, backend: MockBackend, kind: str) -> float:
    """The task's reference latency of ``kind`` (see the module docstring), computed; no cache."""
    if kind == "exact":
        return float(backend.score_space(task).min())
    space = backend.space(task)
    rng = np.random.default_rng(0)
    sample = np.unique(np.concatenate([
        space.sample_indices(rng, min(REFERENCE_SAMPLES, space.size)),
        [space.index_of_rows(space.rows(space.initial_config()))],
    ]))
    scores = backend.model_latency_s(task, sample)
    order = np.argsort(scores, kind="stable")[:REFERENCE_STARTS]
    return min(_greedy_descent(backend, task, space, int(sample[i]), float(scores[i]))[1] for i in order)


def store_reference(task: Task, backend: MockBackend, kind: str, latency_s: float) -> None:
    """Add a reference to the cache: the whole file rewritten beside it and renamed over it, so a reader
    never sees half a file (two processes storing at once may lose one entry, recomputed when next needed)."""
    cached = _read_references()
    cached[_reference_key(task, backend, kind)] = latency_s
    path = _references_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cached, indent=0, sort_keys=True) + "\n")
    tmp.replace(path)


def reference_latency(task: Task, backend: MockBackend, exact_limit: int, use_cache: bool = True) -> tuple[float, str]:
    """``(latency_s, kind)`` of the task's reference: ``"exact"`` or ``"search"`` (see the module docstring)."""
    if use_cache:
        found = cached_reference(task, backend, exact_limit)
        if found is not None:
            return found
    kind = reference_kind(task, backend, exact_limit)
    latency = compute_reference(task, backend, kind)
    if use_cache:
        store_reference(task, backend, kind, latency)
    return latency, kind
