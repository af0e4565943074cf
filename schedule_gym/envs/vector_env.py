"""The native vector environments: N tiling episodes stepped as arrays by the episode core.

``TilingVectorEnv`` (one task: the ``vector_entry_point`` of the per-operator ids, ``Tiling-v0`` and the table
ids) and ``MultiTaskVectorEnv`` (a task drawn per episode: ``MultiTask-v0``'s) are thin shells over
:class:`~schedule_gym.envs.core.VectorEpisodes`: they parse seeds and options, run Gymnasium's autoreset
modes and lay the core's arrays out as Gymnasium's vector info.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.core import MAX_DENSE_CONFIGS, VectorEpisodes
from schedule_gym.envs.resolve import open_backend, positive_int
from schedule_gym.envs.multitask_env import MULTITASK_RESET_OPTIONS, check_multitask_options, resolve_tasks
from schedule_gym.envs.observations import TaskLayout
from schedule_gym.envs.options import EnvOptions, check_reset_options
from schedule_gym.registration import MAX_EPISODE_STEPS
from schedule_gym.spaces import Config
from schedule_gym.tasks import Task, get_task

__all__ = ["MAX_DENSE_CONFIGS", "EpisodesVectorEnv", "MultiTaskVectorEnv", "TilingVectorEnv"]


class EpisodesVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """What both vector environments share: seeds, reset options, autoreset, info (Gymnasium's conventions)."""

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}
    #: reset options besides ``reset_mask``
    RESET_OPTIONS: frozenset[str] = frozenset({"start", "config"})

    def _setup(self, num_envs: int, tasks: Sequence[Task], backend: str | LatencyBackend,
               backend_options: dict[str, Any] | None, options: EnvOptions, layout: TaskLayout | None,
               max_episode_steps: int | None, autoreset_mode: AutoresetMode | str, render_mode: str | None,
               draw_task: bool, core: Callable[[LatencyBackend], Any] | None = None) -> None:
        """Check the shell's arguments, open the backend and make the core (:class:`VectorEpisodes`, or what
        ``core(backend)`` makes: an object with its interface)."""
        num_envs = positive_int(num_envs, "num_envs")
        max_episode_steps = positive_int(max_episode_steps, "max_episode_steps", allow_none=True)
        try:
            autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            autoreset_mode = None  # type: ignore[assignment]
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be AutoresetMode.NEXT_STEP or SAME_STEP, got {autoreset_mode!r}")
        if render_mode is not None:
            raise ValueError(f"the vector environment does not render; render_mode must be None, got {render_mode!r}")
        if options.budget_seconds is not None:
            raise ValueError(
                "budget_seconds is not supported by the vector environment (the batch spends wall time, not one "
                "sub-environment); use budget_measurements or budget_fraction"
            )
        self.backend, self._owns_backend = open_backend(backend, backend_options, tasks)
        try:
            self.core = core(self.backend) if core is not None else VectorEpisodes(
                num_envs, tasks, self.backend, options, layout, max_episode_steps,
                session_per_episode=draw_task or options.episode == "session", draw_task=draw_task)
        except BaseException:
            if self._owns_backend:
                self.backend.close()
            raise
        self.options = options
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.max_measurements = self.core.max_measurements
        self.metadata = {**self.metadata, "autoreset_mode": autoreset_mode}
        self.autoreset_mode = autoreset_mode
        self.render_mode = None
        self.single_observation_space = self.core.observation_space
        self.single_action_space = gym.spaces.Discrete(self.core.n_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._needs_reset = True

    # -------------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        n = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            super().reset(seed=None if seed is None else int(seed))
            seeds: list[int | None] = [None] * n if seed is None else [int(seed) + i for i in range(n)]
        elif isinstance(seed, Sequence) and not isinstance(seed, str):
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed as a list needs one seed per environment ({n}), got {len(seeds)}")
        else:
            raise TypeError(f"seed must be an int, a list of {n} ints or None, got {seed!r}")
        options = check_reset_options(options, self.RESET_OPTIONS | {"reset_mask"})
        mask = options.pop("reset_mask", None)
        start = options.get("start")
        if start is not None and start not in ("s0", "random"):
            raise ValueError(f"reset option start must be one of ('s0', 'random'), got {start!r}")
        if mask is None:
            envs = self.core.all
        else:
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({n},), got {mask!r}")
            if self._needs_reset and not mask.all():
                raise RuntimeError("the first reset() must reset every environment (no reset_mask or an all-True one)")
            envs = np.flatnonzero(mask)
        self.core.seed(envs.tolist(), [seeds[e] for e in envs.tolist()])
        new = np.zeros(n, dtype=bool)
        new[envs] = self.core.reset(envs, start, options.get("config"), options.get("task"))
        self._needs_reset = False
        in_reset = np.zeros(n, dtype=bool)
        in_reset[envs] = True
        return self.core.observe(), self._info(np.ones(n, dtype=bool), new, in_reset)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        core = self.core
        actions = core.check_actions(actions)
        n = self.num_envs
        rewards = np.zeros(n)
        truncated = np.zeros(n, dtype=bool)
        legal = np.ones(n, dtype=bool)
        new = np.zeros(n, dtype=bool)
        if core.done.any():  # NEXT_STEP: these reset now and ignore their action
            resetting = core.done.copy()
            envs = np.flatnonzero(resetting)
            new[envs] = core.reset(envs)
            active = np.flatnonzero(~resetting)
        else:
            active = core.all
        if active.size:
            core.step(active, actions[active], rewards, truncated, legal, new)
        terminated = np.zeros(n, dtype=bool)
        info = self._info(legal, new)
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            ended = truncated | terminated
            if ended.any():
                envs = np.flatnonzero(ended)
                info["final_obs"] = core.observe()
                info["_final_obs"] = ended
                info["final_info"] = {k: v for k, v in info.items() if k != "final_obs" and k != "_final_obs"}
                info["_final_info"] = ended
                legal_now, new_now = legal.copy(), new.copy()
                legal_now[envs] = True
                new_now[envs] = core.reset(envs)
                reset_info = self._info(legal_now, new_now)
                for key in reset_info:
                    info[key] = reset_info[key]
        else:
            core.done = truncated | terminated
        return core.observe(), rewards, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """``(N, n_actions)`` bool: the legal actions of every sub-environment (for MaskablePPO)."""
        return self.core.action_masks()

    def _info(self, legal: np.ndarray, new: np.ndarray, present: np.ndarray | None = None) -> dict[str, Any]:
        core = self.core
        has_best = core.best_index >= 0
        info: dict[str, Any] = {
            "index": np.array(core.index),
            "latency_s": core.last_s.copy(),
            "legal": legal,
            "new_measurement": new,
            "best_latency_s": np.where(has_best, core.best_s, np.nan),
            "best_index": core.best_index.copy(),
            "num_measurements": core.count.copy(),
            "budget_exhausted": core.budget_exhausted(),
            "action_mask": core.action_masks(),
        }
        self._more_info(info)
        mask = np.ones(self.num_envs, dtype=bool) if present is None else present
        for key in list(info):
            info["_" + key] = mask
        return info

    def _more_info(self, info: dict[str, Any]) -> None:
        """Keys a subclass adds to every info."""

    @property
    def num_measurements(self) -> np.ndarray:
        """Unique configs each sub-environment's session evaluated (what its budget counts)."""
        return self.core.count.copy()

    def close_extras(self, **kwargs: Any) -> None:
        if self._owns_backend:
            self.backend.close()


class TilingVectorEnv(EpisodesVectorEnv):
    """``num_envs`` copies of :class:`~schedule_gym.envs.TilingEnv` on one task, stepped as arrays.

    Every sub-environment behaves exactly as a ``TilingEnv`` wrapped in ``TimeLimit(max_episode_steps)``
    with the same arguments: the same actions, observations, rewards (every reward space, the illegal-action
    and failure penalties, the ``s0`` reference measured at the start of a session), starts (``"s0"``,
    ``"random"`` drawn from the sub-environment's own generator, seeded ``seed + i`` as in
    ``SyncVectorEnv``), budgets and sessions. The tests check trajectories against ``SyncVectorEnv`` of
    ``TilingEnv`` step by step.

    ## State and stepping
    The state is an ``(N, n_dims)`` array of rows in the per-dimension factorisation tables of the
    :class:`~schedule_gym.spaces.TileSpace`; a step looks the next rows up in the ``next_row`` tables (one
    flattened table, one fancy index), gathers observations from the tables ``TilingEnv`` uses and
    latencies from the backend's :class:`~schedule_gym.backends.LatencyTable` (see
    :mod:`schedule_gym.envs.core`).

    ## Latencies
    Deterministic backends only: the noise-free mock (scored in the mock's own chunks, so latencies are
    bit-identical to ``MockBackend.measure``) and replay tables without a delegate (a dense array built
    once; a failed record is NaN and gives ``failure_penalty``; a censored record is rewarded at its bound
    as in ``TilingEnv``, is never a best, and cannot be ``s0``'s reference: ``MissingRecordError``). Because
    latencies are deterministic, one latency table serves all sub-environments; each sub-environment keeps
    its own *session*: the set of unique configs it evaluated (what the budget counts and
    ``new_measurement`` reports), its best and its ``s0`` reference. ``budget_seconds`` is refused: wall time
    is spent by the batch, not by one sub-environment. Other backends (TVM, RPC, a noisy mock): use
    ``gymnasium.make_vec(id, num_envs=N, vectorization_mode="sync")``.

    ## Autoreset
    ``autoreset_mode`` is ``AutoresetMode.NEXT_STEP`` (default, Gymnasium's, as ``SyncVectorEnv``): the step
    after a sub-environment ends resets it, ignoring its action, and returns reward 0 and the reset
    observation and info. ``AutoresetMode.SAME_STEP``: a sub-environment that ends is reset in the same
    step; its final observation and info are ``info["final_obs"]`` (an ``(N, obs)`` array) and
    ``info["final_info"]`` (masked by ``info["_final_obs"]`` / ``info["_final_info"]``). An autoreset, like
    ``reset()`` without a seed, keeps the sub-environment's session (budget, best) unless
    ``episode="session"``; ``reset(seed=...)`` starts new sessions.

    ## Info
    Arrays over the sub-environments, each with its ``_key`` mask: ``index`` (the config's dense index;
    :meth:`configs` gives them as tuples), ``latency_s`` (NaN where ``TilingEnv`` gives ``None``), ``legal``,
    ``new_measurement``, ``best_latency_s`` (NaN: none yet), ``best_index`` (-1: none), ``num_measurements``,
    ``budget_exhausted`` and ``action_mask`` ((N, n_actions); also :meth:`action_masks`).

    ## Arguments
    ``num_envs``, ``max_episode_steps`` (``None``: no step limit) and ``autoreset_mode``, then those of
    ``TilingEnv`` except ``budget_seconds`` and ``render_mode``. ``reset`` takes ``seed`` (an int: ``seed + i``;
    a list: one per sub-environment) and ``options`` ``{"start", "config", "reset_mask"}``.

    >>> import gymnasium, schedule_gym
    >>> envs = gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=3, m=256, k=256, n=256)
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, envs.action_masks().shape
    ((3, 10), (3, 26))
    >>> obs, rewards, terminated, truncated, info = envs.step(np.array([23, 23, 0]))  # n: 2x[3] /2[0] twice, m: 2x[0] /2[1]
    >>> rewards.round(2).tolist(), info["legal"].tolist()
    ([1.98, 1.98, -1.0], [True, True, False])
    """

    def __init__(
        self,
        num_envs: int = 1,
        task: Task | str = "gemm-1024",
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        max_episode_steps: int | None = MAX_EPISODE_STEPS,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        options: EnvOptions | None = None,
        **values: Any,
    ) -> None:
        if isinstance(task, str):
            task = get_task(task)
        if not isinstance(task, Task):
            raise TypeError(f"task must be a Task or a preset name, got {task!r}")
        options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        self.task = task
        self._setup(num_envs, [task], backend, backend_options, options, None, max_episode_steps, autoreset_mode,
                    render_mode, draw_task=False)
        self.space = self.core.spaces[0]
        self.reward_mode = options.reward.name
        self.start = options.start

    def configs(self) -> list[Config]:
        """The current config of every sub-environment."""
        space = self.space
        return [space.config_of_rows(r) for r in self.core.rows.tolist()]


class MultiTaskVectorEnv(EpisodesVectorEnv):
    """``num_envs`` copies of :class:`~schedule_gym.envs.MultiTaskEnv`, stepped as arrays (``MultiTask-v0``'s
    ``vector_entry_point``).

    Every sub-environment behaves exactly as a ``MultiTaskEnv`` wrapped in ``TimeLimit(max_episode_steps)``
    with the same arguments: each reset draws the task from the sub-environment's generator (or takes
    ``options={"task": name}``), then a seed for the episode's start draw, and starts a new measurement
    session on that task; actions past the task's own are padding (always illegal); observations use the
    environments' :class:`~schedule_gym.envs.TaskLayout`. The tests check trajectories against
    ``SyncVectorEnv`` of ``MultiTaskEnv``.

    ## Info
    ``TilingVectorEnv``'s, plus ``task`` (each sub-environment's task as its position in :attr:`tasks`).

    ## Arguments
    ``num_envs``, ``max_episode_steps``, ``autoreset_mode``, then those of ``MultiTaskEnv`` (``tasks``,
    ``layout``, ``backend``, ``backend_options`` and the options of ``TilingEnv`` except ``budget_seconds``).
    ``reset`` takes ``seed`` and ``options`` ``{"task", "start", "config", "reset_mask"}``.

    >>> import gymnasium, schedule_gym
    >>> envs = gymnasium.make_vec("schedule_gym/MultiTask-v0", num_envs=4, tasks="bert-base")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, envs.action_masks().shape, [envs.unwrapped.tasks[t].name for t in info["task"]][:2]
    ((4, 26), (4, 50), ['bert-base/attn-pv', 'bert-base/ffn-down'])
    """

    RESET_OPTIONS = frozenset(MULTITASK_RESET_OPTIONS - {"keep_session"})

    def __init__(
        self,
        num_envs: int = 1,
        tasks: str | Sequence[Task | str] = "resnet50,bert-base",
        layout: TaskLayout | dict[str, Any] | None = None,
        backend: str | LatencyBackend = "mock",
        backend_options: dict[str, Any] | None = None,
        max_episode_steps: int | None = MAX_EPISODE_STEPS,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        options: EnvOptions | None = None,
        **values: Any,
    ) -> None:
        values.setdefault("reward", "log_speedup_prev")
        options = options.with_values(**values) if options is not None else EnvOptions.of(**values)
        check_multitask_options(options)
        self.tasks = resolve_tasks(tasks)
        self.layout = TaskLayout.of(layout, self.tasks)
        self._setup(num_envs, self.tasks, backend, backend_options, options, self.layout, max_episode_steps,
                    autoreset_mode, render_mode, draw_task=True)

    def _more_info(self, info: dict[str, Any]) -> None:
        info["task"] = self.core.task.copy()
