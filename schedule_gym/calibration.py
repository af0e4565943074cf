"""Fitting the mock model's CPU profile to real measurements.

The mock backend's :class:`~schedule_gym.backends.mock.profile.CPUProfile` has a dozen numbers (frequency,
cache fill bandwidths, overheads, ...). :func:`fit_profile` adjusts the continuous ones to minimise the
squared error of log latency against measured configs of one or several tasks (one profile for
every operator: it describes the CPU, not an operator; coordinate descent with shrinking multiplicative
steps: the model is cheap to evaluate, so no gradients are needed) and
:func:`spearman` scores the rank agreement that search agents care about. :func:`measure_sample` draws
and measures a seeded uniform sample of a task's configs through the TVM backend into a record file
(resumable). :func:`calibrate` does all of it for several tasks: measure, fit on a share of each sample,
score on the rest; ``schedule-gym calibrate`` (which stores the profile in the user cache, where the
mock's ``profile="auto"`` finds it) and ``examples/benchmarks/calibrate_mock.py`` both run it.

    schedule-gym calibrate                          # this machine's profile, into the user cache
    python examples/benchmarks/calibrate_mock.py    # measures samples, fits, reports per task
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.backends.mock.model import mock_latency_s
from schedule_gym.backends.mock.profile import CacheLevel, CPUProfile
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = ["Calibration", "CalibrationSample", "FitReport", "TaskScore", "calibrate", "fit_profile", "measure_sample",
           "spearman"]

#: Where progress lines go: a function of one line (``print``), or None for none.
Progress = Callable[[str], None] | None


def _say(line: str) -> None:
    print(line, flush=True)

#: Profile fields the fit may change. Facts measured directly stay fixed: core and register counts,
#: vector width and the clock (a single thread of independent AVX-512 FMAs gives the peak:
#: ``examples/benchmarks/fma_peak.c``).
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

    def split(self, held_out: float = 0.5) -> tuple[CalibrationSample, CalibrationSample]:
        """A fitting part and a held-out part, the last ``held_out`` share of the configs (the sample is in
        random order; the default gives the first and the second half)."""
        if not 0.0 < held_out < 1.0:
            raise ValueError(f"held_out must be a share strictly between 0 and 1, got {held_out!r}")
        cut = int(len(self.configs) * (1.0 - held_out))
        return (CalibrationSample(self.task, self.configs[:cut], self.latencies_s[:cut]),
                CalibrationSample(self.task, self.configs[cut:], self.latencies_s[cut:]))

    def predict(self, profile: CPUProfile) -> np.ndarray:
        space = TileSpace(self.task)
        idx = np.array([space.index(c) for c in self.configs], dtype=np.int64)
        return mock_latency_s(self.task, space, idx, profile)

    def spearman(self, profile: CPUProfile) -> float:
        return spearman(self.predict(profile), self.latencies_s)


def measure_sample(
    task: Task, n: int, records: str | Path, seed: int = 0, backend_options: dict | None = None, batch: int = 25,
    progress: bool | Progress = True,
) -> CalibrationSample:
    """Measure ``n`` seeded uniformly random configs of ``task`` with the TVM backend, appending to the record
    file ``records`` (configs already there are not measured again); the successful ones, in draw order.
    ``progress``: a line per batch to this function (True: ``print``; False or None: quiet)."""
    backend = _recording_tvm_backend(records, backend_options)
    try:
        return _measure(backend, task, n, records, seed, batch, _say if progress is True else (progress or None))
    finally:
        backend.close()


def _recording_tvm_backend(records: str | Path, backend_options: dict | None) -> Any:
    from schedule_gym.backends import ReplayBackend
    from schedule_gym.backends.tvm.backend import TVMBackend

    return ReplayBackend(str(records), delegate=TVMBackend(**(backend_options or {})))


def _measure(
    backend: Any, task: Task, n: int, records: str | Path, seed: int, batch: int, say: Progress
) -> CalibrationSample:
    from schedule_gym.records import RecordStore

    space = TileSpace(task)
    rng = np.random.default_rng(seed)
    configs = [space.config(int(i)) for i in space.sample_indices(rng, min(n, space.size))]
    for start in range(0, len(configs), batch):
        backend.measure(task, configs[start : start + batch])
        if say is not None:
            say(f"  {task.name}: measured {min(start + batch, len(configs))}/{len(configs)}")
    target, template = backend.record_context(task)
    store = RecordStore(str(records))
    found = {r.result.config: r.result for r in store.records_of(task, target, template)}
    # failed configs are left out, and so are censored ones (stopped early: no latency is claimed for them)
    ok = [(c, found[c].latency_s) for c in configs if c in found and found[c].exact]
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


@dataclass(frozen=True)
class TaskScore:
    """One task of a calibration: how many configs it measured, fitted on and held out, and Spearman's
    rank correlation of the model with the measured latencies on the held-out configs."""

    task: Task
    measured: int
    fitted_on: int
    held_out: int
    spearman_start: float
    spearman_fitted: float
    best_gflops: float


@dataclass(frozen=True)
class Calibration:
    """The outcome of :func:`calibrate`: the starting and fitted profiles and the held-out scores per task."""

    start: CPUProfile
    fit: FitReport
    scores: tuple[TaskScore, ...]

    @property
    def profile(self) -> CPUProfile:
        return self.fit.profile

    @property
    def spearman_start(self) -> float:
        """The starting profile's held-out Spearman figure, the mean over the tasks."""
        return float(np.mean([s.spearman_start for s in self.scores]))

    @property
    def spearman_fitted(self) -> float:
        """The fitted profile's held-out Spearman figure, the mean over the tasks."""
        return float(np.mean([s.spearman_fitted for s in self.scores]))

    def table(self) -> str:
        """The held-out Spearman figures per task and overall (mean over the tasks), start vs fitted."""
        width = max(28, *(len(s.task.name) for s in self.scores))
        head = (f"{'task':<{width}} {'measured':>8} {'fit on':>7} {'held out':>8}   held-out Spearman: "
                f"{self.start.name} -> fitted   best real GFLOP/s")
        start_w = len("held-out Spearman: ") + len(self.start.name)
        lines = [head]
        for s in self.scores:
            lines.append(f"{s.task.name:<{width}} {s.measured:>8} {s.fitted_on:>7} {s.held_out:>8}   "
                         f"{s.spearman_start:>{start_w}.3f} -> {s.spearman_fitted:>6.3f}   {s.best_gflops:.1f}")
        lines.append(f"{'overall (mean over tasks)':<{width}} {'':>8} {'':>7} {'':>8}   "
                     f"{self.spearman_start:>{start_w}.3f} -> {self.spearman_fitted:>6.3f}")
        return "\n".join(lines)


