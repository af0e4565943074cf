"""The reference latency each held-out task's regret is measured against, and its cache.

The reference is

* ``"exact"``: the mock's optimum over the whole space (:meth:`MockBackend.score_space`), for spaces of at
  most the protocol's ``exact_limit`` configs;
* ``"search"``: for larger spaces, the best of :data:`REFERENCE_SAMPLES` configs drawn uniformly (seed 0) and
  greedy descent (best neighbour, until none is better) from the best :data:`REFERENCE_STARTS` of them. It is
  a strong reference, not the optimum: an agent can beat it, giving a negative regret.

References are cached in the user cache (``<cache>/benchmark/references.json``, a JSON object of latencies by mock
target, task key and kind). The file is always replaced whole and atomically (written beside it, flushed to disk,
renamed over it), so a reader never sees half of one. A cache that is damaged all the same (cut short by a full
disk or a copy, edited by hand, not a JSON object of numbers) is **rebuilt, keeping every entry it can read**: the
valid entries of an object, or, when the file is not JSON, each of its lines that holds one whole entry (it is
written one entry a line); the damaged file is kept beside it as ``references.json.damaged``, a warning on stderr
(the ``logging`` module) says how many entries were kept, and the entries lost are computed again when needed.
A cache that cannot be read at all (no permission, a directory) is a ``ValueError`` naming the file.
"""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task

__all__ = ["REFERENCE_SAMPLES", "REFERENCE_STARTS", "cached_reference", "compute_reference", "reference_kind",
           "reference_latency", "store_reference"]

#: configs drawn for a ``"search"`` reference, and how many of the best start a greedy descent
REFERENCE_SAMPLES = 20_000
REFERENCE_STARTS = 8

log = logging.getLogger(__name__)


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


def _is_latency(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _salvage(text: str, data: object) -> tuple[dict[str, float], str]:
    """The entries of a damaged cache that can be read, and what was wrong with it."""
    if isinstance(data, dict):
        bad = [key for key, value in data.items() if not _is_latency(value)]
        return {k: float(v) for k, v in data.items() if k not in bad}, f"{len(bad)} entries are not latencies"
    if data is not None:
        return {}, f"it holds a JSON {type(data).__name__}, not an object"
    kept: dict[str, float] = {}
    for line in text.splitlines():  # written one entry a line: each whole line is an object of one entry
        try:
            entry = json.loads("{" + line.strip().rstrip(",") + "}")
        except ValueError:
            continue
        kept.update({k: float(v) for k, v in entry.items() if _is_latency(v)})
    return kept, "it is not valid JSON (cut short?)"


def _read_references() -> dict[str, float]:
    """The cached references; a damaged cache is rebuilt from the entries it holds (see the module docstring)."""
    from schedule_gym.cache import references_path

    path = references_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError(f"{path}: the benchmark's reference cache cannot be read ({exc.strerror or exc})") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and all(_is_latency(v) for v in data.values()):
        return data
    kept, why = _salvage(text, data)
    damaged = path.with_name(path.name + ".damaged")
    try:
        os.replace(path, damaged)
        _write_references(kept)
    except OSError as exc:
        log.warning("%s: the benchmark's reference cache is damaged (%s) and cannot be rebuilt (%s); using the %d "
                    "entries it holds", path, why, exc.strerror or exc, len(kept))
        return kept
    log.warning("%s: the benchmark's reference cache was damaged (%s): rebuilt with the %d entries it held (the rest "
                "are computed again when needed); the damaged file is kept as %s", path, why, len(kept), damaged)
    return kept


def _write_references(references: dict[str, float]) -> None:
    """Replace the cache file whole: written beside it, flushed to disk, renamed over it."""
    from schedule_gym.cache import references_path

    path = references_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(references, indent=0, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    """Add a reference to the cache, replacing the file whole and atomically (two processes storing at once may
    lose one entry, computed again when next needed)."""
    cached = _read_references()
    cached[_reference_key(task, backend, kind)] = latency_s
    _write_references(cached)


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
