"""The tiling environment: tune a tensor operator's tile sizes with doubling/halving moves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.resolve import checked_space, start_rows
from schedule_gym.envs.episode import SingleEpisode, resolve_task
from schedule_gym.envs.features import FeatureTables, machine_profile
from schedule_gym.envs.observations import ObservationTables, TaskLayout
from schedule_gym.envs.options import FEATURE_OBSERVATIONS, EnvOptions, check_action
from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

__all__ = ["TilingEnv"]


class TilingEnv(SingleEpisode):
    """Tile-size tuning of a tensor operator as a Markov decision process (Zhang et al., Section 4.1).

    ## Description
    A task (GEMM ``C[m,n] = sum_k A[m,k] * B[k,n]`` first) is a loop nest whose dimensions are each split
    into a fixed number of nested loops (``d_m, d_k, d_n``; default 4/2/4). The state is the *config*:
    the factor of every loop, e.g. ``((64, 4, 1, 4), (256, 4), (16, 2, 2, 16))`` for 1024^3. Moves shift
    a factor of two (or, for extents that are not powers of two, one prime) from one loop of a dimension
    to another. Each new config is measured by a *latency backend* — the analytic ``"mock"`` CPU model,
    real TVM-compiled kernels, or recorded measurements — and the reward rewards lower latency.

    ## Action Space
    ``Discrete(n)``: for every dimension ``x``, every prime ``p`` of its extent and every ordered pair of
    loop positions ``i != j``, the action ``x: px[i] /p[j]`` sets ``s_x[i] *= p`` and ``s_x[j] /= p``
    (the paper's Eq. 6 when ``p = 2``). For GEMM 4/2/4 on powers of two, ``n = 26``:

    | actions  | dimension | moves                                        |
    |----------|-----------|----------------------------------------------|
    | 0 - 11   | m         | ``m: 2x[i] /2[j]``, i != j in 0..3            |
    | 12 - 13  | k         | ``k: 2x[0] /2[1]``, ``k: 2x[1] /2[0]``        |
    | 14 - 25  | n         | ``n: 2x[i] /2[j]``, i != j in 0..3            |

    An action is *illegal* where ``s_x[j]`` is not divisible by ``p``. :meth:`action_masks` (the method
    sb3-contrib's ``MaskablePPO`` calls) and ``info["action_mask"]`` give the legal ones. Taking an illegal
    action anyway leaves the state unchanged, measures nothing, gives ``illegal_action_penalty`` and sets
    ``info["legal"] = False``.

    ## Observation Space
    ``Box(0, 1, (sum_x d_x [+ number of dimensions],), float32)``, one entry per loop factor:

    * ``observation="fraction"`` (default): ``log(s_x[i]) / log(extent_x)``; each dimension's entries sum
      to 1 (all zero for an extent of 1);
    * ``observation="log2"``: ``log2(s_x[i]) / 24``, absolute tile sizes (extents up to 2**24).

    With ``include_shape=True`` the vector ends with ``log2(extent_x) / 24`` per dimension, so one policy
    can be trained across shapes.

    * ``observation="features"``: what the tiled nest does on the machine and where the search is, in one
      layout for every operator (:mod:`schedule_gym.envs.features`): the multi-task factor layout, the
      operator's parameters (stride, dilation, groups, kernel...), nest features (parallel extent and
      balance, vector-lane fill, unrolling, registers, per cache level where the tile fits and its
      footprint, arithmetic intensity), the search state (current and best latency against the episode's
      start, budget left, a failed current config) and, per action, whether it leads to a config this
      session has measured. ``layout=`` (a :class:`~schedule_gym.envs.TaskLayout`) fixes the layout across
      tasks. The same numbers in the vector and multi-task environments.
    * ``observation="move_features"``: ``"features"`` followed, per action, by the nest features of the config
      the move leads to (0 for an illegal move): what a policy that scores each move by its destination reads
      (:class:`~schedule_gym.baselines.networks.MoveScorer`).

    ## Rewards
    With ``cost`` the measured latency of the new config and ``ref`` that of the paper's ``s0`` (measured
    at the start of a session, or given as ``reward_ref_latency_s``):

    * ``"inverse"`` (default, the paper's Eq. 8 with ``ref`` as the unit): ``ref / cost``, the speed-up
      over ``s0``. It is 1 at ``s0`` and not of order one elsewhere: ``s0`` (one loop per dimension, no
      parallelism or vectorisation) is slow, so typical configs score around ten and the best ones
      the whole speed-up over ``s0`` (about 100 at 512^3 on the mock, growing with the shape).
      Normalise it, or use a log reward, where an algorithm needs rewards of order one;
    * ``"log_speedup_prev"``: ``log(cost_prev / cost)``, the log speed-up over the previous state (its sum
      over an episode telescopes to the log speed-up over the start);
    * ``"log_speedup_s0"``: ``log(ref / cost)``;
    * ``"best_improvement"`` (``"best_improvement:c"``): ``log(best_before / best_after) - c * new``, the
      improvement of the session's best with an optional price ``c`` per new measurement (what a tuner
      under a measurement budget is scored on; pair it with ``episode="session"``).

    Rewards are objects (:mod:`schedule_gym.envs.rewards`; ``reward=`` takes a name or a
    :class:`~schedule_gym.envs.rewards.RewardSpace`), shared with the vector environments.

    A config whose measurement fails (build error, crash, timeout, wrong result) gives ``failure_penalty``
    (default -1); the agent still moves there and ``info["error"]`` says what failed. ``cost_prev`` is the
    latency of the last successfully measured state of the episode.

    A **censored** measurement (a real backend stopped a kernel that ran past its censor bound, e.g.
    ``max(5 x best so far, 0.05 s)`` by default: ``info["censored"]``) is rewarded with the bound as ``cost``: the
    reward it would get if it were exactly that slow, the most it can deserve; it becomes ``cost_prev``
    as such. ``ref`` (``s0``'s latency) is always an exact measurement: if ``s0``'s result is censored
    it is measured again in full (``session.measure(..., exact=True)``).

    ## Starting State
    ``start="s0"`` (default): the paper's ``s0 = [[m,1,1,1],[k,1],[n,1,1,1]]``; ``start="random"``: a config
    drawn uniformly with ``self.np_random``. ``reset(options={"config": c})`` starts from config ``c`` (a
    nested tuple or a dense index) and ``options={"start": ...}`` overrides ``start`` for one episode; this is
    how search agents evaluate arbitrary configs through the environment. The start config is measured.

    ## Episode End
    Episodes never terminate. They are truncated by the registered step limit (``max_episode_steps``) and
    when the session's measurement budget is spent: ``budget_measurements`` unique configs,
    ``budget_fraction`` of the space, or ``budget_seconds`` of measurement wall time. Once the budget is
    spent, a step that would need a new measurement leaves the state unchanged, gives reward 0 and returns
    ``truncated=True`` with ``info["budget_exhausted"] = True``; configs already measured stay free.

    A *session* (the budget, the best-so-far and the count of unique configs) starts when the environment
    is created and anew at every ``reset`` with a ``seed``; with ``episode="session"`` every episode is
    one session (each ``reset`` starts one; a budget is required and truncates the episode when spent). A config is measured at most once per
    environment: a revisit within a session is free (no measurement, no budget); in a later session the
    cached result is reused without measuring again and counts once towards that session's budget.

    ## Info
    ``config``, ``latency_s`` (None if failed), ``gflops``, ``error`` and ``error_kind`` (see
    :data:`~schedule_gym.backends.ERROR_KINDS`), ``coarse`` (the latency is one unrepeated run of a slow
    config), ``censored`` (the kernel was stopped: ``latency_s`` is a lower bound, ``gflops`` an upper
    one), ``legal``, ``new_measurement``
    (the config is new to this session), ``best_latency_s``, ``best_gflops``, ``best_config``,
    ``num_measurements`` (unique configs this session), ``explored_fraction``, ``budget_exhausted`` and
    ``action_mask``.

    ## Arguments
    ``task`` (a :class:`~schedule_gym.tasks.Task` or a preset name such as ``"gemm-1024"``), ``backend``
    (``"mock"`` or a :class:`~schedule_gym.backends.LatencyBackend`), ``backend_options`` (a dict of plain
    values for the named backend), ``reward``, ``observation``, ``include_shape``, ``start``,
    ``episode`` (``"steps"`` or ``"session"``), ``illegal_action_penalty``, ``failure_penalty``,
    ``budget_measurements``, ``budget_fraction``, ``budget_seconds``, ``reward_ref_latency_s`` (the fields of
    :class:`~schedule_gym.envs.options.EnvOptions`; or ``options=`` one of them), ``render_mode`` (``"ansi"``: the tile table as text; ``"rgb_array"``: one bar per dimension, split
    into its loops in proportion to ``log(factor)``, coloured by loop level, for video wrappers).

    ## Version History
    * v0: initial version. Later, without a bump (no earlier result changes meaning): ``info["censored"]``
      and the bound as the cost of a censored measurement, which only backends that censor produce; new
      options whose defaults keep v0's dynamics (``observation="features"``, ``reward="best_improvement"``,
      ``episode="session"``, ``reward_scale="task"``, a reward object for ``reward``); ``rgb_array`` rendering
      declared by every id. Seeded rollouts with the default options are tested equal to v0's.

    >>> import gymnasium, schedule_gym
    >>> env = gymnasium.make("schedule_gym/Gemm-v0", m=256, k=256, n=256)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, int(env.action_space.n), info["config"]
    ((10,), 26, ((256, 1, 1, 1), (256, 1), (256, 1, 1, 1)))
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.space.parse_action("n: 2x[3] /2[0]"))
    >>> info["config"], round(reward, 2)
    (((256, 1, 1, 1), (256, 1), (128, 1, 1, 2)), 1.98)
    """

    def __init__(
        self,
        task: Task | str = "gemm-1024",
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        options: EnvOptions | None = None,
        layout: TaskLayout | dict[str, Any] | None = None,
        **values: Any,
    ) -> None:
        task = resolve_task(task)
        options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        self.space = checked_space(task)
        self._setup(task, self.space, backend, backend_options, options, render_mode)
        self.observation_mode = options.observation
        self.include_shape = options.include_shape
        self.action_space = gym.spaces.Discrete(self.space.n_actions)
        self._features: FeatureTables | None = None
        if options.observation in FEATURE_OBSERVATIONS:
            self.layout = TaskLayout.of(layout, [task])
            self._features = FeatureTables([self.space], self.layout, machine_profile(self.backend),
                                           moves=options.observation == "move_features")
            self.observation_space = self._features.space
        else:
            self._obs = ObservationTables(self.space, options.observation, options.include_shape)
            self.observation_space = self._obs.space

        # Per-dimension move tables as Python lists: one step is a few list look-ups.
        self._next_rows = [d.next_row_lists for d in self.space.dims]
        self._masks = [d.masks for d in self.space.dims]
        # action_masks' tables: dimension x's actions legal in row r, False elsewhere; a mask is an OR of one row
        # per dimension (kept where they are small)
        self._full_masks: list[np.ndarray] = []
        offsets = np.cumsum([0] + [m.shape[1] for m in self._masks]).tolist()
        if sum(m.shape[0] for m in self._masks) * self.space.n_actions <= ObservationTables.MAX_FULL_BYTES:
            for m, lo, hi in zip(self._masks, offsets, offsets[1:]):
                full = np.zeros((m.shape[0], self.space.n_actions), dtype=bool)
                full[:, lo:hi] = m
                self._full_masks.append(full)
        self._action_dim = self.space.action_dim
        self._strides = self.space.strides
        self._n_actions = self.space.n_actions
        self._rows: tuple[int, ...] = self.space.rows(self.space.initial_config())
        self._index = self.space.index_of_rows(self._rows)

    @property
    def config(self) -> Config:
        """The current config."""
        return self.space.config_of_rows(self._rows)

    def _start(self, start: str, config: object) -> int:
        self._rows = start_rows(self.space, start, config, lambda size: int(self.np_random.integers(size)))
        self._index = self.space.index_of_rows(self._rows)
        return self._index

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        if type(action) is not int or not 0 <= action < self._n_actions:
            action = check_action(action, self._n_actions)
        x, local = self._action_dim[action]
        rows = self._rows
        row = rows[x]
        new_row = self._next_rows[x][row][local]
        if new_row < 0:
            return self.illegal_step()
        self._steps += 1
        return self.move_to(self._index + (new_row - row) * self._strides[x], rows[:x] + (new_row,) + rows[x + 1:])

    def action_masks(self) -> np.ndarray:
        """Bool mask of the legal actions in the current state (used by sb3-contrib's MaskablePPO)."""
        rows = self._rows
        full = self._full_masks
        if not full:
            return np.concatenate([m[r] for m, r in zip(self._masks, rows)])
        out = full[0][rows[0]].copy()
        for x in range(1, len(full)):
            out |= full[x][rows[x]]
        return out

    def observe(self) -> np.ndarray:
        if self._features is None:
            return self._obs.of_rows(self._rows)
        return self.observation_of_rows(self._rows)

    def observation_of_rows(self, rows: Sequence[int]) -> np.ndarray:
        """The observation the environment would return in the state ``rows`` (for policy-driven tuners; with
        ``observation="features"`` the search-state part is the session's now)."""
        features = self._features
        if features is None:
            return self._obs.of_rows(rows)
        index = self.space.index_of_rows(rows)
        session = self.session
        last = session.cached(index) if session.seen(index) else None
        latency = np.nan if last is None or last.latency_s is None else last.latency_s
        best = np.inf if session.best is None else session.best.latency_s
        limit = session.max_measurements
        budget_left = 1.0 - session.num_measurements / limit if limit else 1.0
        start = np.nan if self._start_latency_s is None else self._start_latency_s
        measured = np.zeros(self.layout.max_actions, dtype=bool)
        legal = np.flatnonzero(self.space.action_mask_of_rows(rows))
        moved = [self.space.step_rows(rows, a) for a in legal.tolist()]
        for a, to in zip(legal.tolist(), moved):
            measured[a] = session.seen(self.space.index_of_rows(to))
        task = np.zeros(1, dtype=np.int64)
        parts = [
            features.config_part(task, np.array([rows]))[0],
            features.search_part(np.array([latency]), np.array([best]), np.array([start]), np.array([budget_left]),
                                 np.array([last is None or last.latency_s is None]))[0],
            measured.astype(np.float32),
        ]
        if features.moves:
            to_rows = np.array(moved, dtype=np.int64).reshape(legal.size, len(rows))
            parts.append(features.move_part(1, np.zeros(legal.size, dtype=np.int64), legal,
                                            np.zeros(legal.size, dtype=np.int64), to_rows)[0])
        return np.concatenate(parts)

    def state_config(self) -> Config:
        return self.space.config_of_rows(self._rows)

    @property
    def tiles(self) -> Config:
        return self.config

    def render_text(self) -> str:
        """The tile table, the loop order and the last and best measurements (the ``ansi`` render)."""
        config = self.config
        width = max(len(str(f)) for factors in config for f in factors)
        lines = [f"{self.task.describe()}   step {self._steps}"]
        lines.append(f"{'dim':<4}{'extent':>8}   factors (outer -> inner)")
        for d, factors in zip(self.task.dims, config):
            cells = " ".join(f"{f:>{width}}" for f in factors)
            lines.append(f"{d.name:<4}{d.extent:>8}   [{cells}]")
        lines.append("loop order: " + " ".join(f"{d}{level}" for d, level in self.task.loop_order))
        return "\n".join(lines + self.latency_lines()) + "\n"
