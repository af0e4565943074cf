"""The schedule environment: tile sizes and loop order together (tiling moves and neighbour swaps)."""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend, MeasureResult, make_backend
from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.envs.common import ObservationTables, check_arguments, checked_space, reset_start, reward_of
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Order, Schedule, ScheduleSpace
from schedule_gym.tasks import Task

__all__ = ["ScheduleEnv"]


class ScheduleEnv(gym.Env[np.ndarray, np.int64]):
    """Tile sizes and loop order of a tensor operator as one Markov decision process.

    ## Description
    :class:`~schedule_gym.envs.TilingEnv` tunes the tile factors of a task whose loop order is fixed.
    Here the state is a *schedule*: the tile config and the order of the tiled loops
    (:class:`~schedule_gym.spaces.Schedule`; the legal orders keep the levels of each dimension nested,
    see :mod:`schedule_gym.spaces.order_space`). The order changes what the template vectorises,
    unrolls, runs in parallel and keeps in registers, and how the operands stream through the caches.
    Each new schedule is measured on the backend as a config of ``task.with_order(order)``.

    ## Action Space
    ``Discrete(n_tile + L - 1)`` for a nest of ``L`` loops: first the tile moves of ``TilingEnv`` (same
    indices and names, e.g. ``m: 2x[0] /2[1]``), then ``swap[p]`` for ``p = 0 .. L-2``, which exchanges the
    loops at positions ``p`` and ``p+1``. GEMM 4/2/4 on powers of two: 26 tile moves and 9 swaps.

    | actions           | what                                                       |
    |-------------------|------------------------------------------------------------|
    | 0 .. n_tile-1     | tile moves (``TilingEnv``'s)                               |
    | n_tile + p        | ``swap[p]``: loops at positions ``p`` and ``p+1`` exchanged |

    A swap of two loops of the same dimension is illegal (it would un-nest its levels), as is a tile move
    whose source factor is not divisible. :meth:`action_masks` gives the legal actions; an illegal action
    leaves the state unchanged, measures nothing and gives ``illegal_action_penalty``.

    ## Observation Space
    ``Box(0, 1, (sum_x d_x [+ D] + L,), float32)``: the tile part of ``TilingEnv`` (``observation`` and
    ``include_shape`` as there), then the order: for each loop ``(x, level)`` in the canonical order (the
    dimensions in task order, levels ascending), its position in the nest divided by ``L - 1``.

    ## Rewards
    As ``TilingEnv``: ``"inverse"`` (default, ``ref / cost``), ``"log_speedup_prev"``, ``"log_speedup_s0"``,
    with ``ref`` the exact latency of ``s0`` (untiled, in the task's default order), the bound as ``cost`` of
    a censored measurement, and ``failure_penalty`` for a schedule that fails.

    ## Starting State
    ``start="s0"``: the untiled config in the task's order; ``"random"``: tiles and order drawn uniformly.
    ``reset(options={"config": schedule})`` starts from a schedule (a ``(tiles, order)`` pair or a dense index).

    ## Episode End
    As ``TilingEnv``: never terminated; truncated by the step limit and the measurement budget.

    ## Info
    ``TilingEnv``'s keys (``config`` is the schedule, ``best_config`` the best schedule) plus ``order``
    (the loop order as text, e.g. ``"m0 n0 m1 n1 k0 m2 n2 k1 m3 n3"``).

    ## Arguments
    ``TilingEnv``'s.

    ## Version History
    * v0: initial version.

    >>> import gymnasium, schedule_gym
    >>> env = gymnasium.make("schedule_gym/Schedule-v0", task="gemm-256")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, int(env.action_space.n), info["order"]
    ((20,), 35, 'm0 n0 m1 n1 k0 m2 n2 k1 m3 n3')
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.space.parse_action("swap[7]"))
    >>> info["order"]
    'm0 n0 m1 n1 k0 m2 n2 m3 k1 n3'
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

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
        self.space = ScheduleSpace(task, checked_space(task))
        self._owns_backend = not isinstance(backend, LatencyBackend)
        inner = make_backend(backend, **(backend_options or {}))
        try:
            inner.check_task(task)
        except BaseException:
            if self._owns_backend:
                inner.close()
            raise
        self.backend = ScheduleBackend(inner, owns_inner=self._owns_backend)
        self.reward_mode = reward
        self.start = start
        self.illegal_action_penalty = float(illegal_action_penalty)
        self.failure_penalty = float(failure_penalty)
        #: the measurement session over schedules (search agents drive it directly)
        self.session = MeasureSession(task, self.backend, self.space)
        self.session.set_budget(budget_measurements, budget_fraction, budget_seconds)
        self._fixed_ref_latency_s = None if reward_ref_latency_s is None else float(reward_ref_latency_s)
        self.render_mode = render_mode

        self.action_space = gym.spaces.Discrete(self.space.n_actions)
        self._obs = ObservationTables(self.space.tiles, observation, include_shape)
        n_loops = self.space.orders.n_loops
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(self._obs.size + n_loops,), dtype=np.float32)
        self._loop_slot = {loop: i for i, loop in enumerate(self.space.orders.loops)}
        self._position_scale = 1.0 / max(1, n_loops - 1)
        self._flops = float(task.flops)

        self.session.start()
        self._ref_latency_s = self._fixed_ref_latency_s
        s0 = self.space.initial_config()
        self._rows = self.space.tiles.rows(s0.tiles)
        self._order: Order = s0.order
        self._prev_latency_s: float | None = None
        self._last: MeasureResult | None = None
        self._steps = 0
        self._needs_reset = True

    # ----------------------------------------------------------------------------- state
    @property
    def schedule(self) -> Schedule:
        """The current schedule."""
        return Schedule(self.space.tiles.config_of_rows(self._rows), self._order)

    def _reference_latency(self) -> float | None:
        if self._ref_latency_s is None and self.reward_mode != "log_speedup_prev":
            (result,) = self.session.measure([self.space.initial_config()], exact=True)  # never censored
            if result is not None and result.latency_s is not None:
                self._ref_latency_s = result.latency_s
        return self._ref_latency_s

    # -------------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.session.start()
            self._ref_latency_s = self._fixed_ref_latency_s
            if self._owns_backend:
                self.backend.reseed(self.np_random)
        start, schedule = reset_start(options, self.start)
        if schedule is not None:
            if isinstance(schedule, numbers.Integral) and not isinstance(schedule, bool):
                s = self.space.config(int(schedule))
            else:
                s = self.space.validate(schedule)
        elif start == "random":
            s = self.space.sample(self.np_random)
        else:
            s = self.space.initial_config()
        self._rows = self.space.tiles.rows(s.tiles)
        self._order = s.order
        self._reference_latency()
        (result,) = self.session.measure([s])
        self._last = result
        self._prev_latency_s = None if result is None else result.latency_s
        self._steps = 0
        self._needs_reset = False
        return self._observation(), self._info(result, legal=True, new=result is not None)

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        action = self.space.check_action(action)
        self._steps += 1
        rows, order = self._rows, self._order
        if action < self.space.n_tile_actions:
            moved = self.space.tiles.step_rows(rows, action)
            legal = moved is not None
            rows = moved if legal else rows
        else:
            p = action - self.space.n_tile_actions
            legal = self.space.orders.swap_legal(order, p)
            if legal:
                swapped = list(order)
                swapped[p], swapped[p + 1] = swapped[p + 1], swapped[p]
                order = tuple(swapped)
        session = self.session
        if not legal:
            return self._observation(), self.illegal_action_penalty, False, session.budget_exhausted(), self._info(
                self._last, legal=False, new=False
            )
        schedule = Schedule(self.space.tiles.config_of_rows(rows), order)
        index = self.space.index(schedule)
        new = not session.seen(index)
        result = session.measure_indices([index])[0] if new else session.cached(index)
        if result is None:  # the budget is spent and this schedule was never measured in the session
            info = self._info(self._last, legal=True, new=False)
            info["budget_exhausted"] = True
            return self._observation(), 0.0, False, True, info
        self._rows, self._order, self._last = rows, order, result
        latency = result.latency_s
        if latency is None:
            reward = self.failure_penalty
        else:
            ref = self._ref_latency_s if self._ref_latency_s is not None else self._reference_latency()
            reward = reward_of(self.reward_mode, latency, self._prev_latency_s, ref)
            self._prev_latency_s = latency
        info = self._info(result, legal=True, new=new)
        return self._observation(), reward, False, info["budget_exhausted"], info

    def action_masks(self) -> np.ndarray:
        """Bool mask of the legal actions (tile moves, then swaps) in the current state (MaskablePPO)."""
        return np.concatenate(
            [self.space.tiles.action_mask_of_rows(self._rows), self.space.orders.action_mask(self._order)]
        )

    def _observation(self) -> np.ndarray:
        positions = np.empty(len(self._order), dtype=np.float32)
        for position, loop in enumerate(self._order):
            positions[self._loop_slot[loop]] = position * self._position_scale
        return np.concatenate([self._obs.of_rows(self._rows), positions])

    def _info(self, result: MeasureResult | None, legal: bool, new: bool) -> dict[str, Any]:
        latency = None if result is None else result.latency_s
        session = self.session
        best = session.best
        return {
            "config": self.schedule,
            "order": self.space.orders.describe(self._order),
            "latency_s": latency,
            "gflops": None if latency is None else self._flops / latency * 1e-9,
            "error": None if result is None else result.error,
            "error_kind": None if result is None else result.error_kind,
            "coarse": False if result is None else result.coarse,
            "censored": False if result is None else result.censored,
            "legal": legal,
            "new_measurement": new,
            "best_latency_s": None if best is None else best.latency_s,
            "best_gflops": None if best is None else self._flops / best.latency_s * 1e-9,
            "best_config": None if best is None else best.config,
            "num_measurements": session.num_measurements,
            "explored_fraction": session.explored_fraction,
            "budget_exhausted": session.budget_exhausted(),
            "action_mask": self.action_masks(),
        }

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        from schedule_gym.loopnest import LoopNest

        s = self.schedule
        lines = [f"{self.task.describe()}   step {self._steps}"]
        for d, factors in zip(self.task.dims, s.tiles):
            lines.append(f"{d.name:<4}{d.extent:>8}   {list(factors)}")
        lines.append("loop nest:  " + LoopNest.cpu(self.task, s.order).describe())
        last = self._last
        if last is None:
            lines.append("latency: not measured (budget spent)")
        elif last.latency_s is None:
            lines.append(f"latency: failed ({last.error_kind}: {last.error})")
        else:
            lines.append(f"latency: {last.latency_s * 1e3:.4g} ms  ({self._flops / last.latency_s * 1e-9:.4g} GFLOP/s)")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.backend.close()
        super().close()