#: The fewest successful configs a task's sample needs: two to fit on and two to hold out.
MIN_CONFIGS = 4


def calibrate(
    tasks: Sequence[Task],
    configs: int,
    records: str | Path,
    start: CPUProfile,
    name: str | None = None,
    seed: int = 0,
    held_out: float = 0.5,
    cores: int | None = None,
    backend_options: dict | None = None,
    batch: int = 25,
    progress: Progress = _say,
) -> Calibration:
    """Measure ``configs`` seeded random configs of each task with the TVM backend into ``records``
    (resumable: configs already there are not measured again; failed and censored configs are left out),
    fit one profile to the first ``1 - held_out`` of every task's sample together starting from ``start``
    (with ``cores`` cores if given: the threads the kernels ran on), and score ``start`` and the fitted profile (named
    ``name``) on the held-out rest. Raises ``ValueError`` for a task with fewer than :data:`MIN_CONFIGS`
    successful configs."""
    if not tasks:
        raise ValueError("calibrate needs at least one task")
    if isinstance(configs, bool) or not isinstance(configs, int) or configs < MIN_CONFIGS:
        raise ValueError(f"configs must be an integer of at least {MIN_CONFIGS}, got {configs!r}")
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must be a share strictly between 0 and 1, got {held_out!r}")
    samples = []
    backend = _recording_tvm_backend(records, backend_options)  # one for all tasks: its workers start once
    try:
        for task in tasks:
            sample = _measure(backend, task, configs, records, seed, batch, progress)
            if len(sample.configs) < MIN_CONFIGS:
                raise ValueError(f"only {len(sample.configs)} of {configs} configs of {task.name} were measured "
                                 f"successfully (see {records}); calibration needs at least {MIN_CONFIGS} per task")
            if progress is not None:
                progress(f"{task.name}: {len(sample.configs)} of {configs} configs measured successfully")
            samples.append(sample)
    finally:
        backend.close()
    parts = [s.split(held_out) for s in samples]
    if any(len(fit.configs) < 2 or len(rest.configs) < 2 for fit, rest in parts):
        raise ValueError(f"held_out={held_out} leaves fewer than 2 configs to fit on or to hold out for some task")
    base = start if cores is None or cores == start.cores else replace(start, cores=cores)
    report = fit_profile([fit for fit, _ in parts], base, name=name)
    scores = tuple(
        TaskScore(s.task, len(s.configs), len(fit.configs), len(rest.configs), rest.spearman(start),
                  rest.spearman(report.profile), s.task.flops / min(s.latencies_s) * 1e-9)
        for s, (fit, rest) in zip(samples, parts)
    )
    return Calibration(start, report, scores)
