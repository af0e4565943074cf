"""The schedule environment: tile sizes and loop order together (tiling moves and neighbour swaps)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend
from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.envs.resolve import checked_space
from schedule_gym.envs.episode import SingleEpisode, resolve_task
from schedule_gym.envs.observations import ObservationTables
from schedule_gym.envs.options import FEATURE_OBSERVATIONS, EnvOptions, check_action
from schedule_gym.loopnest import LoopNest
from schedule_gym.spaces import Order, Schedule, ScheduleSpace
from schedule_gym.tasks import Task

__all__ = ["ScheduleEnv"]


class ScheduleEnv(SingleEpisode):
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
    ``TilingEnv``'s (``task``, ``backend``, ``backend_options``, ``render_mode`` and the options of
    :class:`~schedule_gym.envs.options.EnvOptions`).

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

    def __init__(
        self,
        task: Task | str = "gemm-1024",
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        options: EnvOptions | None = None,
        **values: Any,
    ) -> None:
        task = resolve_task(task)
        options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        if options.observation in FEATURE_OBSERVATIONS:
            raise ValueError(f"ScheduleEnv observes observation='fraction' or 'log2', got {options.observation!r} (the "
                             "features describe one loop order's nest: use TilingEnv or MultiTaskEnv for them)")
        self.space = ScheduleSpace(task, checked_space(task))
        self._setup(task, self.space, backend, backend_options, options, render_mode,
                    wrap_backend=lambda inner, owned: ScheduleBackend(inner, owns_inner=owned))
        self.action_space = gym.spaces.Discrete(self.space.n_actions)
        self._obs = ObservationTables(self.space.tiles, options.observation, options.include_shape)
        n_loops = self.space.orders.n_loops
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(self._obs.size + n_loops,), dtype=np.float32)
        self._loop_slot = {loop: i for i, loop in enumerate(self.space.orders.loops)}
        self._position_scale = 1.0 / max(1, n_loops - 1)
        s0 = self.space.initial_config()
        self._rows = self.space.tiles.rows(s0.tiles)
        self._order: Order = s0.order

    @property
    def schedule(self) -> Schedule:
        """The current schedule."""
        return Schedule(self.space.tiles.config_of_rows(self._rows), self._order)

    def _start(self, start: str, config: object) -> int:
        if config is not None:
            if isinstance(config, (int, np.integer)) and not isinstance(config, (bool, np.bool_)):
                s = self.space.config(int(config))
            else:
                s = self.space.validate(config)
        elif start == "random":
            s = self.space.sample(self.np_random)
        else:
            s = self.space.initial_config()
        self._rows = self.space.tiles.rows(s.tiles)
        self._order = s.order
        return self.space.index(s)

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        action = check_action(action, self.space.n_actions)
        rows, order = self._rows, self._order
        if action < self.space.n_tile_actions:
            moved = self.space.tiles.step_rows(rows, action)
            if moved is None:
                return self.illegal_step()
            rows = moved
        else:
            p = action - self.space.n_tile_actions
            if not self.space.orders.swap_legal(order, p):
                return self.illegal_step()
            swapped = list(order)
            swapped[p], swapped[p + 1] = swapped[p + 1], swapped[p]
            order = tuple(swapped)
        self._steps += 1
        return self.move_to(self.space.index(Schedule(self.space.tiles.config_of_rows(rows), order)), rows, order)

    def action_masks(self) -> np.ndarray:
        """Bool mask of the legal actions (tile moves, then swaps) in the current state (MaskablePPO)."""
        return np.concatenate(
            [self.space.tiles.action_mask_of_rows(self._rows), self.space.orders.action_mask(self._order)]
        )

    def observe(self) -> np.ndarray:
        positions = np.empty(len(self._order), dtype=np.float32)
        for position, loop in enumerate(self._order):
            positions[self._loop_slot[loop]] = position * self._position_scale
        return np.concatenate([self._obs.of_rows(self._rows), positions])

    def state_config(self) -> Schedule:
        return self.schedule

    def info(self, result: Any, legal: bool, new: bool) -> dict[str, Any]:
        info = super().info(result, legal, new)
        info["order"] = self.space.orders.describe(self._order)
        return info

    @property
    def tiles(self) -> Any:
        return self.space.tiles.config_of_rows(self._rows)

    def render_text(self) -> str:
        s = self.schedule
        lines = [f"{self.task.describe()}   step {self._steps}"]
        for d, factors in zip(self.task.dims, s.tiles):
            lines.append(f"{d.name:<4}{d.extent:>8}   {list(factors)}")
        lines.append("loop nest:  " + LoopNest.cpu(self.task, s.order).describe())
        return "\n".join(lines + self.latency_lines()[:1]) + "\n"
