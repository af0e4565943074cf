"""The native vector environment: N tiling environments of one task stepped with NumPy array operations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from schedule_gym.backends import LatencyBackend, make_backend
from schedule_gym.backends.base import VECTOR_WAY_OUT, LatencyTable
from schedule_gym.envs.common import RESET_OPTIONS, STARTS, ObservationTables, check_arguments, checked_space
from schedule_gym.registration import MAX_EPISODE_STEPS
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = [
    "MAX_DENSE_CONFIGS",
    "LatencyTable",
    "TilingVectorEnv",
    "latency_table",
]

#: Largest space whose latencies the vector environment keeps as one dense array (8 bytes a config).
MAX_DENSE_CONFIGS = 1 << 27


class _KeySets:
    """Per-environment sets of dense indices, kept as one open-addressing hash table (linear probing) of the keys
    ``env * size + index`` in a NumPy array: a batch of look-ups or insertions is a few array operations per
    probe round, with no Python object per key."""

    _EMPTY = -1
    _MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of key * 2**64 / phi
    _MIN_LOG2 = 12

    def __init__(self, size: int) -> None:
        self._size = size
        self._clear(self._MIN_LOG2)

    def _clear(self, log2: int) -> None:
        self._log2 = log2
        self._table = np.full(1 << log2, self._EMPTY, dtype=np.int64)
        self._wrap = (1 << log2) - 1
        self._shift = np.uint64(64 - log2)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.view(np.uint64) * self._MULTIPLIER) >> self._shift).view(np.int64)

    def keys(self) -> np.ndarray:
        return self._table[self._table != self._EMPTY]

    def clear(self) -> None:
        """Empty every set."""
        self._clear(self._MIN_LOG2)

    def drop(self, envs: np.ndarray) -> None:
        """Empty the sets of ``envs``."""
        keys = self.keys()
        keys = keys[~np.isin(keys // self._size, envs)]
        self._clear(self._MIN_LOG2)
        self.reserve(keys.size)
        self.insert(keys, self._home(keys))

    def find(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, found, slots)`` of distinct ``(env, index)`` pairs: whether each index is in its env's set,
        and the slot each probe ended at (where :meth:`insert` starts; stale after :meth:`reserve` grows)."""
        keys = envs * self._size + indices
        table, wrap = self._table, self._wrap
        slots = self._home(keys)
        values = table[slots]
        found = values == keys
        pending = np.flatnonzero(values != keys)
        pending = pending[values[pending] != self._EMPTY]
        while pending.size:
            at = (slots[pending] + 1) & wrap
            slots[pending] = at
            values = table[at]
            hit = values == keys[pending]
            found[pending[hit]] = True
            pending = pending[~hit & (values != self._EMPTY)]
        return keys, found, slots

    def reserve(self, n: int) -> bool:
        """Make room for ``n`` more keys (keeping the table at most half full); True if it grew (slots from
        :meth:`find` are then stale)."""
        if 2 * (self._count + n) <= len(self._table):
            return False
        keys = self.keys()
        log2 = self._log2
        while 2 * (self._count + n) > (1 << log2):
            log2 += 1
        self._clear(log2 + 1)  # a quarter full at most right after growing
        self.insert(keys, self._home(keys))
        return True

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Insert distinct keys that are in no set yet, probing from ``slots`` (their home or where :meth:`find`
        stopped); call :meth:`reserve` first."""
        table, wrap, empty = self._table, self._wrap, self._EMPTY
        self._count += keys.size
        while keys.size:
            pending = np.flatnonzero(table[slots] != empty)
            while pending.size:  # move every key on to the next empty slot
                at = (slots[pending] + 1) & wrap
                slots[pending] = at
                pending = pending[table[at] != empty]
            table[slots] = keys
            lost = table[slots] != keys  # keys that met at one empty slot: one took it, the others probe on
            if not lost.any():
                return
            keys, slots = keys[lost], slots[lost]


class _SmallKeySets:
    """:class:`_KeySets`' interface over one Python set of the keys: fewer array operations per batch, so faster
    for a few environments (each key costs a Python look-up, each batch none of the probe rounds)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> np.ndarray:
        return np.fromiter(self._keys, dtype=np.int64, count=len(self._keys))

    def clear(self) -> None:
        self._keys = set()

    def drop(self, envs: np.ndarray) -> None:
        size, dropped = self._size, set(envs.tolist())
        self._keys = {k for k in self._keys if k // size not in dropped}

    def find(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = envs * self._size + indices
        held = self._keys
        return keys, np.array([k in held for k in keys.tolist()], dtype=bool), keys

    def reserve(self, n: int) -> bool:
        return False

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self._keys.update(keys.tolist())


def latency_table(backend: LatencyBackend, task: Task, space: TileSpace) -> LatencyTable:
    """The backend's :class:`~schedule_gym.backends.LatencyTable` of ``task``, refused past ``MAX_DENSE_CONFIGS``."""
    if space.size > MAX_DENSE_CONFIGS:
        raise ValueError(
            f"task {task.name!r} has {space.size:,} configs, more than the {MAX_DENSE_CONFIGS:,} whose latencies the "
            f"vector environment keeps in one array; {VECTOR_WAY_OUT}"
        )
    return backend.latency_table(task, space)


class TilingVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` copies of :class:`~schedule_gym.envs.TilingEnv` on one task, stepped as arrays.

    Every sub-environment behaves exactly as a ``TilingEnv`` wrapped in ``TimeLimit(max_episode_steps)``
    with the same arguments: the same actions, observations, rewards (every reward mode, the illegal-action
    and failure penalties, the ``s0`` reference measured at the start of a session), starts (``"s0"``,
    ``"random"`` drawn from the sub-environment's own generator, seeded ``seed + i`` as in
    ``SyncVectorEnv``), budgets and sessions. The tests check trajectories against ``SyncVectorEnv`` of
    ``TilingEnv`` step by step.

    ## State and stepping
    The state is an ``(N, n_dims)`` array of rows in the per-dimension factorisation tables of the
    :class:`~schedule_gym.spaces.TileSpace`; a step looks the next rows up in the ``next_row`` tables (one
    flattened table, one fancy index), gathers observations from the tables ``TilingEnv`` uses
    (:class:`~schedule_gym.envs.common.ObservationTables`) and latencies from a :class:`LatencyTable`.

    ## Latencies
    Deterministic backends only: the noise-free mock (scored in the mock's own chunks, so latencies are
    bit-identical to ``MockBackend.measure``) and replay tables without a delegate (a dense array built
    once; a failed record is NaN and gives ``failure_penalty``; a censored record is rewarded at its bound
    as in ``TilingEnv``, is never a best, and cannot be ``s0``'s reference: ``MissingRecordError``). Because latencies are deterministic, one
    latency cache serves all sub-environments; each sub-environment keeps its own *session*: the set of
    unique configs it evaluated (what the budget counts and ``new_measurement`` reports), its best and its
    ``s0`` reference. ``budget_seconds`` is refused: wall time is spent by the batch, not by one
    sub-environment. Other backends (TVM, RPC, a noisy mock): use
    ``gymnasium.make_vec(id, num_envs=N, vectorization_mode="sync")``.

    ## Autoreset
    ``autoreset_mode`` is ``AutoresetMode.NEXT_STEP`` (default, Gymnasium's, as ``SyncVectorEnv``): the step
    after a sub-environment ends resets it, ignoring its action, and returns reward 0 and the reset
    observation and info. ``AutoresetMode.SAME_STEP``: a sub-environment that ends is reset in the same
    step; its final observation and info are ``info["final_obs"]`` (an ``(N, obs)`` array) and
    ``info["final_info"]`` (masked by ``info["_final_obs"]`` / ``info["_final_info"]``). An autoreset, like
    ``reset()`` without a seed, keeps the sub-environment's session (budget, best); ``reset(seed=...)``
    starts new sessions.

    ## Info
    Arrays over the sub-environments, each with its ``_key`` mask: ``index`` (the config's dense index;
    :meth:`configs` gives them as tuples), ``latency_s`` (NaN where ``TilingEnv`` gives ``None``), ``legal``,
    ``new_measurement``, ``best_latency_s`` (NaN: none yet), ``best_index`` (-1: none), ``num_measurements``,
    ``budget_exhausted`` and ``action_mask`` ((N, n_actions); also :meth:`action_masks`).

    ## Arguments
    ``num_envs``, ``max_episode_steps`` (``None``: no step limit) and ``autoreset_mode``, then those of
    ``TilingEnv`` except ``budget_seconds`` and ``render_mode``. ``reset`` takes ``seed`` (an int: ``seed + i``;
    a list: one per sub-environment) and ``options`` ``{"start", "config", "reset_mask"}``.

    >>> import gymnasium, schedule_gym
    >>> envs = gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=3, m=256, k=256, n=256)
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, envs.action_masks().shape
    ((3, 10), (3, 26))
    >>> obs, rewards, terminated, truncated, info = envs.step(np.array([23, 23, 0]))  # n: 2x[3] /2[0] twice, m: 2x[0] /2[1]
    >>> rewards.round(2).tolist(), info["legal"].tolist()
    ([1.98, 1.98, -1.0], [True, True, False])
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}
    #: from this many sub-environments on, sessions are kept in a NumPy hash table (:class:`_KeySets`), below it in
    #: a Python set: a batch costs the table a fixed number of array operations, the set one look-up per key
    HASH_TABLE_ENVS = 256

    def __init__(
        self,
        num_envs: int = 1,
        task: Task | str = "gemm-1024",
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        reward: str = "inverse",
        observation: str = "fraction",
        include_shape: bool = False,
        start: str = "s0",
        illegal_action_penalty: float = -1.0,
        failure_penalty: float = -1.0,
        budget_measurements: int | None = None,
        budget_fraction: float | None = None,
        budget_seconds: float | None = None,
        reward_ref_latency_s: float | None = None,
        max_episode_steps: int | None = MAX_EPISODE_STEPS,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)) or max_episode_steps < 1
        ):
            raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}")
        try:
            autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            autoreset_mode = None  # type: ignore[assignment]
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be AutoresetMode.NEXT_STEP or SAME_STEP, got {autoreset_mode!r}")
        if render_mode is not None:
            raise ValueError(f"the vector environment does not render; render_mode must be None, got {render_mode!r}")
        if budget_seconds is not None:
            raise ValueError(
                "budget_seconds is not supported by the vector environment (the batch spends wall time, not one "
                "sub-environment); use budget_measurements or budget_fraction"
            )
        task = check_arguments(task, reward, observation, include_shape, start, illegal_action_penalty,
                               failure_penalty, reward_ref_latency_s, backend_options)
        self.task = task
        self.space = space = checked_space(task)
        if space.size >= 2**62 // num_envs:
            raise ValueError(f"{num_envs} environments of a space of {space.size:,} configs overflow int64 indices")
        self._owns_backend = not isinstance(backend, LatencyBackend)
        self.backend = make_backend(backend, **(backend_options or {}))
        try:
            self.backend.check_task(task)
            self._latency_s = latency_table(self.backend, task, space)
            # the budget's checks and its count limit, from the one place that defines them
            budget = MeasureSession(task, self.backend, space)
            budget.set_budget(budget_measurements, budget_fraction, None)
        except BaseException:
            if self._owns_backend:
                self.backend.close()
            raise
        self.max_measurements: int | None = budget.max_measurements

        self.num_envs = int(num_envs)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.metadata = {**self.metadata, "autoreset_mode": autoreset_mode}
        self.autoreset_mode = autoreset_mode
        self.render_mode = None
        self.reward_mode = reward
        self.start = start
        self.illegal_action_penalty = float(illegal_action_penalty)
        self.failure_penalty = float(failure_penalty)
        self._fixed_ref_latency_s = np.nan if reward_ref_latency_s is None else float(reward_ref_latency_s)

        self._obs = ObservationTables(space, observation, include_shape)
        self.single_observation_space = self._obs.space
        self.single_action_space = gym.spaces.Discrete(space.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        # One flattened next-row table: action a in row r of its dimension -> flat[base[a] + r * width[a] + local[a]].
        widths = [len(d.actions) for d in space.dims]
        bases = np.cumsum([0] + [d.size * w for d, w in zip(space.dims, widths)])[:-1]
        self._flat_next = np.concatenate([d.next_row.ravel() for d in space.dims])
        dim_of = np.array([x for x, _ in space.action_dim], dtype=np.int64)
        self._action_dim = dim_of
        self._action_base = bases[dim_of] + np.array([la for _, la in space.action_dim], dtype=np.int64)
        self._action_width = np.array(widths, dtype=np.int64)[dim_of]
        self._action_stride = np.array(space.strides, dtype=np.int64)[dim_of]
        self._masks = [d.masks for d in space.dims]
        # Masks as bits: with at most 64 actions, bit a of mask_bits[x][r] says whether action a (of dimension x)
        # is legal in row r; an environment's mask is the OR over its dimensions, unpacked.
        self._mask_bits: list[np.ndarray] | None = None
        if space.n_actions <= 64:
            offsets = np.cumsum([0] + [m.shape[1] for m in self._masks])
            self._mask_bits = [
                np.bitwise_or.reduce(m.astype(np.uint64) << (np.arange(m.shape[1], dtype=np.uint64) + np.uint64(lo)),
                                     axis=1) if m.shape[1] else np.zeros(m.shape[0], dtype=np.uint64)
                for m, lo in zip(self._masks, offsets.tolist())
            ]
        self._strides = np.array(space.strides, dtype=np.int64)
        self._dim_sizes = np.array(space.dim_sizes, dtype=np.int64)
        self._s0_rows = np.array(space.rows(space.initial_config()), dtype=np.int64)
        self._s0_index = int(space.index_of_rows(self._s0_rows.tolist()))

        n = self.num_envs
        self._rows = np.tile(self._s0_rows, (n, 1))
        self._index = np.full(n, self._s0_index, dtype=np.int64)
        self._steps = np.zeros(n, dtype=np.int64)
        self._last_s = np.full(n, np.nan)  # latency of the current state's result (NaN: failed or none)
        self._prev_s = np.full(n, np.nan)  # last successful latency of the episode
        self._ref_s = np.full(n, self._fixed_ref_latency_s)
        self._count = np.zeros(n, dtype=np.int64)  # unique configs of each session
        self._best_s = np.full(n, np.inf)
        self._best_index = np.full(n, -1, dtype=np.int64)
        # every config each session evaluated
        self._seen = (_KeySets if n >= self.HASH_TABLE_ENVS else _SmallKeySets)(space.size)
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._done = np.zeros(n, dtype=bool)
        self._all = np.arange(n, dtype=np.int64)
        self._needs_reset = True

    # ------------------------------------------------------------------------------ sessions
    def _new_sessions(self, envs: np.ndarray) -> None:
        self._ref_s[envs] = self._fixed_ref_latency_s
        self._count[envs] = 0
        self._best_s[envs] = np.inf
        self._best_index[envs] = -1
        if envs.size == self.num_envs:
            self._seen.clear()
        elif envs.size:
            self._seen.drop(envs)

    def _visit(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Evaluate one config per sub-environment (``envs`` distinct) as ``MeasureSession.measure_indices``:
        ``(has_result, admitted, latency_s)``; ``has_result`` is False where the budget refused a new config."""
        seen = self._seen
        seen.reserve(envs.size)
        keys, known, slots = seen.find(envs, indices)
        admitted = ~known
        if self.max_measurements is None:
            ok = np.ones(envs.size, dtype=bool)
            latency_s = self._latency_s(indices)
        else:
            admitted &= self._count[envs] < self.max_measurements
            ok = known | admitted
            latency_s = np.full(envs.size, np.nan)
            if ok.any():
                latency_s[ok] = self._latency_s(indices[ok])
        if admitted.any():
            new_envs = envs[admitted]
            self._count[new_envs] += 1
            seen.insert(keys[admitted], slots[admitted])
            lat = latency_s[admitted]
            better = lat < self._best_s[new_envs]  # NaN (failed) is never better
            censored = self._latency_s.censored
            if censored is not None:  # a censored record (its latency is a bound) is never a best
                better &= ~censored[indices[admitted]]
            if better.any():
                self._best_s[new_envs[better]] = lat[better]
                self._best_index[new_envs[better]] = indices[admitted][better]
        return ok, admitted, latency_s

    def _rng(self, env: int) -> np.random.Generator:
        rng = self._rngs[env]
        if rng is None:
            rng = self._rngs[env] = seeding.np_random()[0]
        return rng

    def _reset_envs(self, envs: np.ndarray, start: object = None, config: object = None) -> np.ndarray:
        """Reset the sub-environments ``envs`` as ``TilingEnv.reset`` does; returns ``new_measurement``."""
        start = self.start if start is None else start
        if config is not None:
            self._rows[envs] = self.space.rows(self.space.config(config) if isinstance(config, (int, np.integer))
                                               and not isinstance(config, bool) else self.space.validate(config))
        elif start == "random":
            size = self.space.size
            drawn = np.array([int(self._rng(e).integers(size)) for e in envs.tolist()], dtype=np.int64)
            self._rows[envs] = (drawn[:, None] // self._strides) % self._dim_sizes
        else:
            self._rows[envs] = self._s0_rows
        self._index[envs] = self._rows[envs] @ self._strides
        if self.reward_mode != "log_speedup_prev":
            need = envs[np.isnan(self._ref_s[envs])]
            if need.size:
                self._latency_s.require_exact(self._s0_index)  # s0's latency is the unit of rewards (as in TilingEnv)
                ok, _, latency_s = self._visit(need, np.full(need.size, self._s0_index, dtype=np.int64))
                self._ref_s[need] = np.where(ok, latency_s, np.nan)
        ok, _, latency_s = self._visit(envs, self._index[envs])
        self._last_s[envs] = latency_s
        self._prev_s[envs] = latency_s
        self._steps[envs] = 0
        self._done[envs] = False
        return ok

    # -------------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        n = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            super().reset(seed=None if seed is None else int(seed))
            seeds: list[int | None] = [None] * n if seed is None else [int(seed) + i for i in range(n)]
        elif isinstance(seed, Sequence) and not isinstance(seed, str):
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed as a list needs one seed per environment ({n}), got {len(seeds)}")
        else:
            raise TypeError(f"seed must be an int, a list of {n} ints or None, or None, got {seed!r}")
        options = dict(options or {})
        if not isinstance(options, dict):
            raise TypeError(f"reset options must be a dict, got {options!r}")
        mask = options.pop("reset_mask", None)
        unknown = set(options) - RESET_OPTIONS
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; known: {sorted(RESET_OPTIONS | {'reset_mask'})}")
        start = options.get("start")
        if start is not None and start not in STARTS:
            raise ValueError(f"reset option start must be one of {STARTS}, got {start!r}")
        if mask is None:
            envs = self._all
        else:
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({n},), got {mask!r}")
            if self._needs_reset and not mask.all():
                raise RuntimeError("the first reset() must reset every environment (no reset_mask or an all-True one)")
            envs = np.flatnonzero(mask)
        seeded = [e for e in envs.tolist() if seeds[e] is not None]
        for e in seeded:
            self._rngs[e] = seeding.np_random(seeds[e])[0]
        self._new_sessions(np.array(seeded, dtype=np.int64))
        new = np.zeros(n, dtype=bool)
        new[envs] = self._reset_envs(envs, start, options.get("config"))
        self._needs_reset = False
        in_reset = np.zeros(n, dtype=bool)
        in_reset[envs] = True
        return self._obs.of_row_array(self._rows), self._info(np.ones(n, dtype=bool), new, in_reset)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        actions = self._check_actions(actions)
        n = self.num_envs
        rewards = np.zeros(n)
        truncated = np.zeros(n, dtype=bool)
        legal = np.ones(n, dtype=bool)
        new = np.zeros(n, dtype=bool)
        if self._done.any():  # NEXT_STEP: these reset now and ignore their action
            resetting = self._done.copy()
            envs = np.flatnonzero(resetting)
            new[envs] = self._reset_envs(envs)
            active = np.flatnonzero(~resetting)
        else:
            active = self._all
        if active.size:
            self._step_envs(active, actions[active], rewards, truncated, legal, new)
        terminated = np.zeros(n, dtype=bool)
        info = self._info(legal, new)
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            ended = truncated | terminated
            if ended.any():
                envs = np.flatnonzero(ended)
                info["final_obs"] = self._obs.of_row_array(self._rows)
                info["_final_obs"] = ended
                info["final_info"] = {k: v for k, v in info.items() if k != "final_obs" and k != "_final_obs"}
                info["_final_info"] = ended
                legal_now, new_now = legal.copy(), new.copy()
                legal_now[envs] = True
                new_now[envs] = self._reset_envs(envs)
                reset_info = self._info(legal_now, new_now)
                for key in reset_info:
                    info[key] = reset_info[key]
        else:
            self._done = truncated | terminated
        return self._obs.of_row_array(self._rows), rewards, terminated, truncated, info

    def _step_envs(self, envs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, truncated: np.ndarray,
                   legal_out: np.ndarray, new_out: np.ndarray) -> None:
        each = slice(None) if envs is self._all else envs  # a slice where every environment steps (no copies)
        self._steps[each] += 1
        dim = self._action_dim[actions]
        old_row = self._rows[envs, dim]
        new_row = self._flat_next[self._action_base[actions] + old_row * self._action_width[actions]]
        legal = new_row >= 0
        legal_out[each] = legal
        if legal.all():
            movers = envs
        else:
            rewards[envs[~legal]] = self.illegal_action_penalty
            movers, actions, dim, old_row, new_row = envs[legal], actions[legal], dim[legal], old_row[legal], new_row[legal]
        if movers.size:
            indices = self._index[movers] + (new_row - old_row) * self._action_stride[actions]
            ok, admitted, latency_s = self._visit(movers, indices)
            new_out[movers] = admitted
            if ok.all():
                moved = movers
            else:
                truncated[movers[~ok]] = True  # the budget refused a new config: stay, reward 0
                moved, dim, new_row, indices, latency_s = movers[ok], dim[ok], new_row[ok], indices[ok], latency_s[ok]
            self._rows[moved, dim] = new_row
            self._index[moved] = indices
            self._last_s[moved] = latency_s
            with np.errstate(invalid="ignore", divide="ignore"):
                if self.reward_mode == "log_speedup_prev":
                    prev = self._prev_s[moved]
                    reward = np.where(np.isnan(prev), 0.0, np.log(prev / latency_s))
                else:
                    ref = self._ref_s[moved]
                    reward = np.where(np.isnan(ref), latency_s, ref) / latency_s
                    if self.reward_mode == "log_speedup_s0":
                        reward = np.log(reward)
            failed = np.isnan(latency_s)
            if failed.any():
                rewards[moved] = np.where(failed, self.failure_penalty, reward)
                self._prev_s[moved[~failed]] = latency_s[~failed]
            else:
                rewards[moved] = reward
                self._prev_s[moved] = latency_s
        if self.max_measurements is not None:
            truncated[each] |= self._count[each] >= self.max_measurements
        if self.max_episode_steps is not None:
            truncated[each] |= self._steps[each] >= self.max_episode_steps

    def _check_actions(self, actions: object) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), one per environment, got shape {array.shape}")
        if array.dtype != np.int64 and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"actions must be integers in [0, {self.space.n_actions}), got dtype {array.dtype}")
        checked = array.astype(np.int64, copy=False)
        if (checked.view(np.uint64) >= self.space.n_actions).any():  # a negative action is a huge unsigned one
            bad = array[(array < 0) | (array >= self.space.n_actions)][0]
            raise ValueError(f"action {bad} is out of range [0, {self.space.n_actions})")
        return checked

    def action_masks(self) -> np.ndarray:
        """``(N, n_actions)`` bool: the legal actions of every sub-environment (for MaskablePPO)."""
        rows = self._rows
        if self._mask_bits is None:
            return np.concatenate([m[rows[:, x]] for x, m in enumerate(self._masks)], axis=1)
        bits = self._mask_bits[0][rows[:, 0]]
        for x in range(1, len(self._mask_bits)):
            bits |= self._mask_bits[x][rows[:, x]]
        bytes_ = bits.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
        return np.unpackbits(bytes_, axis=1, count=self.space.n_actions, bitorder="little").view(np.bool_)

    def _info(self, legal: np.ndarray, new: np.ndarray, present: np.ndarray | None = None) -> dict[str, Any]:
        has_best = self._best_index >= 0
        info: dict[str, Any] = {
            "index": self._index.copy(),
            "latency_s": self._last_s.copy(),
            "legal": legal,
            "new_measurement": new,
            "best_latency_s": np.where(has_best, self._best_s, np.nan),
            "best_index": self._best_index.copy(),
            "num_measurements": self._count.copy(),
            "budget_exhausted": (self._count >= self.max_measurements) if self.max_measurements is not None
            else np.zeros(self.num_envs, dtype=bool),
            "action_mask": self.action_masks(),
        }
        mask = np.ones(self.num_envs, dtype=bool) if present is None else present
        for key in list(info):
            info["_" + key] = mask
        return info

    # ------------------------------------------------------------------------------ helpers
    def configs(self) -> list[Config]:
        """The current config of every sub-environment."""
        return [self.space.config_of_rows(r) for r in self._rows.tolist()]

    @property
    def num_measurements(self) -> np.ndarray:
        """Unique configs each sub-environment's session evaluated (what its budget counts)."""
        return self._count.copy()

    def close_extras(self, **kwargs: Any) -> None:
        if self._owns_backend:
            self.backend.close()
