"""The multi-task tiling environment: each episode tunes a task drawn from a list, so one policy serves many."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.resolve import open_backend
from schedule_gym.envs.episode import tile_bars
from schedule_gym.envs.observations import TaskLayout
from schedule_gym.envs.options import FEATURE_OBSERVATIONS, EnvOptions, check_action, check_reset_options
from schedule_gym.envs.tiling_env import TilingEnv
from schedule_gym.tasks import Task, get_suite, get_task, suite_names

__all__ = ["MULTITASK_RESET_OPTIONS", "MultiTaskEnv", "TaskLayout", "resolve_tasks"]

#: The reset options of the multi-task environments.
MULTITASK_RESET_OPTIONS = frozenset({"task", "start", "config", "keep_session"})


def check_multitask_options(options: EnvOptions) -> None:
    """The multi-task layout observes factors as ``"fraction"`` and holds each task's shape itself: refuse
    ``observation="log2"`` and ``include_shape`` (or use ``"features"``)."""
    if options.observation == "log2" or options.include_shape:
        raise ValueError("the multi-task environments observe observation='fraction' (their layout holds each "
                         "task's extents) or 'features'; got observation="
                         f"{options.observation!r}, include_shape={options.include_shape!r}")


def resolve_tasks(tasks: str | Sequence[Task | str | Mapping[str, Any]]) -> tuple[Task, ...]:
    """Tasks from suite names and task names: ``"resnet50,bert-base"``, ``["resnet50/conv2", gemm(...)]``, and
    tasks as plain data (:meth:`~schedule_gym.tasks.Task.to_dict`), so an environment's arguments can be JSON
    (an RLlib ``env_config``, a training script's ``--env-kwargs``).

    A task whose :attr:`~schedule_gym.tasks.Task.key` (the computation, not the name) is already listed is
    dropped, so a layer shared by two suites appears once.
    """
    items: list[Task | str] = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    out: dict[str, Task] = {}
    for item in items:
        if isinstance(item, Task):
            found: list[Task] = [item]
        elif isinstance(item, str) and item.strip() in suite_names():
            found = [s.task for s in get_suite(item.strip())]
        elif isinstance(item, str):
            found = [get_task(item.strip())]
        elif isinstance(item, Mapping):
            found = [Task.from_dict(dict(item))]
        else:
            raise TypeError(f"a task is a Task, a task name, a suite name or a task's dict, got {item!r}")
        for task in found:
            out.setdefault(task.key, task)
    if not out:
        raise ValueError(f"no tasks in {tasks!r}")
    return tuple(out.values())


class MultiTaskEnv(gym.Env[np.ndarray, np.int64]):
    """Tile-size tuning of a task drawn from a list at every episode: one policy, many operators and shapes.

    ## Description
    Every ``reset`` draws a task uniformly from ``tasks`` with ``self.np_random`` (or takes
    ``options={"task": name}``) and starts a :class:`~schedule_gym.envs.TilingEnv` episode on it (one
    ``TilingEnv`` per task, built on first use, all measuring with one backend). Moves, measurement,
    budgets and rewards are the ``TilingEnv``'s; observations and actions are padded to one fixed layout
    (:class:`TaskLayout`) so that every task fits the same spaces.

    ## Action Space
    ``Discrete(layout.max_actions)``. Action ``a`` is the task's ``TilingEnv`` action ``a`` (see its
    table: per dimension, per prime, per ordered pair of loops) when ``a`` is below the task's action
    count, else a padding action that is always illegal (masked; taken anyway, it changes nothing and
    gives ``illegal_action_penalty``). :meth:`action_masks` and ``info["action_mask"]`` have the padded size.

    ## Observation Space
    ``Box(0, 1, (len(operators) + max_dims * (max_splits + 2),), float32)``:

    | entries                       | meaning                                                         |
    |-------------------------------|-----------------------------------------------------------------|
    | ``0 .. len(operators)-1``     | one-hot of the task's operator (``conv2d``, ``dense``...)       |
    | per dimension slot ``x``:     | in the task's dimension order; slots past the task's are zero   |
    | ``max_splits`` entries        | ``log(s_x[i]) / log(extent_x)`` per loop (the ``TilingEnv``'s ``"fraction"``), zero-padded |
    | 1 entry                       | ``log2(extent_x) / 24``                                          |
    | 1 entry                       | 1 for a reduction dimension                                      |

    Operator parameters other than the shape (stride, groups) are not observed.

    ## Rewards
    The ``TilingEnv``'s ``reward`` (default ``"log_speedup_prev"``: rewards of order one on every task,
    summing over an episode to the log speed-up over its start).

    ## Starting State
    The task's ``s0`` (``start="s0"``) or a uniformly random config (``start="random"``). Reset options:
    ``task`` (a name or a :class:`~schedule_gym.tasks.Task` of the list), ``start``, ``config`` (passed to
    the ``TilingEnv``) and ``keep_session`` (true: continue the task's measurement session, its budget and
    best-so-far, instead of starting a new one; for tuners that run several episodes on one task).

    ## Episode End
    As the ``TilingEnv``: never terminated; truncated by the step limit and by ``budget_measurements``.

    ## Info
    The ``TilingEnv``'s, with ``action_mask`` padded and ``task`` (the task's name).

    ## Arguments
    ``tasks`` (suite and task names, comma-separated or as a list, or Task objects: :func:`resolve_tasks`),
    ``layout`` (a :class:`TaskLayout` or its dict; default: the smallest that fits ``tasks``), ``backend``,
    ``backend_options``, and the options of ``TilingEnv`` (:class:`~schedule_gym.envs.options.EnvOptions`;
    ``reward`` defaults to ``"log_speedup_prev"``). The native vector version is
    :class:`~schedule_gym.envs.MultiTaskVectorEnv` (``gymnasium.make_vec("schedule_gym/MultiTask-v0", N)``).

    ## Version History
    * v0: initial version. Later, without a bump: the options of ``TilingEnv`` (features, reward spaces, session
      episodes: their defaults keep v0's dynamics), the ``rgb_array`` render, and a native vector entry point
      (:class:`~schedule_gym.envs.MultiTaskVectorEnv`, equal step by step to ``SyncVectorEnv`` of this class).
      The registered id keeps its suites to the operators they held at v0 (``operators=V0_OPERATORS``).

    >>> import gymnasium, schedule_gym
    >>> env = gymnasium.make("schedule_gym/MultiTask-v0", tasks="bert-base")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, int(env.action_space.n), info["task"]
    ((26,), 50, 'bert-base/attn-pv')
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        tasks: str | Sequence[Task | str] = "resnet50,bert-base",
        layout: TaskLayout | dict[str, Any] | None = None,
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        options: EnvOptions | None = None,
        **values: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        values.setdefault("reward", "log_speedup_prev")
        self.options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        check_multitask_options(self.options)
        self.tasks = resolve_tasks(tasks)
        self.layout = TaskLayout.of(layout, self.tasks)
        self.backend, self._owns_backend = open_backend(backend, backend_options, self.tasks)
        self._by_name = {t.name: t for t in self.tasks}
        self._envs: dict[Task, TilingEnv] = {}
        self._parts: dict[Task, tuple[np.ndarray, np.ndarray]] = {}
        self.render_mode = render_mode
        self.action_space = gym.spaces.Discrete(self.layout.max_actions)
        self._features = self.options.observation in FEATURE_OBSERVATIONS
        self.observation_space = self.task_env(self.tasks[0]).observation_space if self._features else self.layout.space
        self.task: Task = self.tasks[0]
        self.env: TilingEnv | None = None  # the current task's environment (after reset)

    @property
    def illegal_action_penalty(self) -> float:
        return self.options.illegal_action_penalty

    def task_env(self, task: Task) -> TilingEnv:
        """The ``TilingEnv`` of one of the tasks (built on first use, measuring with this environment's backend)."""
        env = self._envs.get(task)
        if env is None:
            env = self._envs[task] = TilingEnv(task, backend=self.backend, options=self.options, layout=self.layout)
            self._parts[task] = self.layout.task_part(task)
        return env

    def _pick(self, task: object) -> Task:
        if isinstance(task, Task) and task.key in {t.key for t in self.tasks}:
            return next(t for t in self.tasks if t.key == task.key)
        if isinstance(task, str) and task in self._by_name:
            return self._by_name[task]
        raise ValueError(f"reset option task must be one of this environment's tasks ({', '.join(self._by_name)}), "
                         f"got {task!r}")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = check_reset_options(options, MULTITASK_RESET_OPTIONS)
        if "task" in options:
            task = self._pick(options.pop("task"))
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        keep = options.pop("keep_session", False)
        if not isinstance(keep, (bool, np.bool_)):
            raise TypeError(f"reset option keep_session must be a bool, got {keep!r}")
        inner_seed = int(self.np_random.integers(2**31))  # drawn always, so the stream does not depend on keep
        self.task, self.env = task, self.task_env(task)
        obs, info = self.env.reset(seed=None if keep else inner_seed, options=options or None)
        return self.pad(obs), self._pad_info(info)

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise RuntimeError("call reset() before step()")
        action = check_action(action, self.layout.max_actions)
        env = self.env
        if action >= env.space.n_actions:  # a padding action: always illegal
            obs, reward, terminated, truncated, info = env.illegal_step()
        else:
            obs, reward, terminated, truncated, info = env.step(action)
        return self.pad(obs), reward, terminated, truncated, self._pad_info(info)

    def action_masks(self) -> np.ndarray:
        """Bool mask of the legal actions, padded to ``layout.max_actions`` (padding is never legal)."""
        mask = np.zeros(self.layout.max_actions, dtype=bool)
        if self.env is not None:
            inner = self.env.action_masks()
            mask[: inner.size] = inner
        return mask

    def pad(self, obs: np.ndarray) -> np.ndarray:
        """The current task's observation laid out in the shared :class:`TaskLayout` (``"features"`` observations
        already are)."""
        if self._features:
            return obs
        features, positions = self._parts[self.task]
        out = features.copy()
        out[positions] = obs
        return out

    def _pad_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["action_mask"] = self.action_masks()
        info["task"] = self.task.name
        return info

    def render(self) -> str | np.ndarray | None:
        if self.env is None or self.render_mode is None:
            return None
        return self.env.render_text() if self.render_mode == "ansi" else tile_bars(self.task, self.env.tiles)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        if self._owns_backend:
            self.backend.close()
        super().close()
