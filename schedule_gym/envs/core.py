"""The episode core: N sub-environments, each on one of T tasks, stepped with NumPy array operations.

One class, :class:`VectorEpisodes`, holds everything an episode is made of, over arrays: the state (each
sub-environment's task, rows of its factorisation tables, dense index, steps), the sessions (the configs
each has evaluated, its count, its best, its ``s0`` reference), reset resolution (task draw, start config,
reference latency), step outcomes (illegal move, budget refused, failed, censored, measured) and rewards
(:mod:`schedule_gym.envs.rewards`), observations (:class:`~schedule_gym.envs.observations.GatherTables`)
and action masks. The native vector environments are thin shells over it: ``TilingVectorEnv`` is T = 1,
``MultiTaskVectorEnv`` T tasks with a task drawn per episode.

Every sub-environment behaves exactly as its single environment (``TilingEnv``; ``MultiTaskEnv`` for T
tasks) wrapped in ``TimeLimit`` — the same observations, rewards, masks and sessions to the bit (the tests
step both side by side). The single environments keep a scalar copy of the transition for speed (a NumPy
call costs about as much as a whole scalar step); everything that decides a value — the options
(:class:`~schedule_gym.envs.options.EnvOptions`), the reward objects, the factor and observation tables, the
start rules (:mod:`schedule_gym.envs.resolve`) — is shared.

Latencies come from the backend's :meth:`~schedule_gym.backends.LatencyBackend.latency_table` (a
noise-free mock, or records replayed without a delegate): deterministic, so one table serves every
sub-environment.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gymnasium.utils import seeding

from schedule_gym.backends import LatencyBackend
from schedule_gym.backends.base import VECTOR_WAY_OUT, LatencyTable
from schedule_gym.envs.features import N_SEARCH, FeatureTables, machine_profile
from schedule_gym.envs.keysets import KeySets, SmallKeySets
from schedule_gym.envs.observations import GatherTables, TaskLayout
from schedule_gym.envs.options import FEATURE_OBSERVATIONS, EnvOptions
from schedule_gym.envs.resolve import checked_space, reward_scale, start_rows
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task

__all__ = ["MAX_DENSE_CONFIGS", "VectorEpisodes", "VectorSessions"]

#: Largest space whose latencies a vector environment keeps as one dense array (8 bytes a config).
MAX_DENSE_CONFIGS = 1 << 27
#: From this many sub-environments on, sessions are kept in a NumPy hash table (:class:`KeySets`), below it
#: in a Python set: a batch costs the table a fixed number of array operations, the set one look-up per key.
HASH_TABLE_ENVS = 256






def latency_table(backend: LatencyBackend, task: Task, space: TileSpace) -> LatencyTable:
    """The backend's :class:`~schedule_gym.backends.LatencyTable` of ``task``, refused past ``MAX_DENSE_CONFIGS``."""
    if space.size > MAX_DENSE_CONFIGS:
        raise ValueError(
            f"task {task.name!r} has {space.size:,} configs, more than the {MAX_DENSE_CONFIGS:,} whose latencies the "
            f"vector environment keeps in one array; {VECTOR_WAY_OUT}"
        )
    return backend.latency_table(task, space)


