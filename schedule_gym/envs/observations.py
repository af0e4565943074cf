"""Observation spaces: the tables every environment reads its observations from (one fact, one place).

* :class:`ObservationTables`: a task's tile factors, per dimension and row of its factorisation table
  (``"fraction"``: ``log(s_x[i]) / log(extent_x)``; ``"log2"``: ``log2(s_x[i]) / 24``), optionally followed by
  the task's shape; what ``TilingEnv`` and the single-task vector environment observe.
* :class:`TaskLayout`: the fixed layout that fits every task of a multi-task environment (operator one-hot,
  then per dimension slot the factors, the extent and the reduction flag).
* :class:`GatherTables`: any of these layouts for a list of tasks as one flat table and, per task, one
  index per observation entry, so a batch of observations of sub-environments on different tasks is one
  gather (what the native vector environments do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task

__all__ = ["LOG2_SCALE", "GatherTables", "ObservationTables", "TaskLayout", "factor_tables"]

#: ``log2`` observations and the task shape are divided by this: extents up to 2**24 map into [0, 1].
LOG2_SCALE = 24.0


def factor_tables(space: TileSpace, observation: str) -> list[np.ndarray]:
    """Per dimension, the float32 observation of each row's factors (``"fraction"`` or ``"log2"``)."""
    tables = []
    for d in space.dims:
        logs = np.log2(d.table.astype(np.float64))
        scale = (math.log2(d.extent) if d.extent > 1 else 1.0) if observation == "fraction" else LOG2_SCALE
        tables.append(np.clip(logs / scale, 0.0, 1.0).astype(np.float32))
    return tables


def shape_part(task: Task) -> np.ndarray:
    """``log2(extent_x) / 24`` per dimension (``include_shape``)."""
    return np.array([min(1.0, math.log2(d.extent) / LOG2_SCALE) for d in task.dims], dtype=np.float32)


class ObservationTables:
    """The observation of every row of every dimension, precomputed (see ``TilingEnv``'s Observation Space).

    ``tables[x][r]`` is the float32 part of the observation for dimension ``x`` in row ``r``; ``shape_part``
    ends the vector when ``include_shape``. :meth:`of_rows` builds one observation (the single environment's
    hot path: a sum of one precomputed row per dimension, exact because every other term is zero).
    """

    #: the most memory :meth:`of_rows`' full-width tables may take
    MAX_FULL_BYTES = 16 << 20

    def __init__(self, space: TileSpace, observation: str, include_shape: bool) -> None:
        self.tables = factor_tables(space, observation)
        self.shape_part: list[np.ndarray] = [shape_part(space.task)] if include_shape else []
        self.size = sum(d.splits for d in space.dims) + (len(space.dims) if include_shape else 0)
        self.space = gym.spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)
        offsets = np.cumsum([0] + [d.splits for d in space.dims]).tolist()
        self._full: list[np.ndarray] = []
        if sum(t.shape[0] for t in self.tables) * self.size * 4 > self.MAX_FULL_BYTES:
            return
        for x, (table, lo, hi) in enumerate(zip(self.tables, offsets, offsets[1:])):
            full = np.zeros((table.shape[0], self.size), dtype=np.float32)
            full[:, lo:hi] = table
            if x == 0 and self.shape_part:
                full[:, offsets[-1]:] = self.shape_part[0]
            self._full.append(full)

    def of_rows(self, rows: Sequence[int]) -> np.ndarray:
        full = self._full
        if not full:
            return np.concatenate([t[r] for t, r in zip(self.tables, rows)] + self.shape_part)
        out = full[0][rows[0]].copy()
        for x in range(1, len(full)):
            out += full[x][rows[x]]
        return out


