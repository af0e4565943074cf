"""The measurement session: the one place that measures configs of a task through a backend.

A :class:`MeasureSession` owns what a tuning run needs to know about measurements, apart from any
Gymnasium environment (as CompilerGym keeps its compilation session apart from the env that wraps it):

* a **cache** of every config ever measured (by dense index), so nothing is measured twice;
* **sessions**: :meth:`MeasureSession.start` begins one — its budget counts the unique configs it
  evaluates (a config measured in an earlier session is served from the cache and counts once);
* the **budget**: unique configs, a fraction of the space, or seconds of backend wall time;
* the **best-so-far** of the session (the only place it is tracked; never a censored result);
* **exact requests**: ``measure(..., exact=True)`` measures again, in full, any config whose result
  is censored (:attr:`~schedule_gym.types.MeasureResult.censored`, "slower than ``latency_s``");
* an **index-based batch API** (:meth:`MeasureSession.measure`): configs new to the backend go to it
  in one batch (a real backend builds them concurrently), duplicates within a batch are measured once;
* **callbacks on the caller's thread**: ``on_result(index, result)`` runs once per config new to the
  session, as its result arrives, on the thread that called :meth:`~MeasureSession.measure` (the
  backends' contract, :meth:`schedule_gym.backends.LatencyBackend.measure`).

:class:`~schedule_gym.envs.TilingEnv` wraps a session (``env.unwrapped.session``); search agents drive
it directly.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from schedule_gym.backends.base import LatencyBackend
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task
from schedule_gym.types import Config, MeasureResult

__all__ = ["IndexCallback", "MeasureSession"]

#: ``on_result(dense index, result)``
IndexCallback = Callable[[int, MeasureResult], None]


class MeasureSession:
    """Measurements of one task through one backend: cache, budget, best-so-far (see the module docstring).

    Args:
        task: the task.
        backend: a :class:`~schedule_gym.backends.LatencyBackend` (not closed by the session).
        space: the task's :class:`~schedule_gym.spaces.TileSpace` (built if not given).

    >>> from schedule_gym.backends import MockBackend
    >>> from schedule_gym.tasks import gemm
    >>> session = MeasureSession(gemm(64, 64, 64), MockBackend())
    >>> session.start(measurements=2)
    >>> [r is not None for r in session.measure([0, 1, 1, 2])]
    [True, True, True, False]
    >>> session.num_measurements, session.budget_exhausted()
    (2, True)
    """

    def __init__(self, task: Task, backend: LatencyBackend, space: TileSpace | None = None) -> None:
        if not isinstance(task, Task):
            raise TypeError(f"task must be a Task, got {task!r}")
        if not isinstance(backend, LatencyBackend):
            raise TypeError(f"backend must be a LatencyBackend, got {backend!r}")
        self.task = task
        self.backend = backend
        self.space = space if space is not None else TileSpace(task)
        self._cache: dict[int, MeasureResult] = {}  # every config ever measured, by dense index
        self.set_budget()
        self.start()

    # ------------------------------------------------------------------------------ sessions
    def set_budget(
        self,
        measurements: int | None = None,
        fraction: float | None = None,
        seconds: float | None = None,
    ) -> None:
        """Set the measurement budget (``None`` everywhere: unlimited); it applies from now on.

        ``measurements`` unique configs, ``fraction`` of the space (floored, at least one config) and
        ``seconds`` of backend wall time; the smallest binds.
        """
        if measurements is not None and (
            isinstance(measurements, bool) or not isinstance(measurements, numbers.Integral) or measurements < 1
        ):
            raise ValueError(f"budget_measurements must be a positive integer or None, got {measurements!r}")
        if fraction is not None and (
            isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction <= 1
        ):
            raise ValueError(f"budget_fraction must be in (0, 1] or None, got {fraction!r}")
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not seconds > 0
        ):
            raise ValueError(f"budget_seconds must be a positive number or None, got {seconds!r}")
        self.budget_measurements = None if measurements is None else int(measurements)
        self.budget_fraction = None if fraction is None else float(fraction)
        self.budget_seconds = None if seconds is None else float(seconds)
        limits = [self.budget_measurements] if self.budget_measurements is not None else []
        if self.budget_fraction is not None:
            limits.append(max(1, math.floor(self.budget_fraction * self.space.size)))
        #: the budget in unique configs (None: no count limit)
        self.max_measurements: int | None = min(limits) if limits else None

    def start(
        self, measurements: int | None = None, fraction: float | None = None, seconds: float | None = None
    ) -> None:
        """Begin a new session: nothing counted, no best; with a budget if any is given (else the current one)."""
        if measurements is not None or fraction is not None or seconds is not None:
            self.set_budget(measurements, fraction, seconds)
        self._seen: set[int] = set()
        self._best: MeasureResult | None = None
        self._best_index: int | None = None
        self._measure_wall_s = 0.0

    @property
    def budget(self) -> tuple[int | None, float | None, float | None]:
        """``(measurements, fraction, seconds)`` as last set (restore it with ``set_budget(*budget)``)."""
        return (self.budget_measurements, self.budget_fraction, self.budget_seconds)

    @property
    def num_measurements(self) -> int:
        """Unique configs evaluated in this session (what the budget counts)."""
        return len(self._seen)

    @property
    def explored_fraction(self) -> float:
        return len(self._seen) / self.space.size

    @property
    def measure_wall_s(self) -> float:
        """Wall seconds this session spent in the backend."""
        return self._measure_wall_s

    @property
    def best(self) -> MeasureResult | None:
        """The fastest exact measurement of this session (never a censored one)."""
        return self._best

    @property
    def best_index(self) -> int | None:
        return self._best_index

    def fastest(self, k: int) -> list[MeasureResult]:
        """The ``k`` fastest exact results this session knows (over all its sessions), fastest first; ties in
        the order they were measured."""
        exact = [result for result in self._cache.values() if result.exact]
        return sorted(exact, key=lambda result: result.latency_s)[: max(0, k)]  # type: ignore[arg-type, return-value]

    def budget_exhausted(self) -> bool:
        if self.max_measurements is not None and len(self._seen) >= self.max_measurements:
            return True
        return self.budget_seconds is not None and self._measure_wall_s >= self.budget_seconds

    # ---------------------------------------------------------------------------- look-ups
    def index_of(self, config: object) -> int:
        """The dense index of a config given as nested tuples or as an index (checked)."""
        if isinstance(config, (numbers.Integral, np.integer)) and not isinstance(config, (bool, np.bool_)):
            if not 0 <= config < self.space.size:
                raise IndexError(f"config index {config} is outside the space [0, {self.space.size})")
            return int(config)
        return self.space.index(config)

    def result(self, config: object) -> MeasureResult | None:
        """The cached measurement of a config (nested tuples or index), if it was ever measured here."""
        return self._cache.get(self.index_of(config))

    @property
    def num_known(self) -> int:
        """How many distinct configs this session has results for (over all its sessions)."""
        return len(self._cache)

    def cached(self, index: int) -> MeasureResult | None:
        """The cached measurement of a dense index (unchecked: the hot path of environment steps)."""
        return self._cache.get(index)

    def in_session(self, config: object) -> bool:
        """Whether a config (nested tuple or index) was already counted in this session."""
        return self.index_of(config) in self._seen

    def seen(self, index: int) -> bool:
        """:meth:`in_session` for a dense index, unchecked (the hot path of environment steps)."""
        return index in self._seen

    # ---------------------------------------------------------------------------- measuring
    def measure(
        self, configs: Sequence[object], on_result: IndexCallback | None = None, exact: bool = False
    ) -> list[MeasureResult | None]:
        """Results for configs (nested tuples or dense indices), measuring those never measured in one batch.

        Configs new to the session count against the budget in order; those past it get ``None``.
        ``on_result(index, result)`` is called once for every config new to the session, as soon as its
        result is known (cached ones first, then each measured one as the backend reports it), on the
        calling thread.

        With ``exact=True`` no result is censored (:attr:`MeasureResult.censored`): a config whose cached
        result is censored is measured again in full through
        :meth:`~schedule_gym.backends.LatencyBackend.measure_exact` (its new result replaces the cached
        one and is reported to ``on_result`` again; a config already counted in the session is not
        counted twice), and new configs are measured with it too.
        """
        return self.measure_indices([self.index_of(c) for c in configs], on_result, exact)

    def measure_indices(
        self, indices: Sequence[int], on_result: IndexCallback | None = None, exact: bool = False
    ) -> list[MeasureResult | None]:
        """:meth:`measure` for dense indices that are already checked (the environment's hot path)."""
        out: list[MeasureResult | None] = [None] * len(indices)
        to_measure: list[int] = []
        pending: dict[int, list[int]] = {}
        new_pending = 0  # pending configs not yet counted in the session
        for pos, idx in enumerate(indices):
            cached = self._cache.get(idx)
            stale = exact and cached is not None and cached.censored
            if idx in self._seen and not stale:
                out[pos] = cached
                continue
            if idx in pending:
                pending[idx].append(pos)
                continue
            counted = idx in self._seen
            if not counted and (
                self.budget_exhausted()
                or (self.max_measurements is not None and len(self._seen) + new_pending >= self.max_measurements)
            ):
                continue
            if cached is not None and not stale:
                self._admit(idx, cached)
                out[pos] = cached
                if on_result is not None:
                    on_result(idx, cached)
            else:
                pending[idx] = [pos]
                to_measure.append(idx)
                new_pending += not counted
        if not to_measure:
            return out
        configs: list[Config] = [self.space.config(i) for i in to_measure]
        reported: set[int] = set()
        caller = threading.get_ident()

        def callback(position: int, result: MeasureResult) -> None:
            if threading.get_ident() != caller:
                raise RuntimeError(
                    f"backend {self.backend.name!r} reported a result on another thread than the one that called "
                    "measure(); LatencyBackend.measure must call on_result on the caller's thread"
                )
            if position not in reported:
                reported.add(position)
                self._store(to_measure[position], result)
                if on_result is not None:
                    on_result(to_measure[position], result)

        t0 = time.perf_counter()
        try:
            measure = self.backend.measure_exact if exact else self.backend.measure
            results = measure(self.task, configs, on_result=callback)
        finally:
            self._measure_wall_s += time.perf_counter() - t0
        if len(results) != len(configs):
            raise RuntimeError(f"backend {self.backend.name!r} returned {len(results)} results for {len(configs)} configs")
        for position, (idx, result) in enumerate(zip(to_measure, results)):
            callback(position, result)  # a backend that does not report as it goes: report now
            for pos in pending[idx]:
                out[pos] = result
        return out

    def _store(self, idx: int, result: MeasureResult) -> None:
        self._cache[idx] = result
        self._admit(idx, result)

    def _admit(self, idx: int, result: MeasureResult) -> None:
        self._seen.add(idx)
        if result.exact and (self._best is None or result.latency_s < self._best.latency_s):
            self._best = result
            self._best_index = idx
