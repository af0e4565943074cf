"""Aggregate regrets of a protocol's runs, as Agarwal et al. recommend ("Deep Reinforcement Learning at the
Edge of the Statistical Precipice", NeurIPS 2021, and their library ``rliable``): the median and the
interquartile mean (IQM), each with a stratified-bootstrap confidence interval.

The scores are a (task x seed) matrix of regrets, ``best_found / reference - 1`` of each run. In rliable's
terms the held-out tasks are its *tasks* and the seeds its *runs* (rliable's matrix is this one's transpose):

* :func:`aggregate_median`: the median over tasks of each task's mean over seeds (rliable's
  ``aggregate_median``; protocol v0's metric);
* :func:`aggregate_iqm`: the mean of the middle 50% of all (task, seed) scores, 25% cut at each end
  (rliable's ``aggregate_iqm``, ``scipy.stats.trim_mean(scores, 0.25, axis=None)``);
* :func:`stratified_bootstrap_interval`: the percentile interval of a statistic over resamples that draw
  each task's seeds with replacement, every task kept (rliable's ``StratifiedBootstrap`` with
  ``task_bootstrap=False``, ``method="percentile"``): the uncertainty of re-running the same tasks with
  other seeds. SciPy's ``bootstrap`` with one sample per task (``paired=False`` resamples each sample on
  its own) is that resampling; rliable itself is not used because its last release needs ``arch<8``,
  which does not import with pandas 3, and its resampling draws from NumPy's global generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP_REPS", "BOOTSTRAP_SEED", "CONFIDENCE", "aggregate_iqm", "aggregate_median", "summarise_regrets",
           "stratified_bootstrap_interval"]

#: resamples of each interval: rliable's default for interval estimates
BOOTSTRAP_REPS = 50_000
#: the bootstrap's seed, fixed so that a row's intervals are the same at every run
BOOTSTRAP_SEED = 0
#: the intervals' coverage
CONFIDENCE = 0.95


def _matrix(scores: Any) -> np.ndarray:
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.ndim < 2 or 0 in matrix.shape:
        raise ValueError(f"scores must be a non-empty (task x seed) matrix, got shape {matrix.shape}")
    return matrix


def _value(x: np.ndarray) -> Any:
    return float(x) if x.ndim == 0 else x


def aggregate_median(scores: Any) -> Any:
    """The median over tasks (rows) of each task's mean over seeds (columns); of a stack of such
    matrices (``(..., task, seed)``), one median each."""
    return _value(np.median(_matrix(scores).mean(axis=-1), axis=-1))


def aggregate_iqm(scores: Any) -> Any:
    """The interquartile mean of every (task, seed) score: 25% of them cut at each end, the rest averaged;
    of a stack of matrices (``(..., task, seed)``), one each."""
    from scipy.stats import trim_mean

    matrix = _matrix(scores)
    return _value(np.asarray(trim_mean(matrix.reshape(*matrix.shape[:-2], -1), 0.25, axis=-1)))


def stratified_bootstrap_interval(
    scores: Any,
    statistic: Callable[[Any], Any],
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """The ``confidence`` percentile interval of ``statistic`` over ``reps`` stratified resamples of the task
    x seed matrix ``scores`` (each task's seeds drawn with replacement; see the module docstring), seeded.
    ``statistic`` maps a stack of matrices ``(..., task, seed)`` to one value each, as
    :func:`aggregate_median` and :func:`aggregate_iqm` do.

    None where no interval can be estimated: a single seed (nothing to resample) or a score that is not
    finite (a run that measured nothing)."""
    from scipy.stats import bootstrap

    matrix = _matrix(scores)
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int, got {reps!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if matrix.shape[1] < 2 or not np.isfinite(matrix).all():
        return None
    def of_resampled_tasks(*tasks: np.ndarray, axis: int = -1) -> Any:  # each task: (..., seed)
        return statistic(np.stack(tasks, axis=-2))

    result = bootstrap(tuple(matrix), of_resampled_tasks, n_resamples=reps, batch=1000, vectorized=True, paired=False,
                       axis=-1, confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def summarise_regrets(scores: Any, reps: int = BOOTSTRAP_REPS) -> dict[str, Any]:
    """A row's statistics of a task x seed regret matrix beyond the median (which the row has already): the
    IQM, the intervals of both (``[low, high]``, or None: see :func:`stratified_bootstrap_interval`) and how
    they were drawn."""
    matrix = _matrix(scores)
    out: dict[str, Any] = {"iqm_regret": aggregate_iqm(matrix)}
    for name, statistic in (("median_regret", aggregate_median), ("iqm_regret", aggregate_iqm)):
        interval = stratified_bootstrap_interval(matrix, statistic, reps=reps)
        out[f"{name}_interval"] = None if interval is None else list(interval)
    out["interval_method"] = {"bootstrap": "stratified over seeds within each task (rliable, task_bootstrap=False)",
                              "method": "percentile", "confidence": CONFIDENCE, "reps": reps, "seed": BOOTSTRAP_SEED}
    return out
