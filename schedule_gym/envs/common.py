"""What :class:`~schedule_gym.envs.TilingEnv` and :class:`~schedule_gym.envs.TilingVectorEnv` share: the
argument checks and the per-dimension observation tables (one fact, one place)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.errors import TaskError
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task, get_task

_log = np.log  # the one logarithm of rewards (see reward_of)

__all__ = ["LOG2_SCALE", "OBSERVATIONS", "RESET_OPTIONS", "REWARDS", "STARTS", "ObservationTables", "check_arguments", "checked_space",
           "reset_start", "reward_of"]

REWARDS = ("inverse", "log_speedup_prev", "log_speedup_s0")
OBSERVATIONS = ("fraction", "log2")
STARTS = ("s0", "random")
#: the reset options every environment takes
RESET_OPTIONS = frozenset({"config", "start"})
#: ``log2`` observations and the task shape are divided by this: extents up to 2**24 map into [0, 1].
LOG2_SCALE = 24.0


def check_arguments(
    task: Task | str,
    reward: str,
    observation: str,
    include_shape: bool,
    start: str,
    illegal_action_penalty: float,
    failure_penalty: float,
    reward_ref_latency_s: float | None,
    backend_options: dict[str, Any] | None,
) -> Task:
    """Check the environment arguments both environments take; return the task (a preset name resolved)."""
    if isinstance(task, str):
        task = get_task(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task or a preset name, got {task!r}")
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
    if not isinstance(include_shape, bool):
        raise TypeError(f"include_shape must be a bool, got {include_shape!r}")
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    for name, value in (("illegal_action_penalty", illegal_action_penalty), ("failure_penalty", failure_penalty)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if reward_ref_latency_s is not None and (
        isinstance(reward_ref_latency_s, bool)
        or not isinstance(reward_ref_latency_s, numbers.Real)
        or not (math.isfinite(reward_ref_latency_s) and reward_ref_latency_s > 0)
    ):
        raise ValueError(f"reward_ref_latency_s must be a positive number or None, got {reward_ref_latency_s!r}")
    if backend_options is not None and not isinstance(backend_options, dict):
        raise TypeError(f"backend_options must be a dict or None, got {backend_options!r}")
    return task


def reward_of(mode: str, latency_s: float, prev_latency_s: float | None, ref_latency_s: float | None) -> float:
    """The reward of a successful measurement under ``mode`` (``TilingEnv``'s Rewards section).

    The logarithm is NumPy's, as in ``TilingVectorEnv``: NumPy's ``log`` and ``math.log`` differ in the last
    bit for about 0.3% of float64 arguments (measured with NumPy 2.4 on Zen 3), and the vector environment's
    rewards must equal the single one's to the bit."""
    if mode == "inverse":
        return (ref_latency_s or latency_s) / latency_s
    if mode == "log_speedup_prev":
        return float(_log(prev_latency_s / latency_s)) if prev_latency_s is not None else 0.0
    return float(_log((ref_latency_s or latency_s) / latency_s))


def reset_start(options: dict[str, Any] | None, start: str) -> tuple[object, object]:
    """``(start, config)`` of a reset: the ``"start"`` and ``"config"`` options over the environment's
    ``start`` (checked; ``config`` None when not given)."""
    if not options:
        return start, None
    if not isinstance(options, dict):
        raise TypeError(f"reset options must be a dict, got {options!r}")
    unknown = set(options) - RESET_OPTIONS
    if unknown:
        raise ValueError(f"unknown reset options {sorted(unknown)}; known: {sorted(RESET_OPTIONS)}")
    start = options.get("start", start)
    if start not in STARTS:
        raise ValueError(f"reset option start must be one of {STARTS}, got {start!r}")
    return start, options.get("config")


def checked_space(task: Task) -> TileSpace:
    """The task's tile space, refused if it has no legal move or its tables would take minutes to build
    (a ``UserWarning`` if they would take more than ``SLOW_TABLES_S``: :meth:`TileSpace.check_table_cost`)."""
    space = TileSpace(task)
    if space.n_actions == 0:
        splits = ", ".join(f"{d.name}={d.extent} in {d.splits}" for d in task.dims)
        raise TaskError(
            f"task {task.name!r} has no legal moves (extents and splits: {splits}): every dimension has "
            "extent 1 or a single loop, so its space holds one config; give a dimension an extent > 1 "
            "and more than one loop"
        )
    space.check_table_cost(stacklevel=3)
    return space


class ObservationTables:
    """The observation of every row of every dimension, precomputed (see ``TilingEnv``'s Observation Space).

    ``tables[x][r]`` is the float32 part of the observation for dimension ``x`` in row ``r``; ``shape_part``
    ends the vector when ``include_shape``. :meth:`of_rows` builds one observation, :meth:`of_row_array`
    a batch of them from an ``(N, n_dims)`` array of rows.
    """

    #: the most memory :meth:`of_rows`' full-width tables may take
    MAX_FULL_BYTES = 16 << 20

    def __init__(self, space: TileSpace, observation: str, include_shape: bool) -> None:
        self.tables: list[np.ndarray] = []
        for d in space.dims:
            logs = np.log2(d.table.astype(np.float64))
            scale = (math.log2(d.extent) if d.extent > 1 else 1.0) if observation == "fraction" else LOG2_SCALE
            self.tables.append(np.clip(logs / scale, 0.0, 1.0).astype(np.float32))
        self.shape_part: list[np.ndarray] = [
            np.array([min(1.0, math.log2(d.extent) / LOG2_SCALE) for d in space.task.dims], dtype=np.float32)
        ] if include_shape else []
        self.size = sum(d.splits for d in space.dims) + (len(space.dims) if include_shape else 0)
        self.space = gym.spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)
        self._offsets = np.cumsum([0] + [d.splits for d in space.dims]).tolist()
        # of_row_array's one gather: column j of an observation is flat[rows[:, dim[j]] * width[j] + base[j]]
        self._flat = np.concatenate([t.ravel() for t in self.tables] + self.shape_part)
        starts = np.cumsum([0] + [t.size for t in self.tables])
        self._column_dim = np.array([x for x, d in enumerate(space.dims) for _ in range(d.splits)], dtype=np.intp)
        width = [d.splits for d in space.dims for _ in range(d.splits)]
        base = [starts[x] + j for x, d in enumerate(space.dims) for j in range(d.splits)]
        if include_shape:  # the shape part: a fixed entry, row 0 of a width-0 "table" past the others
            self._column_dim = np.concatenate([self._column_dim, np.zeros(len(space.dims), dtype=np.intp)])
            width += [0] * len(space.dims)
            base += [starts[-1] + x for x in range(len(space.dims))]
        self._column_width = np.array(width, dtype=np.intp)
        self._column_base = np.array(base, dtype=np.intp)
        # of_rows' tables: dimension x's part of the observation in row r, zero elsewhere (the shape part in the
        # first), so one observation is a sum of one row per dimension (exact: every other term is zero); kept
        # only where they are small (they hold size / splits_x times more numbers than the tables)
        self._full: list[np.ndarray] = []
        if sum(t.shape[0] for t in self.tables) * self.size * 4 > self.MAX_FULL_BYTES:
            return
        for x, (table, lo, hi) in enumerate(zip(self.tables, self._offsets, self._offsets[1:])):
            full = np.zeros((table.shape[0], self.size), dtype=np.float32)
            full[:, lo:hi] = table
            if x == 0 and self.shape_part:
                full[:, self._offsets[-1]:] = self.shape_part[0]
            self._full.append(full)

    def of_rows(self, rows: Any) -> np.ndarray:
        full = self._full
        if not full:
            return np.concatenate([t[r] for t, r in zip(self.tables, rows)] + self.shape_part)
        out = full[0][rows[0]].copy()
        for x in range(1, len(full)):
            out += full[x][rows[x]]
        return out

    def of_row_array(self, rows: np.ndarray) -> np.ndarray:
        return self._flat[rows[:, self._column_dim] * self._column_width + self._column_base]
