"""The tiling environment: tune a tensor operator's tile sizes with doubling/halving moves."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend, MeasureResult, make_backend
from schedule_gym.envs.common import (  # noqa: F401  (LOG2_SCALE: re-exported)
    LOG2_SCALE, OBSERVATIONS, REWARDS, STARTS, ObservationTables, check_arguments, checked_space, reset_start, reward_of,
)
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Config, TileSpace
from schedule_gym.tasks import Task

__all__ = ["OBSERVATIONS", "REWARDS", "STARTS", "TilingEnv"]


class TilingEnv(gym.Env[np.ndarray, np.int64]):
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
    * ``"log_speedup_s0"``: ``log(ref / cost)``.

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
    is created and anew at every ``reset`` with a ``seed``. A config is measured at most once per
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
    ``illegal_action_penalty``, ``failure_penalty``, ``budget_measurements``, ``budget_fraction``,
    ``budget_seconds``, ``reward_ref_latency_s``, ``render_mode`` (``"ansi"``: the tile table as text; ``"rgb_array"``: one bar per dimension, split
    into its loops in proportion to ``log(factor)``, coloured by loop level, for video wrappers).

    ## Version History
    * v0: initial version. Later, without a bump (no earlier result changes meaning): ``info["censored"]``
      and the bound as the cost of a censored measurement, which only backends that censor produce.

    >>> import gymnasium, schedule_gym
    >>> env = gymnasium.make("schedule_gym/Gemm-v0", m=256, k=256, n=256)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, int(env.action_space.n), info["config"]
    ((10,), 26, ((256, 1, 1, 1), (256, 1), (256, 1, 1, 1)))
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.space.parse_action("n: 2x[3] /2[0]"))
    >>> info["config"], round(reward, 2)
    (((256, 1, 1, 1), (256, 1), (128, 1, 1, 2)), 1.98)
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
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
        render_mode: str | None = None,
    ) -> None:
        task = check_arguments(task, reward, observation, include_shape, start, illegal_action_penalty,
                               failure_penalty, reward_ref_latency_s, backend_options)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")

        self.task = task
        self.space = checked_space(task)
        self._owns_backend = not isinstance(backend, LatencyBackend)
        self.backend = make_backend(backend, **(backend_options or {}))
        try:
            self.backend.check_task(task)  # refuse up front what the backend could only fail per config
        except BaseException:
            if self._owns_backend:
                self.backend.close()
            raise
        self.reward_mode = reward
        self.observation_mode = observation
        self.include_shape = include_shape
        self.start = start
        self.illegal_action_penalty = float(illegal_action_penalty)
        self.failure_penalty = float(failure_penalty)
        #: the measurement session: cache, budget, best-so-far (search agents drive it directly)
        self.session = MeasureSession(task, self.backend, self.space)
        self.session.set_budget(budget_measurements, budget_fraction, budget_seconds)
        self._fixed_ref_latency_s = None if reward_ref_latency_s is None else float(reward_ref_latency_s)
        self.render_mode = render_mode

        self.action_space = gym.spaces.Discrete(self.space.n_actions)
        self._obs = ObservationTables(self.space, observation, include_shape)
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
        self._flops = float(task.flops)

        self._new_session()
        self._rows: tuple[int, ...] = self.space.rows(self.space.initial_config())
        self._index = self.space.index_of_rows(self._rows)
        self._prev_latency_s: float | None = None
        self._last: MeasureResult | None = None
        self._steps = 0
        self._needs_reset = True

    # ----------------------------------------------------------------------------- session
    @property
    def config(self) -> Config:
        """The current config."""
        return self.space.config_of_rows(self._rows)

    def _new_session(self) -> None:
        self.session.start()
        self._ref_latency_s = self._fixed_ref_latency_s

    def _reference_latency(self) -> float | None:
        if self._ref_latency_s is None and self.reward_mode != "log_speedup_prev":
            s0 = self.space.index_of_rows(self.space.rows(self.space.initial_config()))
            (result,) = self.session.measure_indices([s0], exact=True)  # the unit of every reward: never censored
            if result is not None and result.latency_s is not None:
                self._ref_latency_s = result.latency_s
        return self._ref_latency_s

    # -------------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._new_session()
            reseed = getattr(self.backend, "reseed", None)
            if self._owns_backend and reseed is not None:
                reseed(self.np_random)  # measurement noise follows the seed (vector workers differ)
        start, config = reset_start(options, self.start)
        if config is not None:
            if isinstance(config, numbers.Integral) and not isinstance(config, bool):
                self._rows = self.space.rows(self.space.config(int(config)))
            else:
                self._rows = self.space.rows(self.space.validate(config))
        elif start == "random":
            self._rows = self.space.rows_of_index(int(self.np_random.integers(self.space.size)))
        else:
            self._rows = self.space.rows(self.space.initial_config())
        self._index = self.space.index_of_rows(self._rows)
        self._reference_latency()
        (result,) = self.session.measure_indices([self._index])
        self._last = result
        self._prev_latency_s = None if result is None else result.latency_s
        self._steps = 0
        self._needs_reset = False
        return self._observation(), self._info(result, legal=True, new=result is not None)

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        if type(action) is not int:
            action = self.space.check_action(action)
        elif not 0 <= action < self._n_actions:
            raise ValueError(f"action {action!r} is out of range [0, {self._n_actions})")
        self._steps += 1
        x, local = self._action_dim[action]
        rows = self._rows
        row = rows[x]
        new_row = self._next_rows[x][row][local]
        session = self.session
        if new_row < 0:
            return self._obs.of_rows(rows), self.illegal_action_penalty, False, session.budget_exhausted(), self._info(
                self._last, legal=False, new=False
            )
        index = self._index + (new_row - row) * self._strides[x]
        new = not session.seen(index)
        result = session.measure_indices([index])[0] if new else session.cached(index)
        if result is None:  # the budget is spent and this config was never measured in the session
            info = self._info(self._last, legal=True, new=False)
            info["budget_exhausted"] = True
            return self._obs.of_rows(rows), 0.0, False, True, info
        self._rows = rows = rows[:x] + (new_row,) + rows[x + 1:]
        self._index = index
        self._last = result
        latency = result.latency_s
        if latency is None:
            reward = self.failure_penalty
        else:
            ref = self._ref_latency_s if self._ref_latency_s is not None else self._reference_latency()
            reward = reward_of(self.reward_mode, latency, self._prev_latency_s, ref)
            self._prev_latency_s = latency
        info = self._info(result, legal=True, new=new)
        return self._obs.of_rows(rows), reward, False, info["budget_exhausted"], info

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

    def _observation(self) -> np.ndarray:
        return self.observation_of_rows(self._rows)

    def observation_of_rows(self, rows: Sequence[int]) -> np.ndarray:
        """The observation the environment would return in the state ``rows`` (for policy-driven tuners)."""
        return self._obs.of_rows(rows)

    def _info(self, result: MeasureResult | None, legal: bool, new: bool) -> dict[str, Any]:
        session = self.session
        best = session.best
        flops = self._flops
        if result is None:
            latency, error, error_kind, coarse, censored = None, None, None, False, False
        else:
            latency, error, error_kind = result.latency_s, result.error, result.error_kind
            coarse, censored = result.coarse, result.censored
        return {
            "config": self.space.config_of_rows(self._rows),
            "latency_s": latency,
            "gflops": None if latency is None else flops / latency * 1e-9,
            "error": error,
            "error_kind": error_kind,
            "coarse": coarse,
            "censored": censored,
            "legal": legal,
            "new_measurement": new,
            "best_latency_s": None if best is None else best.latency_s,
            "best_gflops": None if best is None else flops / best.latency_s * 1e-9,
            "best_config": None if best is None else best.config,
            "num_measurements": session.num_measurements,
            "explored_fraction": session.explored_fraction,
            "budget_exhausted": session.budget_exhausted(),
            "action_mask": self.action_masks(),
        }

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        return None

    _PALETTE = np.array(
        [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75],
         [227, 119, 194], [127, 127, 127]],
        dtype=np.uint8,
    )

    def _render_rgb(self, width: int = 256, band: int = 24, gap: int = 8) -> np.ndarray:
        dims = self.task.dims
        image = np.full((len(dims) * (band + gap) + gap, width, 3), 255, dtype=np.uint8)
        for x, (d, factors) in enumerate(zip(dims, self.config)):
            top = gap + x * (band + gap)
            total = math.log(d.extent) if d.extent > 1 else 1.0
            left = 0.0
            for level, f in enumerate(factors):
                right = left + width * math.log(f) / total
                image[top : top + band, round(left) : round(right)] = self._PALETTE[level % len(self._PALETTE)]
                left = right
        return image

    def _render_text(self) -> str:
        config = self.config
        width = max(len(str(f)) for factors in config for f in factors)
        lines = [f"{self.task.describe()}   step {self._steps}"]
        lines.append(f"{'dim':<4}{'extent':>8}   factors (outer -> inner)")
        for d, factors in zip(self.task.dims, config):
            cells = " ".join(f"{f:>{width}}" for f in factors)
            lines.append(f"{d.name:<4}{d.extent:>8}   [{cells}]")
        lines.append("loop order: " + " ".join(f"{d}{level}" for d, level in self.task.loop_order))
        last = self._last
        if last is None:
            lines.append("latency: not measured (budget spent)")
        elif last.latency_s is None:
            lines.append(f"latency: failed ({last.error_kind}: {last.error})")
        elif last.censored:
            lines.append(f"latency: > {last.latency_s * 1e3:.4g} ms  (< {self._flops / last.latency_s * 1e-9:.4g} GFLOP/s, stopped)")
        else:
            lines.append(f"latency: {last.latency_s * 1e3:.4g} ms  ({self._flops / last.latency_s * 1e-9:.4g} GFLOP/s)")
        best, count = self.session.best, self.session.num_measurements
        if best is not None:
            lines.append(
                f"best:    {best.latency_s * 1e3:.4g} ms  ({self._flops / best.latency_s * 1e-9:.4g} GFLOP/s)"
                f"  after {count} configs ({count / self.space.size:.3%} of {self.space.size:,})"
            )
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        if self._owns_backend:
            self.backend.close()
        super().close()
