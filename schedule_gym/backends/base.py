"""The latency backend interface: measure a batch of configs of a task, get a result for each.

Errors are values (as in TVM MetaSchedule): a :class:`MeasureResult` carries either timings or an
error message, and a config whose kernel fails to build, crashes, hangs or computes a wrong answer is a
result with ``error`` set, never an exception out of :meth:`LatencyBackend.measure`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from typing import TYPE_CHECKING, Protocol

import numpy as np

from schedule_gym.tasks.task import Task
from schedule_gym.types import ERROR_KINDS, Config, MeasureResult, ResultCallback

if TYPE_CHECKING:
    from schedule_gym.backends.tvm.export import KernelTarget
    from schedule_gym.records import RecordStore
    from schedule_gym.spaces import TileSpace

__all__ = [
    "ERROR_KINDS", "LatencyBackend", "LatencyTable", "MeasureResult", "ResultCallback", "valid_config", "valid_configs",
]

#: What a vectorised caller is told to use instead when a backend cannot score configs in bulk.
VECTOR_WAY_OUT = "use gymnasium.make_vec(env_id, num_envs=N, vectorization_mode='sync') (or 'async') for it"


def valid_config(space: TileSpace, config: object, position: int) -> Config:
    """``config`` as a canonical nested tuple, or the space's ``ValueError`` / ``TypeError`` naming the config's
    ``position`` in its batch, the task and what is wrong: a backend measures only configs of the task's space
    (a factor tuple of the wrong product would otherwise build another kernel under its name)."""
    try:
        return space.validate(config)
    except (TypeError, ValueError) as error:
        raise type(error)(
            f"config {position} of the batch is not a config of task {space.task.name!r}: {error}"
        ) from None


def valid_configs(task: Task, configs: Sequence[object]) -> list[Config]:
    """Every one of ``configs`` checked by :func:`valid_config` against ``task``'s tile space."""
    from schedule_gym.spaces import TileSpace

    space = TileSpace(task)
    return [valid_config(space, config, position) for position, config in enumerate(configs)]


class LatencyTable(Protocol):
    """Deterministic latencies of many configs of one task at once (what the native vector environments read).

    ``censored``, if not None, marks the configs whose latency is only a bound; :meth:`require_exact` raises
    where the exact latency of such a config is needed and cannot be had."""

    censored: np.ndarray | None

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        """Latency in seconds of each config (dense index); NaN where its measurement failed."""
        ...

    def require_exact(self, index: int) -> None:
        """Raise if the exact latency of config ``index`` cannot be given (its record is censored)."""
        ...


class LatencyBackend(abc.ABC):
    """Measures configs of tasks. Subclasses implement :meth:`measure`.

    Attributes:
        name: the short name the backend is made by (``"mock"``).
        deterministic: whether measuring the same config twice gives the same latency. Environments on
            a nondeterministic backend are registered with ``nondeterministic=True``.

    Callers never switch on a backend's name or class: they read its traits (:attr:`measures_hardware`,
    :attr:`needs_tvm`, :attr:`scores_in_bulk`) and ask it what they need (:attr:`measuring_backend`,
    :attr:`kernel_target`, :attr:`record_store`). A backend that wraps another (records, schedules)
    answers for the one it wraps.
    """

    name: str = "backend"
    deterministic: bool = False
    #: measures kernels on real hardware (this machine or remote ones): results are noisy, cost seconds
    #: each, and a run is worth recording to a file (the command line records by default)
    measures_hardware: bool = False
    #: needs TVM (``pip install 'schedule-gym[tvm]'``)
    needs_tvm: bool = False

    @property
    def scores_in_bulk(self) -> bool:
        """Whether :meth:`latency_table` can serve a vectorised caller (deterministic latencies, cheap to score)."""
        return False

    def cpu_profile(self) -> object | None:
        """The :class:`~schedule_gym.backends.mock.CPUProfile` this backend models (the mock's), or None for a
        backend that measures real hardware (callers then use the profile the mock picks for this machine)."""
        return None

    @property
    def measuring_backend(self) -> LatencyBackend:
        """The backend whose measurements these are: this one, or the innermost one a wrapper measures with
        (a replay backend's delegate), so that a result names ``"tvm"`` for TVM measurements kept in records."""
        return self

    @property
    def kernel_target(self) -> KernelTarget | None:
        """How this backend builds the kernels it measures (target, template, threads; what exporting the
        kernel a search found needs), or None: it builds none (a model, records without a delegate). A
        wrapper answers for its :attr:`measuring_backend`."""
        inner = self.measuring_backend
        return None if inner is self else inner.kernel_target

    @property
    def record_store(self) -> RecordStore | None:
        """The record file this backend serves and appends its new measurements to, or None: it keeps none."""
        return None

    def bulk_latency_s(self, task: Task, indices: np.ndarray) -> np.ndarray:
        """Latencies of many configs (dense indices) at once, NaN where one failed: what a backend that
        :attr:`scores_in_bulk` answers without measuring one config at a time (others raise ``TypeError``)."""
        return self.latency_table(task, self._space_of(task))(np.asarray(indices, dtype=np.int64))

    def _space_of(self, task: Task) -> TileSpace:
        from schedule_gym.spaces import TileSpace

        return TileSpace(task)

    def latency_table(self, task: Task, space: TileSpace) -> LatencyTable:
        """The :class:`LatencyTable` of ``task`` over ``space``, for callers that score many configs per step
        (the native vector environments). Backends that cannot (:attr:`scores_in_bulk` False) raise
        ``TypeError`` naming the way out."""
        raise TypeError(
            f"the vector environment needs a vectorisable backend, one that scores configs in bulk (a noise-free 'mock', or "
            f"'replay' without a delegate), got {self.name!r} ({type(self).__name__}); {VECTOR_WAY_OUT}"
        )

    @abc.abstractmethod
    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """Measure every config (valid factorisations of ``task``); one result per config, same order. A config
        that is not one of ``task``'s raises ``ValueError`` (or ``TypeError``) before anything is measured
        (:func:`valid_configs`).

        ``on_result(position, result)`` is called as soon as each result is known (before the whole
        batch is done), so that a caller can record it: a crash mid-batch then loses only the config
        in flight. The contract: it is called at most once per position, **on the thread that called
        ``measure``** (a backend that measures on several threads hands results back to that thread),
        and before ``measure`` returns; a callback that raises aborts the batch.
        """

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """:meth:`measure`, with no censored result: every kernel runs until it is timed (or fails).

        Callers use it for a config whose censored result is not enough (its exact latency is asked
        for). A backend that never censors measures as usual (this default).
        """
        return self.measure(task, configs, on_result)

    def reseed(self, seed: int | np.random.Generator | None) -> None:
        """Restart the generator of the noise this backend draws, if it draws any (an environment that made
        its backend reseeds it at every ``reset(seed=...)``). A backend without seeded noise ignores it."""

    def check_task(self, task: Task) -> None:
        """Raise :class:`~schedule_gym.errors.TaskError` (or ValueError) if this backend cannot measure
        ``task`` at all (rather than failing every config). Environments call it when they are made."""

    def record_context(self, task: Task) -> tuple[str, str]:
        """``(target, template version)`` under which this backend's measurements of ``task`` are recorded."""
        return (self.name, "none")

    def protocol_dict(self) -> dict:
        """The measurement protocol, stored with every record."""
        return {}

    def close(self) -> None:
        """Release workers, files and connections. Safe to call more than once."""

    def __enter__(self) -> LatencyBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