def _mask_words(space: TileSpace, n_words: int) -> list[np.ndarray]:
    """Per dimension, its legal moves in each row as ``n_words`` uint64 bit words (bit ``a`` = action ``a``)."""
    out = []
    offset = 0
    for d in space.dims:
        words = np.zeros((d.size, n_words), dtype=np.uint64)
        for local in range(len(d.actions)):
            a = offset + local
            words[:, a // 64] |= d.masks[:, local].astype(np.uint64) << np.uint64(a % 64)
        out.append(words)
        offset += len(d.actions)
    return out


class VectorSessions:
    """What every vector episode core keeps of each environment's measurement session: its reference
    latency, the unique configs counted, the best so far, and the environment's own generator (seeded by
    ``reset(seed=...)``, else drawn fresh on first use). A subclass calls :meth:`init_sessions` and says
    how its record of measured configs forgets environments (:meth:`forget_seen`)."""

    def init_sessions(self, n: int, fixed_ref_latency_s: float, best_index_dtype: type | np.dtype = np.int64) -> None:
        self.ref_s = np.full(n, fixed_ref_latency_s)
        self.count = np.zeros(n, dtype=np.int64)  # unique configs of each session
        self.best_s = np.full(n, np.inf)
        self.best_index = np.full(n, -1, dtype=best_index_dtype)
        self._rngs: list[np.random.Generator | None] = [None] * n

    def seed(self, envs: Sequence[int], seeds: Sequence[int | None]) -> None:
        """Seed the generators of ``envs`` (a None seed keeps the generator) and start new sessions there."""
        seeded = []
        for e, seed in zip(envs, seeds):
            if seed is not None:
                self._rngs[e] = seeding.np_random(seed)[0]
                seeded.append(e)
        self.new_sessions(np.array(seeded, dtype=np.int64))

    def new_sessions(self, envs: np.ndarray) -> None:
        self.ref_s[envs] = self.options.fixed_ref_latency_s
        self.count[envs] = 0
        self.best_s[envs] = np.inf
        self.best_index[envs] = -1
        self.forget_seen(envs)

    def forget_seen(self, envs: np.ndarray) -> None:
        raise NotImplementedError

    def _rng(self, env: int) -> np.random.Generator:
        rng = self._rngs[env]
        if rng is None:
            rng = self._rngs[env] = seeding.np_random()[0]
        return rng


class VectorEpisodes(VectorSessions):
    """N sub-environments on ``tasks`` (see the module docstring).

    ``session_per_episode``: every reset starts a new measurement session (``MultiTaskEnv``'s episodes, and
    ``episode="session"``); otherwise only ``reset(seed=...)`` does (``TilingEnv``'s). ``draw_task``: a reset
    draws the task from the sub-environment's generator, then an inner seed whose generator draws the start
    (``MultiTaskEnv.reset``); otherwise the sub-environment's generator draws the start (``TilingEnv.reset``).
    """

    def __init__(self, num_envs: int, tasks: Sequence[Task], backend: LatencyBackend, options: EnvOptions,
                 layout: TaskLayout | None, max_episode_steps: int | None, session_per_episode: bool,
                 draw_task: bool) -> None:
        self.num_envs = n = int(num_envs)
        self.tasks = tuple(tasks)
        self.options = options
        self.reward = options.reward
        self.layout = layout
        self.max_episode_steps = max_episode_steps
        self.session_per_episode = session_per_episode
        self.draw_task = draw_task
        self.spaces = [checked_space(t) for t in self.tasks]
        self.tables = [latency_table(backend, t, s) for t, s in zip(self.tasks, self.spaces)]
        # the budget's checks and its count limit per task, from the one place that defines them
        limits = []
        for task, space in zip(self.tasks, self.spaces):
            budget = MeasureSession(task, backend, space)
            budget.set_budget(options.budget_measurements, options.budget_fraction, None)
            limits.append(-1 if budget.max_measurements is None else budget.max_measurements)
        self._task_limit = np.array(limits, dtype=np.int64)
        self._reward_scale = np.array([reward_scale(options, backend, s) for s in self.spaces])
        self._scaled = options.reward_scale != "none"
        self.max_measurements: int | None = None if limits[0] < 0 else limits[0]  # task 0's (the single-task case)
        self._limited = bool((self._task_limit >= 0).any())
        self._single = len(self.tasks) == 1
        sizes = [s.size for s in self.spaces]
        self._offset = np.cumsum([0] + sizes)[:-1].astype(np.int64)
        total = int(sum(sizes))
        if total >= 2**62 // n:
            raise ValueError(f"{n} environments of spaces of {total:,} configs overflow int64 indices")
        max_dims = max(len(t.dims) for t in self.tasks)
        self.n_actions = layout.max_actions if layout is not None else self.spaces[0].n_actions

        # Move tables over every task: action a of task t is entry t * A + a of these; a padding action (past the
        # task's own) reads a sentinel -1 cell (illegal) at the end of the flattened next-row tables.
        A = self.n_actions
        flats, base_of = [], 0
        dim_of = np.zeros(len(self.tasks) * A, dtype=np.int64)
        base = np.zeros(len(self.tasks) * A, dtype=np.int64)
        width = np.zeros(len(self.tasks) * A, dtype=np.int64)
        stride = np.zeros(len(self.tasks) * A, dtype=np.int64)
        for t, space in enumerate(self.spaces):
            widths = [len(d.actions) for d in space.dims]
            starts = base_of + np.cumsum([0] + [d.size * w for d, w in zip(space.dims, widths)])[:-1]
            for a, (x, local) in enumerate(space.action_dim):
                dim_of[t * A + a] = x
                base[t * A + a] = starts[x] + local
                width[t * A + a] = widths[x]
                stride[t * A + a] = space.strides[x]
            flats.extend(d.next_row.ravel() for d in space.dims)
            base_of += sum(d.size * w for d, w in zip(space.dims, widths))
        self._flat_next = np.concatenate(flats + [np.array([-1], dtype=np.int64)])
        sentinel = len(self._flat_next) - 1
        for t, space in enumerate(self.spaces):
            base[t * A + space.n_actions:(t + 1) * A] = sentinel
        self._action_dim, self._action_base, self._action_width, self._action_stride = dim_of, base, width, stride

        # Masks as bit words: row r of dimension x of task t sets the bits of its legal actions; padded dimensions
        # read an all-zero row. A sub-environment's mask is the OR over its dimensions, unpacked.
        self._n_words = -(-A // 64) if A else 1
        words, word_base = [], []
        at = 0
        for space in self.spaces:
            word_base.append([])
            for table in _mask_words(space, self._n_words):
                word_base[-1].append(at)
                words.append(table)
                at += table.shape[0]
        words.append(np.zeros((1, self._n_words), dtype=np.uint64))  # what padded dimensions (row 0) read
        self._word_base = np.array([b + [at] * (max_dims - len(b)) for b in word_base], dtype=np.int64)
        self._words = np.concatenate(words)
        # task 0's per-dimension tables, the single-task masks (one word: 1-D, the cheaper gather)
        self._first_words = [w[:, 0].copy() if self._n_words == 1 else w for w in words[: len(self.spaces[0].dims)]]

        self.features: FeatureTables | None = None
        if options.observation in FEATURE_OBSERVATIONS:
            self.features = FeatureTables(self.spaces, layout or TaskLayout.of_tasks(self.tasks), machine_profile(backend),
                                          moves=options.observation == "move_features")
            self.observation_space = self.features.space
        else:
            self.observations = GatherTables(self.spaces, options.observation, options.include_shape, layout)
            self.observation_space = self.observations.space
        self._strides = np.zeros((len(self.tasks), max_dims), dtype=np.int64)
        self._dim_sizes = np.ones((len(self.tasks), max_dims), dtype=np.int64)
        self._s0_rows = np.zeros((len(self.tasks), max_dims), dtype=np.int64)
        for t, space in enumerate(self.spaces):
            self._strides[t, : len(space.dims)] = space.strides
            self._dim_sizes[t, : len(space.dims)] = space.dim_sizes
            self._s0_rows[t, : len(space.dims)] = space.rows(space.initial_config())
        self._s0_index = np.array([s.index_of_rows(r[: len(s.dims)].tolist()) for s, r in zip(self.spaces, self._s0_rows)],
                                  dtype=np.int64)

        self.task = np.zeros(n, dtype=np.int64)
        self.rows = np.tile(self._s0_rows[0], (n, 1))
        self.index = np.full(n, self._s0_index[0], dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)
        self.last_s = np.full(n, np.nan)  # latency of the current state's result (NaN: failed or none)
        self.start_s = np.full(n, np.nan)  # latency of the episode's start config
        self.prev_s = np.full(n, np.nan)  # last successful latency of the episode
        self.init_sessions(n, options.fixed_ref_latency_s)
        self.limit = np.full(n, self._task_limit[0], dtype=np.int64)  # its task's budget (-1: none)
        self.done = np.zeros(n, dtype=bool)
        self._seen = (KeySets if n >= HASH_TABLE_ENVS else SmallKeySets)(total)
        self.all = np.arange(n, dtype=np.int64)

    # ------------------------------------------------------------------------------ sessions
    def task_index(self, task: object) -> int:
        """The position of ``task`` (a :class:`Task` of the list or its name) in ``tasks``."""
        for t, candidate in enumerate(self.tasks):
            if task is candidate or (isinstance(task, Task) and task.key == candidate.key) or task == candidate.name:
                return t
        raise ValueError(f"reset option task must be one of this environment's tasks "
                         f"({', '.join(t.name for t in self.tasks)}), got {task!r}")

    def forget_seen(self, envs: np.ndarray) -> None:
        if envs.size == self.num_envs:
            self._seen.clear()
        elif envs.size:
            self._seen.drop(envs)

    def _latency(self, tasks: np.ndarray | None, indices: np.ndarray) -> np.ndarray:
        if self._single:
            return self.tables[0](indices)
        out = np.empty(indices.size)
        for t in np.unique(tasks).tolist():
            at = tasks == t
            out[at] = self.tables[t](indices[at])
        return out

    def _censored(self, tasks: np.ndarray | None, indices: np.ndarray) -> np.ndarray | None:
        if self._single:
            censored = self.tables[0].censored
            return None if censored is None else censored[indices]
        if all(table.censored is None for table in self.tables):
            return None
        out = np.zeros(indices.size, dtype=bool)
        for t in np.unique(tasks).tolist():
            censored = self.tables[t].censored
            if censored is not None:
                at = tasks == t
                out[at] = censored[indices[at]]
        return out

    def visit(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Evaluate one config per sub-environment (``envs`` distinct) as ``MeasureSession.measure_indices``:
        ``(has_result, admitted, latency_s)``; ``has_result`` is False where the budget refused a new config."""
        seen = self._seen
        seen.reserve(envs.size)
        tasks = None if self._single else self.task[envs]
        keys, known, slots = seen.find(envs, indices if tasks is None else self._offset[tasks] + indices)
        admitted = ~known
        if not self._limited:
            ok = np.ones(envs.size, dtype=bool)
            latency_s = self._latency(tasks, indices)
        else:
            limit = self.limit[envs]
            admitted &= (limit < 0) | (self.count[envs] < limit)
            ok = known | admitted
            latency_s = np.full(envs.size, np.nan)
            if ok.any():
                latency_s[ok] = self._latency(None if tasks is None else tasks[ok], indices[ok])
        if admitted.any():
            new_envs = envs[admitted]
            self.count[new_envs] += 1
            seen.insert(keys[admitted], slots[admitted])
            lat = latency_s[admitted]
            better = lat < self.best_s[new_envs]  # NaN (failed) is never better
            censored = self._censored(None if tasks is None else tasks[admitted], indices[admitted])
            if censored is not None:  # a censored record (its latency is a bound) is never a best
                better &= ~censored
            if better.any():
                self.best_s[new_envs[better]] = lat[better]
                self.best_index[new_envs[better]] = indices[admitted][better]
        return ok, admitted, latency_s

    # -------------------------------------------------------------------------------- resets
    def reset(self, envs: np.ndarray, start: object = None, config: object = None, task: object = None) -> np.ndarray:
        """Reset the sub-environments ``envs`` as their single environments' ``reset`` does; returns whether
        each start config has a result (``new_measurement`` of the reset's info)."""
        start = self.options.start if start is None else start
        fixed_task = None if task is None else self.task_index(task)
        if self.draw_task or self.session_per_episode:
            for e in envs.tolist():
                rng = self._rng(e)
                if self.draw_task:
                    self.task[e] = fixed_task if fixed_task is not None else int(rng.integers(len(self.tasks)))
                    inner = seeding.np_random(int(rng.integers(2**31)))[0]  # MultiTaskEnv's inner seed
                    self._set_start(e, start, config, inner)
                else:
                    self._set_start(e, start, config, rng)
            if self.session_per_episode:
                self.new_sessions(envs)
            self.limit[envs] = self._task_limit[self.task[envs]]
        elif config is not None or start != "random":
            rows = start_rows(self.spaces[0], start, config, lambda size: 0)
            self.rows[envs, : len(rows)] = rows
        else:
            size = self.spaces[0].size
            drawn = np.array([int(self._rng(e).integers(size)) for e in envs.tolist()], dtype=np.int64)
            self.rows[envs] = (drawn[:, None] // self._strides[0]) % self._dim_sizes[0]
        tasks = self.task[envs]
        self.index[envs] = np.einsum("ij,ij->i", self.rows[envs], self._strides[tasks])
        if self.reward.needs_reference:
            need = envs[np.isnan(self.ref_s[envs])]
            if need.size:
                for t in np.unique(self.task[need]).tolist():  # s0's latency is the unit of rewards
                    self.tables[t].require_exact(int(self._s0_index[t]))
                ok, _, latency_s = self.visit(need, self._s0_index[self.task[need]])
                self.ref_s[need] = np.where(ok, latency_s, np.nan)
        ok, _, latency_s = self.visit(envs, self.index[envs])
        self.last_s[envs] = latency_s
        self.prev_s[envs] = latency_s
        self.start_s[envs] = latency_s
        self.steps[envs] = 0
        self.done[envs] = False
        return ok

    def _set_start(self, env: int, start: str, config: object, rng: np.random.Generator) -> None:
        space = self.spaces[self.task[env]]
        rows = start_rows(space, start, config, lambda size: int(rng.integers(size)))
        self.rows[env] = 0
        self.rows[env, : len(rows)] = rows

    # --------------------------------------------------------------------------------- steps
    def step(self, envs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, truncated: np.ndarray,
             legal_out: np.ndarray, new_out: np.ndarray) -> None:
        """Step ``envs`` by ``actions`` (checked), writing rewards, truncation, legality and new-measurement flags."""
        each = slice(None) if envs is self.all else envs  # a slice where every environment steps (no copies)
        self.steps[each] += 1
        ta = actions if self._single else self.task[envs] * self.n_actions + actions
        dim = self._action_dim[ta]
        old_row = self.rows[envs, dim]
        new_row = self._flat_next[self._action_base[ta] + old_row * self._action_width[ta]]
        legal = new_row >= 0
        legal_out[each] = legal
        options = self.options
        if legal.all():
            movers = envs
        else:
            rewards[envs[~legal]] = options.illegal_action_penalty
            movers, ta, dim, old_row, new_row = envs[legal], ta[legal], dim[legal], old_row[legal], new_row[legal]
        if movers.size:
            indices = self.index[movers] + (new_row - old_row) * self._action_stride[ta]
            best_before = self.best_s[movers] if self.reward.uses_best else None
            ok, admitted, latency_s = self.visit(movers, indices)
            new_out[movers] = admitted
            if ok.all():
                moved = movers
            else:
                truncated[movers[~ok]] = True  # the budget refused a new config: stay, reward 0
                moved, dim, new_row, indices, latency_s = movers[ok], dim[ok], new_row[ok], indices[ok], latency_s[ok]
                admitted = admitted[ok]
                best_before = None if best_before is None else best_before[ok]
            self.rows[moved, dim] = new_row
            self.index[moved] = indices
            self.last_s[moved] = latency_s
            failed = np.isnan(latency_s)
            with np.errstate(invalid="ignore", divide="ignore"):
                reward = self.reward.of_arrays(latency_s, self.prev_s[moved], self.ref_s[moved], best_before,
                                               self.best_s[moved], admitted)
                if self._scaled:
                    reward = reward / self._reward_scale[self.task[moved]]
            if failed.any():
                rewards[moved] = np.where(failed, options.failure_penalty, reward)
                self.prev_s[moved[~failed]] = latency_s[~failed]
            else:
                rewards[moved] = reward
                self.prev_s[moved] = latency_s
        if self._limited:
            truncated[each] |= (self.limit[each] >= 0) & (self.count[each] >= self.limit[each])
        if self.max_episode_steps is not None:
            truncated[each] |= self.steps[each] >= self.max_episode_steps

    # ---------------------------------------------------------------------------- observing
    def observe(self) -> np.ndarray:
        if self.features is None:
            return self.observations.of_rows(None if self._single else self.task, self.rows)
        features = self.features
        n = self.num_envs
        out = np.empty((n, features.size), dtype=np.float32)
        out[:, : features.config_size] = features.config_part(self.task, self.rows)
        budget_left = np.where(self.limit > 0, 1.0 - self.count / np.maximum(self.limit, 1), 1.0)
        out[:, features.config_size: features.config_size + N_SEARCH] = features.search_part(
            self.last_s, self.best_s, self.start_s, budget_left, np.isnan(self.last_s))
        measured_end = features.config_size + N_SEARCH + self.n_actions
        moves = self._moves()
        out[:, features.config_size + N_SEARCH: measured_end] = self.measured_neighbours(self.neighbour_indices(moves))
        if features.moves:
            _, dim, _, new_row = moves
            env, action = np.nonzero(new_row >= 0)
            rows = self.rows[env]
            rows[np.arange(env.size), dim[env, action]] = new_row[env, action]
            out[:, measured_end:] = features.move_part(n, env, action, self.task[env], rows)
        return out

    def _moves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(N, n_actions)`` each: every action of every sub-environment as its entry in the move tables, the
        dimension it moves, its row there now and the row it moves to (-1 where the action is illegal, padding
        included)."""
        n, A = self.num_envs, self.n_actions
        ta = np.broadcast_to(np.arange(A), (n, A)) if self._single else self.task[:, None] * A + np.arange(A)[None, :]
        dim = self._action_dim[ta]
        old_row = np.take_along_axis(self.rows, dim, axis=1)
        new_row = self._flat_next[self._action_base[ta] + old_row * self._action_width[ta]]
        return ta, dim, old_row, new_row

    def neighbour_indices(self, moves: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
        """``(N, n_actions)`` int64: the dense index (in its task's space) of the config each action leads each
        sub-environment to; -1 where the action is illegal (padding included). ``moves``: :meth:`_moves`' now."""
        ta, _, old_row, new_row = self._moves() if moves is None else moves
        return np.where(new_row >= 0, self.index[:, None] + (new_row - old_row) * self._action_stride[ta], -1)

    def measured_neighbours(self, nxt: np.ndarray | None = None) -> np.ndarray:
        """``(N, n_actions)`` bool: the legal moves that lead to a config this sub-environment's session measured
        (``nxt``: :meth:`neighbour_indices`' now)."""
        nxt = self.neighbour_indices() if nxt is None else nxt
        out = np.zeros(nxt.shape, dtype=bool)
        env, action = np.nonzero(nxt >= 0)
        if env.size:
            indices = nxt[env, action]
            keys = indices if self._single else self._offset[self.task[env]] + indices
            out[env, action] = self._seen.find(env, keys)[1]
        return out

    def action_masks(self) -> np.ndarray:
        """``(N, n_actions)`` bool: the legal actions of every sub-environment (padding never legal)."""
        rows, table = self.rows, self._words
        if self._single:
            first = self._first_words
            words = first[0][rows[:, 0]]
            for x in range(1, len(first)):
                words |= first[x][rows[:, x]]
        else:
            base = self._word_base[self.task]
            words = table[base[:, 0] + rows[:, 0]]
            for x in range(1, rows.shape[1]):
                words |= table[base[:, x] + rows[:, x]]
        bytes_ = words.astype("<u8", copy=False).view(np.uint8).reshape(self.num_envs, -1)
        return np.unpackbits(bytes_, axis=1, count=self.n_actions, bitorder="little").view(np.bool_)

    def budget_exhausted(self) -> np.ndarray:
        if not self._limited:
            return np.zeros(self.num_envs, dtype=bool)
        return (self.limit >= 0) & (self.count >= self.limit)

    def check_actions(self, actions: object) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), one per environment, got shape {array.shape}")
        if array.dtype != np.int64 and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"actions must be integers in [0, {self.n_actions}), got dtype {array.dtype}")
        checked = array.astype(np.int64, copy=False)
        if (checked.view(np.uint64) >= self.n_actions).any():  # a negative action is a huge unsigned one
            bad = array[(array < 0) | (array >= self.n_actions)][0]
            raise ValueError(f"action {bad} is out of range [0, {self.n_actions})")
        return checked


