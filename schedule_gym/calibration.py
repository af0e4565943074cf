"""Fitting the mock model's CPU profile to real measurements.

The mock backend's :class:`~schedule_gym.backends.mock.CPUProfile` has a dozen numbers (frequency,
cache fill bandwidths, overheads, ...). :func:`fit_profile` adjusts the continuous ones to minimise the
squared error of log latency against measured configs of one or several tasks (one profile for
every operator: it describes the CPU, not an operator; coordinate descent with shrinking multiplicative
steps: the model is cheap, about a millisecond for 600 configs, so no gradients are needed) and
:func:`spearman` scores the rank agreement that search agents care about. :func:`measure_sample` draws
and measures a seeded uniform sample of a task's configs through the TVM backend into a record file
(resumable).

    python examples/benchmarks/calibrate_mock.py    # measures samples, fits, reports per task
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from schedule_gym.backends.mock import CacheLevel, CPUProfile, mock_latency_s
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = ["CalibrationSample", "FitReport", "fit_profile", "measure_sample", "spearman"]

#: Profile fields the fit may change. Facts measured directly stay fixed: core and register counts,
#: vector width and the clock (a single thread of independent AVX-512 FMAs gives the peak, TVM_NOTES.md).
FIT_FIELDS = (
    "fma_latency_cycles",
    "cache_fill_fraction",
    "loop_overhead_cycles",
    "unroll_limit_vector_ops",
    "spill_cost",
    "gather_cost",
    "overlap",
    "parallel_overhead_s",
    "call_overhead_s",
)


def _rank(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    # average the ranks of ties
    sorted_vals = values[order]
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or sorted_vals[i] != sorted_vals[start]:
            if i - start > 1:
                ranks[order[start:i]] = (start + i - 1) / 2
            start = i
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties get average ranks)."""
    x, y = _rank(np.asarray(a, dtype=float)), _rank(np.asarray(b, dtype=float))
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / math.sqrt((x * x).sum() * (y * y).sum()))


def _get(profile: CPUProfile, name: str) -> float:
    if name.startswith("fill:"):
        return profile.caches[int(name[5:])].fill_bytes_per_cycle
    return float(getattr(profile, name))


def _set(profile: CPUProfile, name: str, value: float) -> CPUProfile:
    if name.startswith("fill:"):
        i = int(name[5:])
        caches = list(profile.caches)
        caches[i] = CacheLevel(caches[i].name, caches[i].size_bytes, value, caches[i].shared)
        return replace(profile, caches=tuple(caches))
    if name == "unroll_limit_vector_ops":
        return replace(profile, unroll_limit_vector_ops=max(1, int(round(value))))
    if name in ("cache_fill_fraction", "overlap"):
        value = min(1.0, value)
    if name == "fma_latency_cycles":
        value = min(8.0, max(1.0, value))
    return replace(profile, **{name: value})


@dataclass(frozen=True)
class CalibrationSample:
    """Measured configs of one task: the successful ones and their latencies."""

    task: Task
    configs: tuple[Config, ...]
    latencies_s: tuple[float, ...]

    def split(self) -> tuple[CalibrationSample, CalibrationSample]:
        """The first and the second half (the sample is in random order: a fit half and a held-out half)."""
        half = len(self.configs) // 2
        return (CalibrationSample(self.task, self.configs[:half], self.latencies_s[:half]),
                CalibrationSample(self.task, self.configs[half:], self.latencies_s[half:]))

    def predict(self, profile: CPUProfile) -> np.ndarray:
        space = TileSpace(self.task)
        idx = np.array([space.index(c) for c in self.configs], dtype=np.int64)
        return mock_latency_s(self.task, space, idx, profile)

    def spearman(self, profile: CPUProfile) -> float:
        return spearman(self.predict(profile), self.latencies_s)


def measure_sample(
    task: Task, n: int, records: str, seed: int = 0, backend_options: dict | None = None, batch: int = 25,
    progress: bool = True,
) -> CalibrationSample:
    """Measure ``n`` seeded uniformly random configs of ``task`` with the TVM backend, appending to the record
    file ``records`` (configs already there are not measured again); the successful ones, in draw order."""
    from schedule_gym.backends import ReplayBackend
    from schedule_gym.backends.tvm_backend import TVMBackend
    from schedule_gym.records import RecordStore

    space = TileSpace(task)
    rng = np.random.default_rng(seed)
    configs = [space.config(int(i)) for i in space.sample_indices(rng, min(n, space.size))]
    backend = ReplayBackend(records, delegate=TVMBackend(**(backend_options or {})))
    try:
        for start in range(0, len(configs), batch):
            backend.measure(task, configs[start : start + batch])
            if progress:
                print(f"  {task.name}: measured {min(start + batch, len(configs))}/{len(configs)}", flush=True)
        target, template = backend.record_context(task)
    finally:
        backend.close()
    store = RecordStore(records)
    found = {r.result.config: r.result for r in store.records_of(task, target, template)}
    ok = [(c, found[c].latency_s) for c in configs if c in found and found[c].ok]
    return CalibrationSample(task, tuple(c for c, _ in ok), tuple(lat for _, lat in ok))  # type: ignore[misc]


@dataclass
class FitReport:
    profile: CPUProfile
    loss_before: float
    loss_after: float
    spearman_before: float
    spearman_after: float
    rounds: int

    def __str__(self) -> str:
        return (
            f"log-latency RMSE {math.sqrt(self.loss_before):.3f} -> {math.sqrt(self.loss_after):.3f}, "
            f"Spearman {self.spearman_before:.3f} -> {self.spearman_after:.3f} on the fitting set ({self.rounds} rounds)"
        )


def fit_profile(
    samples: Sequence[CalibrationSample],
    profile: CPUProfile,
    rounds: int = 12,
    name: str | None = None,
) -> FitReport:
    """Fit ``profile``'s continuous fields to the measured latencies of one or several tasks' samples
    (each sample weighs the same; the reported Spearman figure is their mean)."""
    if not samples or any(len(s.configs) < 2 for s in samples):
        raise ValueError("fit_profile needs samples of at least two measured configs each")
    prepared = []
    for sample in samples:
        space = TileSpace(sample.task)
        idx = np.array([space.index(c) for c in sample.configs], dtype=np.int64)
        prepared.append((sample.task, space, idx, np.log(np.asarray(sample.latencies_s, dtype=float))))
    fields = list(FIT_FIELDS) + [f"fill:{i}" for i in range(len(profile.caches))]

    def loss(p: CPUProfile) -> float:
        return float(np.mean([np.mean((np.log(mock_latency_s(t, sp, idx, p)) - target) ** 2)
                              for t, sp, idx, target in prepared]))

    def rho(p: CPUProfile) -> float:
        return float(np.mean([spearman(mock_latency_s(t, sp, idx, p), target) for t, sp, idx, target in prepared]))

    best, best_loss = profile, loss(profile)
    start_loss, start_rho = best_loss, rho(profile)
    step = 2.0
    done = 0
    for done in range(1, rounds + 1):
        improved = False
        for field in fields:
            for factor in (step, 1.0 / step):
                value = _get(best, field) * factor
                candidate = _set(best, field, value)
                c_loss = loss(candidate)
                if c_loss < best_loss - 1e-12:
                    best, best_loss, improved = candidate, c_loss, True
        if not improved:
            step = math.sqrt(step)
            if step < 1.01:
                break
    if name:
        best = replace(best, name=name)
    return FitReport(best, start_loss, best_loss, start_rho, rho(best), done)
