"""The native vector environment of ``Schedule-v0``: N schedule episodes (tile sizes and loop order) as arrays.

:class:`ScheduleEpisodes` is the episode core of :class:`~schedule_gym.envs.core.VectorEpisodes` for a state
with a loop order: rows of the tile factor tables and an ``(N, L)`` array of loops (each a slot of the order
space's canonical loop list), stepped with the same tables for tile moves and an array swap for order moves.
What differs from the tile-only core is where latencies come from: a schedule is a config of
``task.with_order(order)``, so each distinct order of a step is scored as its own batch
(:meth:`~schedule_gym.backends.LatencyBackend.bulk_latency_s`, noise-free: the mock; the model is elementwise,
so a config's latency does not depend on its batch) and kept per order; sessions hold schedule indices,
which exceed 64 bits for a convolution, in one Python set per sub-environment.

Every sub-environment behaves exactly as a :class:`~schedule_gym.envs.ScheduleEnv` in ``TimeLimit`` (tested
step by step against ``SyncVectorEnv``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.core import VectorSessions
from schedule_gym.envs.episode import resolve_task
from schedule_gym.envs.observations import ObservationTables
from schedule_gym.envs.options import FEATURE_OBSERVATIONS, EnvOptions
from schedule_gym.envs.resolve import checked_space, reward_scale
from schedule_gym.envs.vector_env import EpisodesVectorEnv
from schedule_gym.registration import MAX_EPISODE_STEPS
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Schedule, ScheduleSpace
from schedule_gym.tasks import Task

__all__ = ["ScheduleEpisodes", "ScheduleVectorEnv"]


class ScheduleEpisodes(VectorSessions):
    """N schedule sub-environments of one task (see the module docstring); the interface of
    :class:`~schedule_gym.envs.core.VectorEpisodes` that the vector shells use."""

    def __init__(self, num_envs: int, task: Task, backend: LatencyBackend, options: EnvOptions,
                 max_episode_steps: int | None) -> None:
        if not backend.scores_in_bulk:
            backend.latency_table(task, checked_space(task))  # raises the way out
        if options.observation in FEATURE_OBSERVATIONS:
            raise ValueError(f"the schedule environments observe observation='fraction' or 'log2', got {options.observation!r}")
        self.num_envs = n = int(num_envs)
        self.task, self.backend, self.options, self.reward = task, backend, options, options.reward
        self.max_episode_steps = max_episode_steps
        self.session_per_episode = options.episode == "session"
        self.space = ScheduleSpace(task, checked_space(task))
        tiles, orders = self.space.tiles, self.space.orders
        budget = MeasureSession(task, backend, self.space)
        budget.set_budget(options.budget_measurements, options.budget_fraction, None)
        self.max_measurements = budget.max_measurements
        self._limit = -1 if budget.max_measurements is None else budget.max_measurements
        self._scale = reward_scale(options, backend, tiles)
        self.n_tile = tiles.n_actions
        self.n_actions = self.space.n_actions
        self.tables = ObservationTables(tiles, options.observation, options.include_shape)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(self.tables.size + orders.n_loops,), dtype=np.float32)
        widths = [len(d.actions) for d in tiles.dims]
        starts = np.cumsum([0] + [d.size * w for d, w in zip(tiles.dims, widths)])[:-1]
        self._flat_next = np.concatenate([d.next_row.ravel() for d in tiles.dims])
        self._dim = np.array([x for x, _ in tiles.action_dim], dtype=np.int64)
        self._base = starts[self._dim] + np.array([local for _, local in tiles.action_dim], dtype=np.int64)
        self._width = np.array(widths, dtype=np.int64)[self._dim]
        self._tile_masks = [d.masks for d in tiles.dims]
        self._strides = np.array(tiles.strides, dtype=np.int64)
        self._loops = orders.loops  # slot -> (dimension, level)
        self._slot_dim = np.array([tiles.task.dim_names.index(d) for d, _ in self._loops], dtype=np.int64)
        self._slot = {loop: i for i, loop in enumerate(self._loops)}
        self._scale_position = 1.0 / max(1, orders.n_loops - 1)
        s0 = self.space.initial_config()
        self._s0_rows = np.array(tiles.rows(s0.tiles), dtype=np.int64)
        self._s0_order = np.array([self._slot[loop] for loop in s0.order], dtype=np.int64)
        self._s0_index = self.space.index(s0)
        self._latency_of: dict[int, dict[int, float]] = {}  # order rank -> tile index -> latency (NaN: failed)
        self.task_ids = np.zeros(n, dtype=np.int64)
        self.rows = np.tile(self._s0_rows, (n, 1))
        self.order = np.tile(self._s0_order, (n, 1))
        self.index = [self._s0_index] * n
        self.steps = np.zeros(n, dtype=np.int64)
        self.last_s = np.full(n, np.nan)
        self.prev_s = np.full(n, np.nan)
        self.init_sessions(n, options.fixed_ref_latency_s, best_index_dtype=object)  # indices past int64
        self.done = np.zeros(n, dtype=bool)
        self._seen: list[set[int]] = [set() for _ in range(n)]
        self.all = np.arange(n, dtype=np.int64)

    # ----------------------------------------------------------------------------- sessions
    def forget_seen(self, envs: np.ndarray) -> None:
        for e in envs.tolist():
            self._seen[e] = set()

    def _order_of(self, env: int) -> tuple[tuple[str, int], ...]:
        return tuple(self._loops[s] for s in self.order[env].tolist())

    def _latencies(self, envs: list[int], ranks: list[int], tile_indices: list[int]) -> np.ndarray:
        """Latencies of the schedules (order rank, tile index) of ``envs``, each order's misses scored as a batch."""
        out = np.empty(len(envs))
        by_rank: dict[int, list[int]] = {}
        for position, rank in enumerate(ranks):
            by_rank.setdefault(rank, []).append(position)
        for rank, positions in by_rank.items():
            known = self._latency_of.setdefault(rank, {})
            missing = sorted({tile_indices[p] for p in positions if tile_indices[p] not in known})
            if missing:
                task = self.task.with_order(self._order_of(envs[positions[0]]))
                scored = self.backend.bulk_latency_s(task, np.array(missing, dtype=np.int64))
                known.update(zip(missing, scored.tolist()))
            for p in positions:
                out[p] = known[tile_indices[p]]
        return out

    def visit(self, envs: np.ndarray, indices: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`VectorEpisodes.visit <schedule_gym.envs.core.VectorEpisodes.visit>`, for schedule indices."""
        size = self.space.orders.size
        env_list = envs.tolist()
        known = np.array([i in self._seen[e] for e, i in zip(env_list, indices)], dtype=bool)
        admitted = ~known
        if self._limit >= 0:
            admitted &= self.count[envs] < self._limit
        ok = known | admitted
        latency_s = np.full(envs.size, np.nan)
        at = np.flatnonzero(ok)
        if at.size:
            tiles_of = [divmod(indices[p], size) for p in at.tolist()]
            latency_s[at] = self._latencies([env_list[p] for p in at.tolist()], [r for _, r in tiles_of],
                                            [t for t, _ in tiles_of])
        for p in np.flatnonzero(admitted).tolist():
            e = env_list[p]
            self._seen[e].add(indices[p])
            self.count[e] += 1
            if latency_s[p] < self.best_s[e]:
                self.best_s[e] = latency_s[p]
                self.best_index[e] = indices[p]
        return ok, admitted, latency_s

    def _index(self, env: int) -> int:
        tiles = int(self.rows[env] @ self._strides)
        return tiles * self.space.orders.size + self.space.orders.rank(self._order_of(env))

    # ------------------------------------------------------------------------------- resets
    def reset(self, envs: np.ndarray, start: object = None, config: object = None, task: object = None) -> np.ndarray:
        if task is not None:
            raise ValueError("unknown reset options ['task']; known: ['config', 'start']")
        start = self.options.start if start is None else start
        for e in envs.tolist():
            if config is not None:
                s = (self.space.config(int(config)) if isinstance(config, (int, np.integer)) and not isinstance(config, bool)
                     else self.space.validate(config))
            elif start == "random":
                s = self.space.sample(self._rng(e))
            else:
                s = self.space.initial_config()
            self.rows[e] = self.space.tiles.rows(s.tiles)
            self.order[e] = [self._slot[loop] for loop in s.order]
            self.index[e] = self.space.index(s)
        if self.session_per_episode:
            self.new_sessions(envs)
        if self.reward.needs_reference:
            need = envs[np.isnan(self.ref_s[envs])]
            if need.size:
                ok, _, latency_s = self.visit(need, [self._s0_index] * need.size)
                self.ref_s[need] = np.where(ok, latency_s, np.nan)
        ok, _, latency_s = self.visit(envs, [self.index[e] for e in envs.tolist()])
        self.last_s[envs] = latency_s
        self.prev_s[envs] = latency_s
        self.steps[envs] = 0
        self.done[envs] = False
        return ok

    # -------------------------------------------------------------------------------- steps
    def step(self, envs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, truncated: np.ndarray,
             legal_out: np.ndarray, new_out: np.ndarray) -> None:
        options = self.options
        self.steps[envs] += 1
        legal = np.zeros(envs.size, dtype=bool)
        tile = actions < self.n_tile
        if tile.any():
            at = np.flatnonzero(tile)
            a = actions[at]
            dim = self._dim[a]
            old = self.rows[envs[at], dim]
            new = self._flat_next[self._base[a] + old * self._width[a]]
            legal[at] = new >= 0
        if (~tile).any():
            at = np.flatnonzero(~tile)
            p = actions[at] - self.n_tile
            slots = self.order[envs[at]]
            rows_at = np.arange(at.size)
            legal[at] = self._slot_dim[slots[rows_at, p]] != self._slot_dim[slots[rows_at, p + 1]]
        legal_out[envs] = legal
        rewards[envs[~legal]] = options.illegal_action_penalty
        movers = np.flatnonzero(legal)
        if movers.size:
            env_ids = envs[movers]
            old_rows, old_orders = self.rows[env_ids].copy(), self.order[env_ids].copy()
            for m, e in zip(movers.tolist(), env_ids.tolist()):  # the move, then the schedule's index
                a = int(actions[m])
                if a < self.n_tile:
                    x = self._dim[a]
                    self.rows[e, x] = self._flat_next[self._base[a] + self.rows[e, x] * self._width[a]]
                else:
                    p = a - self.n_tile
                    self.order[e, p], self.order[e, p + 1] = self.order[e, p + 1], self.order[e, p]
            indices = [self._index(e) for e in env_ids.tolist()]
            best_before = self.best_s[env_ids] if self.reward.uses_best else None
            ok, admitted, latency_s = self.visit(env_ids, indices)
            new_out[env_ids] = admitted
            refused = ~ok
            if refused.any():  # the budget refused a new schedule: stay, reward 0
                self.rows[env_ids[refused]] = old_rows[refused]
                self.order[env_ids[refused]] = old_orders[refused]
                truncated[env_ids[refused]] = True
            moved = env_ids[ok]
            latency_s = latency_s[ok]
            for e, i in zip(moved.tolist(), [i for i, good in zip(indices, ok.tolist()) if good]):
                self.index[e] = i
            self.last_s[moved] = latency_s
            failed = np.isnan(latency_s)
            with np.errstate(invalid="ignore", divide="ignore"):
                reward = self.reward.of_arrays(latency_s, self.prev_s[moved], self.ref_s[moved],
                                               None if best_before is None else best_before[ok], self.best_s[moved],
                                               admitted[ok])
                if self._scale != 1.0:
                    reward = reward / self._scale
            rewards[moved] = np.where(failed, options.failure_penalty, reward)
            self.prev_s[moved[~failed]] = latency_s[~failed]
        if self._limit >= 0:
            truncated[envs] |= self.count[envs] >= self._limit
        if self.max_episode_steps is not None:
            truncated[envs] |= self.steps[envs] >= self.max_episode_steps

    # ---------------------------------------------------------------------------- observing
    def observe(self) -> np.ndarray:
        n = self.num_envs
        out = np.empty((n, self.observation_space.shape[0]), dtype=np.float32)
        tables = self.tables
        for e in range(n):
            out[e, : tables.size] = tables.of_rows(self.rows[e].tolist())
        positions = np.empty(self.order.shape, dtype=np.float64)
        np.put_along_axis(positions, self.order, np.arange(self.order.shape[1], dtype=np.float64)[None, :]
                          * self._scale_position, axis=1)
        out[:, tables.size:] = positions
        return out

    def action_masks(self) -> np.ndarray:
        rows = self.rows
        tile = np.concatenate([m[rows[:, x]] for x, m in enumerate(self._tile_masks)], axis=1)
        dims = self._slot_dim[self.order]
        return np.concatenate([tile, dims[:, :-1] != dims[:, 1:]], axis=1)

    def budget_exhausted(self) -> np.ndarray:
        return (self._limit >= 0) & (self.count >= self._limit)

    def check_actions(self, actions: object) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), one per environment, got shape {array.shape}")
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"actions must be integers in [0, {self.n_actions}), got dtype {array.dtype}")
        bad = (array < 0) | (array >= self.n_actions)
        if bad.any():
            raise ValueError(f"action {array[bad][0]} is out of range [0, {self.n_actions})")
        return array.astype(np.int64, copy=False)


class ScheduleVectorEnv(EpisodesVectorEnv):
    """``num_envs`` copies of :class:`~schedule_gym.envs.ScheduleEnv` on one task, stepped as arrays
    (``Schedule-v0``'s ``vector_entry_point``; see the module docstring).

    ## Info
    ``TilingVectorEnv``'s, with ``index`` and ``best_index`` the schedules' dense indices (Python ints: a
    convolution's schedule space exceeds 64 bits), as an object array.

    ## Arguments
    ``num_envs``, ``max_episode_steps``, ``autoreset_mode``, then those of ``ScheduleEnv`` except
    ``budget_seconds`` and ``render_mode``.

    >>> import gymnasium, schedule_gym
    >>> envs = gymnasium.make_vec("schedule_gym/Schedule-v0", num_envs=2, task="gemm-256")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, envs.action_masks().shape
    ((2, 20), (2, 35))
    """

    def __init__(self, num_envs: int = 1, task: Task | str = "gemm-1024", backend: str | LatencyBackend = "mock",
                 backend_options: dict[str, Any] | None = None, max_episode_steps: int | None = MAX_EPISODE_STEPS,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 options: EnvOptions | None = None, **values: Any) -> None:
        task = resolve_task(task)
        options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        self.task = task
        self._setup(num_envs, [task], backend, backend_options, options, None, max_episode_steps, autoreset_mode,
                    render_mode, draw_task=False,
                    core=lambda backend: ScheduleEpisodes(num_envs, task, backend, options, max_episode_steps))
        self.space = self.core.space

    def configs(self) -> list[Schedule]:
        """The current schedule of every sub-environment."""
        return [self.space.config(i) for i in self.core.index]
