"""Fitting the mock model's CPU profile to real measurements.

The mock backend's :class:`~schedule_gym.backends.mock.CPUProfile` has a dozen numbers (frequency,
cache fill bandwidths, overheads, ...). :func:`fit_profile` adjusts the continuous ones to minimise the
squared error of log latency against measured configs (coordinate descent with shrinking multiplicative
steps: the model is cheap, about a millisecond for 600 configs, so no gradients are needed) and
:func:`spearman` scores the rank agreement that search agents care about.

    python examples/benchmarks/calibrate_mock.py    # measures 600 configs at 1024^3, fits, reports
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from schedule_gym.backends.mock import CacheLevel, CPUProfile, mock_latency_s
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = ["FitReport", "fit_profile", "spearman"]

#: Profile fields the fit may change. Facts measured directly stay fixed: core and register counts,
#: vector width and the clock (a single thread of independent AVX-512 FMAs gives the peak, TVM_NOTES.md).
FIT_FIELDS = (
    "fma_latency_cycles",
    "cache_fill_fraction",
    "loop_overhead_cycles",
    "unroll_limit_vector_ops",
    "spill_cost",
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
    task: Task,
    configs: Sequence[Config],
    latencies_s: Sequence[float],
    profile: CPUProfile,
    rounds: int = 12,
    name: str | None = None,
) -> FitReport:
    """Fit ``profile``'s continuous fields to measured latencies of ``configs`` of ``task``."""
    space = TileSpace(task)
    idx = np.array([space.index(c) for c in configs], dtype=np.int64)
    target = np.log(np.asarray(latencies_s, dtype=float))
    fields = list(FIT_FIELDS) + [f"fill:{i}" for i in range(len(profile.caches))]

    def loss(p: CPUProfile) -> float:
        pred = np.log(mock_latency_s(task, space, idx, p))
        return float(np.mean((pred - target) ** 2))

    def rho(p: CPUProfile) -> float:
        return spearman(mock_latency_s(task, space, idx, p), latencies_s)

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
