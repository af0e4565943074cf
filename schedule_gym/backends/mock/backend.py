"""The mock backend: latencies from the analytic model (:mod:`~schedule_gym.backends.mock.model`) of a CPU
profile, deterministic unless ``noise`` is set.

Records of mock measurements carry the profile in their target (:meth:`MockBackend.record_context`), so
measurements of different profiles never mix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schedule_gym.backends.base import VECTOR_WAY_OUT, LatencyBackend, MeasureResult, ResultCallback, valid_config
from schedule_gym.backends.memory import operand_bytes
from schedule_gym.backends.mock.model import MOCK_MODEL_VERSION, mock_latency_s
from schedule_gym.backends.mock.profile import CPUProfile
from schedule_gym.backends.mock.selection import AUTO_PROFILE, is_shipped, resolve_profile
from schedule_gym.backends.mock.table_cache import table_key, whole_table
from schedule_gym.errors import TaskError
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["MAX_OPERAND_BYTES", "MAX_REPEATS", "MockBackend"]


class _MockLatencies:
    """The noise-free mock model in one dense array over the space, filled as configs are first asked for.

    A call of the model has a fixed cost (about as much as scoring two hundred configs more), so how a table
    fills depends on how it is used. The only table of its backend (one task: a run comes back to its space
    again and again) scores each missed config's whole chunk of :attr:`MockBackend.CHUNK` indices, and soon
    reads the array alone; one of several tables of a backend (a batch spread thinly over many tasks' spaces:
    the multi-task vector environment) scores just the configs it misses, and touches no memory beyond them.
    The model is elementwise (a config's latency does not depend on the batch it is scored in), so either way
    these equal :meth:`MockBackend.measure`'s to the bit (tested)."""

    censored = None

    def __init__(self, backend: MockBackend, task: Task, size: int) -> None:
        self._backend, self._task, self._size = backend, task, size
        self._chunk = MockBackend.CHUNK
        self._latency_s = np.empty(size)  # pages are touched only where configs are scored
        self._scored = np.zeros(size, dtype=bool)
        self._unscored = size  # configs not scored yet: at 0 a call only reads
        # chunks scored whole: the only table's look-up reads this small array, not one flag a config
        self._chunk_done = np.zeros(-(-size // self._chunk), dtype=bool)

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        if self._unscored:
            if self._backend.tables_made == 1:  # whole chunks: this space is the only one served
                chunks = indices // self._chunk
                for c in np.unique(chunks[~self._chunk_done[chunks]]).tolist():  # one call a chunk: in cache
                    chunk = np.arange(c * self._chunk, min(self._size, (c + 1) * self._chunk))
                    self._score(chunk[~self._scored[chunk]])
                    self._chunk_done[c] = True
            else:
                missing = indices[~self._scored[indices]]
                if missing.size:
                    self._score(np.unique(missing))
        return self._latency_s[indices]

    def _score(self, indices: np.ndarray) -> None:
        self._latency_s[indices] = self._backend.model_latency_s(self._task, indices)
        self._scored[indices] = True
        self._unscored -= indices.size

    def whole(self) -> np.ndarray:
        """Every config's latency, read-only: scored (or loaded from the disk cache,
        :mod:`~schedule_gym.backends.mock.table_cache`) once, then served from the array."""
        if self._unscored:
            self._latency_s = self._backend.whole_table(self._task)
            self._unscored = 0  # from now on a call only reads
        view = self._latency_s.view()
        view.flags.writeable = False
        return view

    def require_exact(self, index: int) -> None:
        """Every model latency is exact."""


#: The most noisy costs one mock measurement may draw (more is a mistake, and would take seconds each).
MAX_REPEATS = 10_000

#: The most memory a task's operands (inputs and output in its dtype) may take for the mock to model its kernel:
#: 4 TiB, more than a large two-socket server holds, so a kernel past it could be allocated on no machine the
#: mock's profiles describe (the TVM backend refuses what this machine's available memory cannot hold).
MAX_OPERAND_BYTES = 1 << 42


class MockBackend(LatencyBackend):
    """Latencies from the analytic model (:func:`mock_latency_s`), cached per task in chunks.

    Args:
        profile: ``"auto"`` (default: the profile of the CPU this runs on), a :class:`CPUProfile`, or the
            name of a shipped one (:func:`~schedule_gym.backends.mock.selection.resolve_profile`).
            The profile used is ``backend.profile`` (its name: ``backend.profile.name``), and why it was
            chosen is ``backend.profile_origin``.
        noise: sigma of a multiplicative log-normal noise on every measurement (0: deterministic).
        seed: seed of the noise generator (see :meth:`reseed`; an environment that made its backend
            reseeds it from its own ``np_random`` at every ``reset(seed=...)``).
        repeats: how many noisy costs each measurement reports (their mean is the latency).
    """

    name = "mock"
    #: configs scored together when one of them is first asked for (a contiguous range of indices)
    CHUNK = 4096
    #: misses per task scored singly before chunks are (see :meth:`latency_of_index`)
    SINGLES = 16

    def __init__(
        self, profile: CPUProfile | str = AUTO_PROFILE, noise: float = 0.0, seed: int | None = 0, repeats: int = 1
    ) -> None:
        profile, origin = resolve_profile(profile)
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (0.0 <= noise < 5.0):
            raise ValueError(f"noise must be a number in [0, 5), got {noise!r}")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
            raise ValueError(f"repeats must be an integer in [1, {MAX_REPEATS}], got {repeats!r}")
        self.profile = profile
        #: why this profile: ``"named"``, ``"given"`` (an object), or what ``"auto"`` found
        self.profile_origin = origin
        self.noise = float(noise)
        self.repeats = repeats
        self.deterministic = self.noise == 0.0
        self.reseed(seed)
        # per task: its tile space and the chunks of model latencies scored so far
        self._tasks: dict[Task, tuple[TileSpace, dict[int, np.ndarray]]] = {}
        self._spaces: dict[tuple, TileSpace] = {}
        self._singles: dict[Task, dict[int, float]] = {}
        #: latency tables made (:meth:`latency_table`): how many spaces vectorised callers read at once
        self.tables_made = 0

    def reseed(self, seed: int | np.random.Generator | None) -> None:
        """Restart the noise generator: from a seed, or from a generator (a child of its seed sequence,
        so that drawing the noise never moves the caller's own stream)."""
        if isinstance(seed, np.random.Generator):
            seed_seq = getattr(seed.bit_generator, "seed_seq", None)
            self._rng = np.random.default_rng(seed_seq.spawn(1)[0] if seed_seq is not None else seed.integers(2**63))
        elif seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
            self._rng = np.random.default_rng(seed)
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            raise ValueError(f"seed must be a non-negative integer, a numpy Generator or None, got {seed!r}")
        else:
            raise TypeError(f"seed must be a non-negative integer, a numpy Generator or None, got {seed!r}")

    def check_task(self, task: Task) -> None:
        """Refuse a task whose operands need more than :data:`MAX_OPERAND_BYTES`: its kernel could never run."""
        need = operand_bytes(task)
        if need > MAX_OPERAND_BYTES:
            raise TaskError(
                f"task {task.name!r} needs {need / 2**40:.4g} TiB for its inputs and output ({task.dtype}); the mock "
                f"models kernels whose operands fit in {MAX_OPERAND_BYTES / 2**40:g} TiB (MAX_OPERAND_BYTES), more than "
                "a machine it models could hold"
            )

    def record_context(self, task: Task) -> tuple[str, str]:
        """Target ``mock:<profile name>`` for a shipped profile, ``mock:<name>@<digest of its numbers>`` for
        any other (a calibrated or hand-made one), so that records of different numbers never mix."""
        target = f"mock:{self.profile.name}"
        if not is_shipped(self.profile):
            target += f"@{self.profile.digest()}"
        return (target, MOCK_MODEL_VERSION)

    def protocol_dict(self) -> dict:
        return {"noise": self.noise, "repeats": self.repeats, "profile": self.profile.to_dict()}

    def _task_state(self, task: Task) -> tuple[TileSpace, dict[int, np.ndarray]]:
        state = self._tasks.get(task)
        if state is None:
            # tasks that differ only in their loop order share one tile space (its tables are the costly part)
            space = self._spaces.get(task.dims)
            if space is None:
                space = self._spaces[task.dims] = TileSpace(task)
            state = self._tasks[task] = (space, {})
        return state

    def space(self, task: Task) -> TileSpace:
        return self._task_state(task)[0]

    @property
    def scores_in_bulk(self) -> bool:
        """Noise-free with one cost per measurement: the model's latencies serve vectorised callers."""
        return self.deterministic and self.repeats == 1

    def latency_table(self, task: Task, space: TileSpace) -> _MockLatencies:
        if not self.deterministic:
            raise ValueError(
                f"the vector environment needs deterministic latencies; this mock backend draws noise "
                f"(noise={self.noise}); {VECTOR_WAY_OUT}"
            )
        if self.repeats != 1:
            raise ValueError(f"the vector environment takes a noise-free mock with repeats=1, got repeats={self.repeats}")
        self.tables_made += 1
        return _MockLatencies(self, task, space.size)

    def cpu_profile(self) -> CPUProfile:
        return self.profile

    def bulk_latency_s(self, task: Task, indices: np.ndarray) -> np.ndarray:
        """The model's noise-free latencies (:meth:`model_latency_s`), whatever the noise."""
        return self.model_latency_s(task, indices)

    def model_latency_s(self, task: Task, indices: np.ndarray | Sequence[int]) -> np.ndarray:
        """Noise-free model latencies of configs given by dense index (vectorised, any number)."""
        return mock_latency_s(task, self.space(task), np.asarray(indices, dtype=np.int64), self.profile)

    def score_space(self, task: Task, batch: int = 1 << 12) -> np.ndarray:
        """Noise-free latency of every config of ``task``, indexed by dense index, scored ``batch`` configs at
        a time (the model's arrays of every loop position for a batch stay in cache: 4,096 scored the whole
        GEMM 1024^3 space in half the time 262,144 did, examples/benchmarks/env_steps.py)."""
        space = self.space(task)
        out = np.empty(space.size)
        for start in range(0, space.size, batch):
            stop = min(space.size, start + batch)
            out[start:stop] = self.model_latency_s(task, np.arange(start, stop))
        return out

    def table_key(self, task: Task) -> str:
        """The disk cache's key of ``task``'s whole table (:mod:`~schedule_gym.backends.mock.table_cache`)."""
        return table_key(MOCK_MODEL_VERSION, self.profile.digest(), task.key, self.space(task).size)

    def whole_table(self, task: Task) -> np.ndarray:
        """:meth:`score_space`, kept on disk for large spaces and loaded from there after the first time
        (:mod:`~schedule_gym.backends.mock.table_cache`: the key holds everything the latencies depend on)."""
        return whole_table(self.table_key(task), self.space(task).size, lambda: self.score_space(task))

    def latency_of_index(self, task: Task, index: int) -> float:
        """Noise-free latency of one config, from the chunk cache (scores its chunk on first use).

        A task's first ``SINGLES`` misses are scored one config at a time: a search over loop orders
        measures a few configs of each of many tasks (one per order), where a chunk would be wasted."""
        space, chunks = self._task_state(task)
        chunk_id = index // self.CHUNK
        chunk = chunks.get(chunk_id)
        if chunk is None:
            singles = self._singles.setdefault(task, {})
            if index in singles:
                return singles[index]
            if len(singles) < self.SINGLES:
                singles[index] = float(mock_latency_s(task, space, np.array([index]), self.profile)[0])
                return singles[index]
            start = chunk_id * self.CHUNK
            stop = min(space.size, start + self.CHUNK)
            chunk = chunks[chunk_id] = mock_latency_s(task, space, np.arange(start, stop), self.profile)
        return float(chunk[index - chunk_id * self.CHUNK])

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        space = self.space(task)
        results = []
        for position, config in enumerate(configs):
            try:  # the fast way for a valid config; a wrong one is named by the space
                rows = space.rows(config) if len(config) == len(space.dims) else ()
            except (KeyError, TypeError):
                rows = ()
            if len(rows) != len(space.dims):
                rows = space.rows(valid_config(space, config, position))
            latency = self.latency_of_index(task, space.index_of_rows(rows))
            if self.noise:
                costs = tuple(float(c) for c in latency * np.exp(self.noise * self._rng.standard_normal(self.repeats)))
            else:
                costs = (latency,) * self.repeats
            results.append(MeasureResult(config, sum(costs) / len(costs), costs_s=costs))
            if on_result is not None:
                on_result(position, results[-1])
        return results