class TaskLayout:
    """The fixed observation and action layout shared by every task of a multi-task environment.

    ``operators``: the operator names of the one-hot; ``max_dims``: loop dimensions per task;
    ``max_splits``: loops per dimension; ``max_actions``: the size of the action space. A layout built
    from the training and held-out tasks together (:meth:`of_tasks`) lets a policy trained on one split
    run on the other.
    """

    def __init__(self, operators: Sequence[str], max_dims: int, max_splits: int, max_actions: int) -> None:
        self.operators = tuple(operators)
        self.max_dims, self.max_splits, self.max_actions = int(max_dims), int(max_splits), int(max_actions)
        self.size = len(self.operators) + self.max_dims * (self.max_splits + 2)

    @classmethod
    def of_tasks(cls, tasks: Sequence[Task]) -> TaskLayout:
        return cls(
            operators=sorted({t.op for t in tasks}),
            max_dims=max(len(t.dims) for t in tasks),
            max_splits=max(d.splits for t in tasks for d in t.dims),
            max_actions=max(TileSpace(t).n_actions for t in tasks),
        )

    @classmethod
    def of(cls, layout: TaskLayout | dict[str, Any] | None, tasks: Sequence[Task]) -> TaskLayout:
        """``layout`` itself, from its dict, or (None) the smallest that fits ``tasks``; each task is checked."""
        if layout is None:
            layout = cls.of_tasks(tasks)
        elif isinstance(layout, dict):
            layout = cls(**layout)
        if not isinstance(layout, TaskLayout):
            raise TypeError(f"layout must be a TaskLayout, its dict or None, got {layout!r}")
        for task in tasks:
            layout.check(task, TileSpace(task).n_actions)
        return layout

    def to_dict(self) -> dict[str, Any]:
        return {"operators": list(self.operators), "max_dims": self.max_dims, "max_splits": self.max_splits,
                "max_actions": self.max_actions}

    @property
    def space(self) -> gym.spaces.Box:
        return gym.spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)

    def check(self, task: Task, n_actions: int) -> None:
        """Refuse a task that does not fit the layout, naming what does not fit."""
        if task.op not in self.operators:
            raise ValueError(f"task {task.name!r} is a {task.op}; this layout's operators are {list(self.operators)}")
        if len(task.dims) > self.max_dims:
            raise ValueError(f"task {task.name!r} has {len(task.dims)} dimensions; the layout holds {self.max_dims}")
        if max(d.splits for d in task.dims) > self.max_splits:
            raise ValueError(f"task {task.name!r} splits a dimension into more than {self.max_splits} loops")
        if n_actions > self.max_actions:
            raise ValueError(f"task {task.name!r} has {n_actions} actions; the layout holds {self.max_actions}")

    def fits(self, task: Task) -> bool:
        """Whether ``task`` fits the layout (:meth:`check` without the error)."""
        try:
            self.check(task, TileSpace(task).n_actions)
        except ValueError:
            return False
        return True

    def task_part(self, task: Task) -> tuple[np.ndarray, np.ndarray]:
        """The task's constant features (one-hot, then per dimension slot ``log2(extent) / 24`` and the
        reduction flag) and the positions in the observation of its loop factors."""
        features = np.zeros(self.size, dtype=np.float32)
        features[self.operators.index(task.op)] = 1.0
        positions = []
        for x, d in enumerate(task.dims):
            base = len(self.operators) + x * (self.max_splits + 2)
            positions.extend(range(base, base + d.splits))
            features[base + self.max_splits] = min(1.0, math.log2(d.extent) / LOG2_SCALE)
            features[base + self.max_splits + 1] = float(d.reduction)
        return features, np.array(positions, dtype=np.int64)


class GatherTables:
    """Observations of sub-environments on any of ``tasks`` as one gather (see the module docstring).

    Entry ``j`` of the observation of a sub-environment on task ``t`` in rows ``r`` is
    ``flat[r[dim[t, j]] * width[t, j] + base[t, j]]``: a factor entry reads its dimension's table, a
    constant entry (shape, one-hot, padding) has width 0 and reads a fixed cell.

    ``layout`` None: each task's own :class:`ObservationTables` layout (every task must have the same size);
    a :class:`TaskLayout`: the multi-task layout (factors as ``"fraction"``).
    """

    def __init__(self, spaces: Sequence[TileSpace], observation: str, include_shape: bool,
                 layout: TaskLayout | None = None) -> None:
        chunks: list[np.ndarray] = []
        start = 0
        dims, widths, bases = [], [], []
        size = layout.size if layout is not None else None
        for space in spaces:
            tables = factor_tables(space, "fraction" if layout is not None else observation)
            table_start = []
            for t in tables:
                table_start.append(start)
                chunks.append(t.ravel())
                start += t.size
            if layout is None:
                constants = shape_part(space.task) if include_shape else np.zeros(0, dtype=np.float32)
                n_factor = sum(d.splits for d in space.dims)
                task_size = n_factor + constants.size
                if size is None:
                    size = task_size
                elif size != task_size:
                    raise ValueError(f"tasks of one vector environment need observations of one size, got {size} "
                                     f"and {task_size} ({space.task.name!r})")
                positions = np.arange(n_factor)
                constant_at = np.arange(n_factor, task_size)
                values = constants
            else:
                values, positions = layout.task_part(space.task)
                constant_at = np.setdiff1d(np.arange(layout.size), positions)
                values = values[constant_at]
            dim = np.zeros(size, dtype=np.intp)
            width = np.zeros(size, dtype=np.intp)
            base = np.zeros(size, dtype=np.intp)
            column = 0
            for x, d in enumerate(space.dims):
                for j in range(d.splits):
                    at = positions[column]
                    dim[at], width[at], base[at] = x, d.splits, table_start[x] + j
                    column += 1
            chunks.append(values.astype(np.float32))
            base[constant_at] = start + np.arange(len(constant_at))
            start += len(constant_at)
            dims.append(dim)
            widths.append(width)
            bases.append(base)
        self.size = int(size or 0)
        self.space = gym.spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)
        self.flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        self.dim = np.stack(dims)
        self.width = np.stack(widths)
        self.base = np.stack(bases)
        self._first = (self.dim[0], self.width[0], self.base[0])  # task 0's, kept apart: the single-task gather

    def of_rows(self, tasks: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
        """``(N, size)`` observations of sub-environments on ``tasks`` (None: all on task 0) in ``rows`` (N, dims)."""
        if tasks is None:
            dim, width, base = self._first
            return self.flat[rows[:, dim] * width + base]
        dim = self.dim[tasks]
        return self.flat[np.take_along_axis(rows, dim, axis=1) * self.width[tasks] + self.base[tasks]]
