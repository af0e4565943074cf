"""One episode on one task, on Python scalars: the single environments' side of the episode core.

:class:`SingleEpisode` is what ``TilingEnv`` and ``ScheduleEnv`` share: the options, the backend, the
measurement session (:class:`~schedule_gym.session.MeasureSession`: cache, budget, best-so-far, which
search agents drive directly), the reference latency, reset resolution and the outcome of a move
(:meth:`SingleEpisode.move_to`: budget refused, failed, censored or measured, and its reward from the shared
reward object). A subclass says what a state is: its transition, its observation and its info's config.

It is the N = 1 case of :class:`~schedule_gym.envs.core.VectorEpisodes` kept on Python scalars, because
one NumPy call costs about as much as a whole scalar step; the two agree to the bit (the vector
environments are tested step by step against ``SyncVectorEnv`` of the single ones).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend, MeasureResult
from schedule_gym.envs.resolve import open_backend, reward_scale
from schedule_gym.envs.options import EnvOptions, check_reset_options
from schedule_gym.session import MeasureSession
from schedule_gym.tasks import Task, get_task

__all__ = ["PALETTE", "SingleEpisode", "resolve_task", "tile_bars"]

#: The reset options of the single-task environments.
RESET_OPTIONS = frozenset({"config", "start"})


def resolve_task(task: Task | str) -> Task:
    """A :class:`Task`, or one by name (:func:`~schedule_gym.tasks.get_task`)."""
    if isinstance(task, str):
        task = get_task(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task or a preset name, got {task!r}")
    return task


class SingleEpisode(gym.Env[np.ndarray, np.int64]):
    """The shared scalar episode (see the module docstring). Subclasses set ``self.space`` (whose
    ``index``/``config`` the session uses), call :meth:`_setup`, keep their state in ``_rows`` (and ``_order``),
    and implement ``step``, :meth:`_start`, :meth:`observe`, :meth:`action_masks` and :meth:`state_config`."""

    def _setup(self, task: Task, space: Any, backend: str | LatencyBackend, backend_options: dict[str, Any] | None,
               options: EnvOptions, render_mode: str | None, wrap_backend: Any = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.task = task
        self.options = options
        self.reward = options.reward
        self.reward_mode = options.reward.name
        self.start = options.start
        self.illegal_action_penalty = options.illegal_action_penalty
        self.failure_penalty = options.failure_penalty
        self.render_mode = render_mode
        inner, self._owns_backend = open_backend(backend, backend_options, [task])
        self.backend = inner if wrap_backend is None else wrap_backend(inner, self._owns_backend)
        #: the measurement session: cache, budget, best-so-far (search agents drive it directly)
        self.session = MeasureSession(task, self.backend, space)
        try:
            self.session.set_budget(options.budget_measurements, options.budget_fraction, options.budget_seconds)
        except BaseException:
            self.close_backend()
            raise
        self._flops = float(task.flops)
        self._reward_of = self.reward.__call__  # bound once: the hot path calls it every step
        self._reward_scale = reward_scale(options, self.backend, space.tiles if hasattr(space, "tiles") else space)
        self._uses_best = self.reward.uses_best
        self._fixed_ref_latency_s = options.reward_ref_latency_s
        self._ref_latency_s: float | None = self._fixed_ref_latency_s
        self._prev_latency_s: float | None = None
        self._start_latency_s: float | None = None  # latency of the episode's start config
        self._last: MeasureResult | None = None
        self._steps = 0
        self._needs_reset = True

    # ------------------------------------------------------------------------------ sessions
    def new_session(self) -> None:
        """Start a new measurement session (budget, best and count from zero; the cache stays)."""
        self.session.start()
        self._ref_latency_s = self._fixed_ref_latency_s

    def reference_latency(self) -> float | None:
        """``s0``'s exact latency, the unit of the rewards that need one (measured once a session)."""
        if self._ref_latency_s is None and self.reward.needs_reference:
            (result,) = self.session.measure([self.space.initial_config()], exact=True)  # never censored
            if result is not None and result.latency_s is not None:
                self._ref_latency_s = result.latency_s
        return self._ref_latency_s

    # -------------------------------------------------------------------------------- API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = check_reset_options(options, RESET_OPTIONS)
        if seed is not None or self.options.episode == "session":
            self.new_session()
            if seed is not None and self._owns_backend:
                self.backend.reseed(self.np_random)  # measurement noise follows the seed (vector workers differ)
        start = options.get("start", self.start)
        if start not in ("s0", "random"):
            raise ValueError(f"reset option start must be one of ('s0', 'random'), got {start!r}")
        index = self._start(start, options.get("config"))
        self.reference_latency()
        (result,) = self.session.measure_indices([index])
        self._last = result
        self._prev_latency_s = None if result is None else result.latency_s
        self._start_latency_s = self._prev_latency_s
        self._steps = 0
        self._needs_reset = False
        return self.observe(), self.info(result, legal=True, new=result is not None)

    def move_to(self, index: int, rows: tuple[int, ...], order: Any = None) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The outcome of a legal move to config ``index`` (tile rows ``rows``, loop order ``order`` where the
        state has one): measured (or served from the session), refused by a spent budget (stay, reward 0,
        truncated), failed (``failure_penalty``) or rewarded."""
        session = self.session
        new = not session.seen(index)
        before = session.best
        result = session.measure_indices([index])[0] if new else session.cached(index)
        if result is None:  # the budget is spent and this config was never measured in the session
            info = self.info(self._last, legal=True, new=False)
            info["budget_exhausted"] = True
            return self.observe(), 0.0, False, True, info
        self._rows, self._index = rows, index
        if order is not None:
            self._order = order
        self._last = result
        latency = result.latency_s
        if latency is None:
            reward = self.failure_penalty
        else:
            prev = self._prev_latency_s
            ref = self._ref_latency_s if self._ref_latency_s is not None else self.reference_latency()
            if self._uses_best:
                after = session.best
                reward = float(self._reward_of(latency, latency if prev is None else prev,
                                               latency if ref is None else ref,
                                               np.inf if before is None else before.latency_s,
                                               np.inf if after is None else after.latency_s, new))
            else:
                reward = float(self._reward_of(latency, latency if prev is None else prev,
                                               latency if ref is None else ref, None, None, new))
            if self._reward_scale != 1.0:
                reward = reward / self._reward_scale
            self._prev_latency_s = latency
        info = self.info(result, legal=True, new=new)
        return self.observe(), reward, False, info["budget_exhausted"], info

    def illegal_step(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """An illegal move: the state stays, nothing is measured, ``illegal_action_penalty``."""
        self._steps += 1
        return (self.observe(), self.illegal_action_penalty, False, self.session.budget_exhausted(),
                self.info(self._last, legal=False, new=False))

    def current_info(self) -> dict[str, Any]:
        """The info of the current state, as the last step returned it (``legal`` True, nothing new)."""
        return self.info(self._last, legal=True, new=False)

    def info(self, result: MeasureResult | None, legal: bool, new: bool) -> dict[str, Any]:
        session = self.session
        best = session.best
        flops = self._flops
        if result is None:
            latency, error, error_kind, coarse, censored = None, None, None, False, False
        else:
            latency, error, error_kind = result.latency_s, result.error, result.error_kind
            coarse, censored = result.coarse, result.censored
        return {
            "config": self.state_config(),
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

    # ------------------------------------------------------------------------- subclass hooks
    def _start(self, start: str, config: object) -> int:
        """Set the state a reset starts from; return its dense index."""
        raise NotImplementedError

    def observe(self) -> np.ndarray:
        """The observation of the current state."""
        raise NotImplementedError

    def action_masks(self) -> np.ndarray:
        raise NotImplementedError

    def state_config(self) -> Any:
        """The current state as the info's ``config`` (a tile config, or a schedule)."""
        raise NotImplementedError

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self.render_text()
        if self.render_mode == "rgb_array":
            return tile_bars(self.task, self.tiles)
        return None

    @property
    def tiles(self) -> Any:
        """The current tile config."""
        raise NotImplementedError

    def render_text(self) -> str:
        """The state as text (the ``ansi`` render)."""
        raise NotImplementedError

    def latency_lines(self) -> list[str]:
        """The last and the best measurement as text (the ``ansi`` renders end with them)."""
        last, flops = self._last, self._flops
        if last is None:
            lines = ["latency: not measured (budget spent)"]
        elif last.latency_s is None:
            lines = [f"latency: failed ({last.error_kind}: {last.error})"]
        elif last.censored:
            lines = [f"latency: > {last.latency_s * 1e3:.4g} ms  (< {flops / last.latency_s * 1e-9:.4g} GFLOP/s, stopped)"]
        else:
            lines = [f"latency: {last.latency_s * 1e3:.4g} ms  ({flops / last.latency_s * 1e-9:.4g} GFLOP/s)"]
        best, count = self.session.best, self.session.num_measurements
        if best is not None:
            size = self.space.size
            lines.append(f"best:    {best.latency_s * 1e3:.4g} ms  ({flops / best.latency_s * 1e-9:.4g} GFLOP/s)"
                         f"  after {count} configs ({count / size:.3%} of {size:,})")
        return lines

    def close_backend(self) -> None:
        if self._owns_backend:
            self.backend.close()

    def close(self) -> None:
        self.close_backend()
        super().close()


#: The colours of the loop levels in the ``rgb_array`` render.
PALETTE = np.array(
    [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75],
     [227, 119, 194], [127, 127, 127]],
    dtype=np.uint8,
)


def tile_bars(task: Task, config: Any, width: int = 256, band: int = 24, gap: int = 8) -> np.ndarray:
    """One bar per dimension, split into its loops in proportion to ``log(factor)``, coloured by loop level."""
    dims = task.dims
    image = np.full((len(dims) * (band + gap) + gap, width, 3), 255, dtype=np.uint8)
    for x, (d, factors) in enumerate(zip(dims, config)):
        top = gap + x * (band + gap)
        total = math.log(d.extent) if d.extent > 1 else 1.0
        left = 0.0
        for level, f in enumerate(factors):
            right = left + width * math.log(f) / total
            image[top : top + band, round(left) : round(right)] = PALETTE[level % len(PALETTE)]
            left = right
    return image
