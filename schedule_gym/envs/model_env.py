"""The whole-model environment: an episode visits every task of a model; rewards follow the model's latency."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.multitask_env import MultiTaskEnv, TaskLayout
from schedule_gym.envs.options import check_reset_options
from schedule_gym.tasks import Task, get_suite, suite_names

__all__ = ["ModelEnv", "model_tasks"]


def model_tasks(model: str | Sequence[tuple[Task, int]]) -> list[tuple[Task, int]]:
    """``(task, weight)`` of a model: a suite name (``"resnet50"``: its layers) or the pairs themselves (a
    PyTorch model's, from :func:`schedule_gym.models.pipeline.load_model`'s ``mapped.tasks``)."""
    if isinstance(model, str):
        if model in suite_names():
            return [(s.task, s.weight) for s in get_suite(model)]
        raise ValueError(f"unknown model {model!r}: not a suite ({', '.join(suite_names())}); for any PyTorch model "
                         "pass its (Task, weight) pairs (schedule_gym.models.pipeline.load_model(...).mapped.tasks)")
    pairs = [(t, int(w)) for t, w in model]
    for task, weight in pairs:
        if not isinstance(task, Task) or weight < 1:
            raise ValueError(f"model tasks must be (Task, positive weight) pairs, got ({task!r}, {weight!r})")
    if not pairs:
        raise ValueError("a model needs at least one task")
    return pairs


class ModelEnv(MultiTaskEnv):
    """Tile-size tuning of a whole model: one episode visits each of its tasks in turn.

    ## Description
    A model is a list of tasks with weights (how many times the model runs each kernel). ``reset``
    starts a measurement session on every task (measuring its start config) and puts the agent on the
    first task; after ``steps_per_task`` steps it moves to the next. Each task moves and measures as in
    :class:`~schedule_gym.envs.TilingEnv` (one backend for all). The model's **estimated latency** is
    ``E = sum_i weight_i * best_i``, with ``best_i`` the best latency of task ``i`` in this episode (its
    start config's until it is visited).

    ## Action Space
    :class:`~schedule_gym.envs.MultiTaskEnv`'s: ``Discrete(layout.max_actions)``, padded, masked.

    ## Observation Space
    :class:`~schedule_gym.envs.MultiTaskEnv`'s task layout, then two entries: the task's position in the
    episode (``i / n_tasks``) and its share of the estimated latency (``weight_i * best_i / E``).

    ## Rewards
    ``(E_before - E_after) / E_start`` per step: the step's reduction of the model's estimated latency
    as a fraction of the episode's start. An episode's rewards sum to the fraction of the model's
    kernel time the agent removed. An illegal action gives ``illegal_action_penalty``.

    ## Starting State
    Every task at its start config (``start``: ``"s0"`` or ``"random"``); the agent on the first task.

    ## Episode End
    Truncated after ``steps_per_task`` steps on the last task; never terminated.

    ## Info
    The task environment's info, with ``task``, ``task_index``, ``estimated_latency_s`` and
    ``start_latency_s`` (E at the episode's start).

    ## Arguments
    ``model`` (a suite name or ``(Task, weight)`` pairs: :func:`model_tasks`),
    ``steps_per_task``, ``backend``, ``backend_options``, ``start``, ``illegal_action_penalty``.

    ## Version History
    * v0: initial version.

    >>> import gymnasium, schedule_gym
    >>> env = gymnasium.make("schedule_gym/Model-v0", model="resnet18", steps_per_task=4)
    >>> obs, info = env.reset(seed=0)
    >>> info["task_index"], len(env.unwrapped.tasks), obs.shape == env.observation_space.shape
    (0, 12, True)
    """

    def __init__(
        self,
        model: str | Sequence[tuple[Task, int]] = "resnet18",
        steps_per_task: int = 16,
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        start: str = "s0",
        illegal_action_penalty: float = -1.0,
        layout: TaskLayout | dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if isinstance(steps_per_task, bool) or not isinstance(steps_per_task, int) or steps_per_task < 1:
            raise ValueError(f"steps_per_task must be a positive int, got {steps_per_task!r}")
        pairs = model_tasks(model)
        tasks = [t for t, _ in pairs]
        if len({t.key for t in tasks}) != len(tasks):
            raise ValueError("a model lists each task once, with its weight")
        super().__init__(tasks, layout=layout, backend=backend, backend_options=backend_options, reward="inverse",
                         start=start, illegal_action_penalty=illegal_action_penalty, render_mode=render_mode)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(self.layout.size + 2,), dtype=np.float32)
        self.weights = np.array([w for _, w in pairs], dtype=np.float64)
        self.steps_per_task = steps_per_task
        self._best = np.full(len(self.tasks), np.inf)
        self._index = 0
        self._steps_here = 0
        self._start_estimate = math.inf

    @property
    def estimated_latency_s(self) -> float:
        return float(np.dot(self.weights, self._best))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        check_reset_options(options, ())
        gym.Env.reset(self, seed=seed)
        infos = []
        for i, task in enumerate(self.tasks):
            env = self.task_env(task)
            _, info = env.reset(seed=int(self.np_random.integers(2**31)))
            best = info["best_latency_s"]
            if best is None:
                raise RuntimeError(f"the start config of task {task.name!r} failed to measure: {info['error']}")
            self._best[i] = best
            infos.append(info)
        self._start_estimate = self.estimated_latency_s
        self._index, self._steps_here = 0, 0
        self.task, self.env = self.tasks[0], self.task_env(self.tasks[0])
        return self._observe(), self._model_info(infos[0])

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise RuntimeError("call reset() before step()")
        before = self.estimated_latency_s
        _, _, _, _, info = super().step(action)
        legal = info["legal"]
        best = info["best_latency_s"]
        if best is not None and best < self._best[self._index]:
            self._best[self._index] = best
        reward = (before - self.estimated_latency_s) / self._start_estimate if legal else self.illegal_action_penalty
        self._steps_here += 1
        truncated = False
        if self._steps_here >= self.steps_per_task:
            if self._index + 1 < len(self.tasks):
                self._index += 1
                self._steps_here = 0
                self.task, self.env = self.tasks[self._index], self.task_env(self.tasks[self._index])
                info = self._pad_info(self.env.current_info())
            else:
                truncated = True
        return self._observe(), float(reward), False, truncated, self._model_info(info)

    def _observe(self) -> np.ndarray:
        assert self.env is not None
        inner = self.pad(self.env.observe())
        share = self.weights[self._index] * self._best[self._index] / self.estimated_latency_s
        return np.concatenate([inner, np.array([self._index / len(self.tasks), share], dtype=np.float32)])

    def _model_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info = self._pad_info(info)
        info["task_index"] = self._index
        info["estimated_latency_s"] = self.estimated_latency_s
        info["start_latency_s"] = self._start_estimate
        return info
