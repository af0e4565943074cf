"""What every environment resolves when it is made or reset, single or vector: the task's tile space (refused
when it has no move or its tables would take minutes), the backend, the reward scale, the start config."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from schedule_gym.backends import LatencyBackend, make_backend
from schedule_gym.envs.options import EnvOptions
from schedule_gym.envs.rewards import NORMALISATION_SAMPLES
from schedule_gym.errors import TaskError
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task

__all__ = ["checked_space", "open_backend", "positive_int", "reward_scale", "start_rows"]


def start_rows(space: TileSpace, start: str, config: object, draw: Callable[[int], int]) -> tuple[int, ...]:
    """The rows a reset starts from: ``config`` (a nested tuple or a dense index) if given, else a config
    drawn uniformly by ``draw(space.size)`` (``start="random"``), else the paper's ``s0``."""
    if config is not None:
        if isinstance(config, (int, np.integer)) and not isinstance(config, (bool, np.bool_)):
            return space.rows(space.config(int(config)))
        return space.rows(space.validate(config))
    if start == "random":
        return space.rows_of_index(draw(space.size))
    return space.rows(space.initial_config())


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


def reward_scale(options: EnvOptions, backend: LatencyBackend, space: TileSpace) -> float:
    """What a task's rewards are divided by: 1, or with ``reward_scale="task"`` the reward's
    :meth:`~schedule_gym.envs.rewards.RewardSpace.task_scale` between ``s0`` and the best of
    ``NORMALISATION_SAMPLES`` configs drawn uniformly with seed 0 (scored in bulk: the mock, tables)."""
    if options.reward_scale == "none":
        return 1.0
    if not backend.scores_in_bulk:
        raise ValueError(f"reward_scale='task' estimates each task's optimum by scoring samples in bulk; the "
                         f"{backend.name!r} backend cannot: use the mock (or a table)")
    s0 = space.index(space.initial_config())
    sample = np.random.default_rng(0).integers(0, space.size, min(NORMALISATION_SAMPLES, space.size))
    latency_s = backend.bulk_latency_s(space.task, np.concatenate([[s0], sample]).astype(np.int64))
    scale = options.reward.task_scale(float(latency_s[0]), float(np.nanmin(latency_s)))
    return scale if math.isfinite(scale) and scale > 0 else 1.0


def open_backend(backend: str | LatencyBackend, backend_options: dict[str, Any] | None,
                 tasks: Sequence[Task]) -> tuple[LatencyBackend, bool]:
    """``(backend, owned)``: ``backend`` made from its name and options (owned: the environment closes it) or
    taken as given, after :meth:`~schedule_gym.backends.LatencyBackend.check_task` of every task (an owned
    backend is closed again if one is refused)."""
    if backend_options is not None and not isinstance(backend_options, dict):
        raise TypeError(f"backend_options must be a dict or None, got {backend_options!r}")
    owned = not isinstance(backend, LatencyBackend)
    made = make_backend(backend, **(backend_options or {}))
    try:
        for task in tasks:
            made.check_task(task)  # refuse up front what the backend could only fail per config
    except BaseException:
        if owned:
            made.close()
        raise
    return made, owned


def positive_int(value: Any, name: str, allow_none: bool = False) -> int | None:
    """``value`` as an int >= 1 (None where allowed), else a ValueError naming ``name``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def json_object(text: str, what: str) -> dict[str, Any]:
    """An environment's arguments given as JSON text (a command line's ``--env-kwargs``): the object, or a
    ``ValueError`` naming ``what`` and the text when it is not valid JSON or not an object."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} must be a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {text!r}")
    return value
