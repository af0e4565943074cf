"""Tuning a whole model: a total measurement budget spread over its tasks, any agent on each task.

:func:`tune_model` takes a :class:`~schedule_gym.models.mapping.MappedModel` and runs rounds: the task
scheduler (:mod:`schedule_gym.models.scheduler`, Ansor's gradient scheduler by default) picks a task,
and the agent tunes it through a :class:`~schedule_gym.envs.TilingEnv` with its budget raised by one
round. An agent is re-run from its seed each round with the larger budget: the configs it measured
before are served from the session's cache (free), so it replays its earlier decisions and only the
round's new configs are measured. Every task shares one backend and one record file, so a resumed
model run measures nothing twice (the record file serves what an earlier run measured); a task that gets no
round in a resumed run (a smaller budget than the run that measured it) takes the records' fastest of it, and its
finalists are the records' fastest too.

A task on a packed template (``batch_matmul-cpu-v4``, ``dense-``, ``conv2d-cpu-v5``, ``gemm-cpu-v6``) first measures
up to ``analytical`` configs that BLIS's analytical model picks for this machine
(:func:`~schedule_gym.templates.analytical.analytical_configs`), out of its first round; the agent spends the rest
of the round and every later one, and the task's best is the best of both. The agent does not see those
measurements (its own decisions stay the same, seeded), unless it is an agent with a start told
``start="analytical"`` (:data:`ANALYTICAL_START`): it then searches from the best pick. The picks are in the
record file like every other measurement.

On a backend that measures hardware, ``finalists=k`` then times each task's ``k`` fastest configs again, in
rounds over all tasks, and picks the lowest median (:mod:`~schedule_gym.models.finalists`): one measurement
taken in a disturbed moment no longer decides which kernel the model is built with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from schedule_gym.backends import LatencyBackend, make_backend
from schedule_gym.backends.replay import ReplayBackend
from schedule_gym.models.finalists import FINALIST_ROUNDS, Finalist, retime_finalists
from schedule_gym.models.mapping import MappedModel
from schedule_gym.models.scheduler import GradientTaskScheduler, RoundResult, SchedulerTask, run_schedule, similarity_tag
from schedule_gym.templates.analytical import MicroArch, analytical_configs
from schedule_gym.types import Config, MeasureResult

__all__ = ["ANALYTICAL_PICKS", "ANALYTICAL_START", "ROUND_MEASUREMENTS", "ModelTuneResult", "TaskOutcome",
           "default_round", "tune_model"]

#: Measurements per scheduler round when the budget allows (Ansor's batch of measurements per round).
ROUND_MEASUREMENTS = 16
#: ``agent_params={"start": ANALYTICAL_START}``: an agent with a start (``gbfs``, ``na2c``) starts from the
#: best analytical pick of its task (``s0`` where the task has none)
ANALYTICAL_START = "analytical"
#: analytical picks a packed task measures first by default: each of the two best micro-tiles at two block counts
#: and with a deeper ``KC`` (:func:`~schedule_gym.templates.analytical.analytical_configs`' order)
ANALYTICAL_PICKS = 6


def default_round(budget: int, tasks: int) -> int:
    """Measurements per round unless told: :data:`ROUND_MEASUREMENTS`, or fewer so that ``budget`` gives each of
    ``tasks`` tasks a round (the scheduler's first rounds visit every task once; a task left without a round has
    no measurement and keeps the mock's pick).

    >>> default_round(1000, 24), default_round(288, 24), default_round(10, 24)
    (16, 12, 1)
    """
    return max(1, min(ROUND_MEASUREMENTS, budget // max(1, tasks)))


@dataclass
class TaskOutcome:
    """One task of the model after tuning."""

    name: str
    weight: int
    flops: int
    measurements: int = 0
    #: the pick's latency: its re-timed median where the finalists were re-timed, else its tuned measurement
    best_latency_s: float | None = None
    best_config: Config | None = None
    #: the finalists re-timed, the pick first (empty: not re-timed)
    finalists: list[Finalist] = field(default_factory=list)

    @property
    def tuned_config(self) -> Config | None:
        """The config of the fastest tuned measurement: the pick had the finalists not been re-timed."""
        if not self.finalists:
            return self.best_config
        return min(self.finalists, key=lambda f: f.tuned_s).config

    def to_dict(self) -> dict[str, Any]:
        config = None if self.best_config is None else [list(f) for f in self.best_config]
        return {"task": self.name, "weight": self.weight, "flops": self.flops, "measurements": self.measurements,
                "best_latency_s": self.best_latency_s, "best_config": config,
                "finalists": [f.to_dict() for f in self.finalists]}


@dataclass
class ModelTuneResult:
    """The tasks' outcomes, the scheduler's rounds and the model's estimated kernel time."""

    tasks: list[TaskOutcome]
    history: list[dict] = field(default_factory=list)

    @property
    def configs(self) -> dict[str, Config]:
        return {t.name: t.best_config for t in self.tasks if t.best_config is not None}

    @property
    def estimated_latency_s(self) -> float | None:
        """Sum of weight x best latency of the tuned kernels (None while a task has no result)."""
        if any(t.best_latency_s is None for t in self.tasks):
            return None
        return math.fsum(t.weight * t.best_latency_s for t in self.tasks)  # type: ignore[operator]

    @property
    def measurements(self) -> int:
        return sum(t.measurements for t in self.tasks)

    @property
    def tuned_configs(self) -> dict[str, Config]:
        """The configs of each task's fastest tuned measurement: the picks had no finalist been re-timed."""
        return {t.name: t.tuned_config for t in self.tasks if t.tuned_config is not None}

    @property
    def changed_picks(self) -> list[str]:
        """The tasks whose re-timed finalists picked another config than their fastest tuned measurement."""
        return [t.name for t in self.tasks if t.tuned_config != t.best_config]

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": [t.to_dict() for t in self.tasks], "history": self.history,
                "estimated_latency_s": self.estimated_latency_s, "measurements": self.measurements}


class _TaskTuner:
    """One task's environment and agent; :meth:`round` raises its budget by ``n`` and re-runs the agent."""

    def __init__(self, task: Any, backend: LatencyBackend, agent: str, seed: int, agent_params: dict,
                 picks: list[Config] | None = None) -> None:
        from schedule_gym.agents import make_agent
        from schedule_gym.envs import TilingEnv

        self.env = TilingEnv(task=task, backend=backend)
        self.agent_name, self.seed, self.agent_params = agent, seed, agent_params
        self.best_pick: tuple[float, Config] | None = None
        make_agent(agent, seed, **self._params())  # bad agent names / parameters fail before any measurement
        self.spent = 0  # new configs measured for this task, picks included
        self.agent_seen = 0  # configs the agent's last run counted (a pick it met again included): its next budget
        self.picks = list(picks or [])  # analytical picks not measured yet
        self.best: tuple[float, Config] | None = None
        self.recorded: list[MeasureResult] = []  # what the records hold of a task with no round in this run

    def _params(self) -> dict:
        """The agent's parameters, ``start="analytical"`` read as the best analytical pick (``s0`` without one)."""
        if self.agent_params.get("start") != ANALYTICAL_START:
            return self.agent_params
        return {**self.agent_params, "start": "s0" if self.best_pick is None else self.best_pick[1]}

    def _offer(self, latency_s: float | None, config: Config | None) -> None:
        if latency_s is not None and config is not None and (self.best is None or latency_s < self.best[0]):
            self.best = (latency_s, config)

    def round(self, n: int) -> RoundResult:
        from schedule_gym.agents import Budget, make_agent

        session = self.env.unwrapped.session
        before = session.num_known
        if self.picks:  # out of the first round, keeping at least half of it for the agent
            take, self.picks = self.picks[: n // 2], []
            if take:
                budget = session.budget
                session.start(measurements=len(take))
                for config, result in zip(take, session.measure(take)):
                    if result is not None and result.exact:
                        self._offer(result.latency_s, config)
                        if self.best_pick is None or result.latency_s < self.best_pick[0]:
                            self.best_pick = (result.latency_s, config)
                session.set_budget(*budget)
        picked = session.num_known - before
        left = n - picked
        if left > 0:
            agent = make_agent(self.agent_name, self.seed, **self._params())
            result = agent.run(self.env, Budget(measurements=self.agent_seen + left))
            self.agent_seen = session.num_measurements
            self._offer(result.best_latency_s, result.best_config)
        new = session.num_known - before
        self.spent += new
        return RoundResult(new, None if self.best is None else self.best[0])

    def adopt_records(self, backend: ReplayBackend) -> None:
        """For a task that got no round in this run (a resumed run with a smaller budget): the records' results
        of it, the fastest its best."""
        self.recorded = backend.recorded(self.env.unwrapped.session.task)
        if self.recorded:
            self._offer(self.recorded[0].latency_s, self.recorded[0].config)

    def fastest(self, k: int) -> list[MeasureResult]:
        """The ``k`` fastest exact results this run measured or replayed, else the records' (:meth:`adopt_records`)."""
        return self.env.unwrapped.session.fastest(k) or self.recorded[:k]

    def close(self) -> None:
        self.env.close()


def tune_model(
    mapped: MappedModel,
    budget: int,
    agent: str = "xgb",
    backend: str | LatencyBackend = "mock",
    backend_options: dict[str, Any] | None = None,
    records: str | None = None,
    seed: int = 0,
    round_measurements: int | None = None,
    strategy: str = "gradient",
    agent_params: dict[str, Any] | None = None,
    progress: Callable[[dict], None] | None = None,
    analytical: int = ANALYTICAL_PICKS,
    finalists: int = 3,
    finalist_rounds: int = FINALIST_ROUNDS,
) -> ModelTuneResult:
    """Tune every task of ``mapped`` with ``agent`` within ``budget`` measurements in all.

    Args:
        mapped: the model's tasks (:func:`~schedule_gym.models.mapping.map_model`).
        budget: total new measurements over all tasks.
        agent: a registered tile agent (``schedule-gym tune --help`` lists them).
        backend: ``"mock"``, ``"tvm"``, ``"rpc"`` or a backend object (shared by all tasks; not closed).
        backend_options: options of a backend made by name.
        records: a record file every task reads and appends to (resume: nothing is measured twice; a task that
            gets no round in this run takes the records' fastest).
        seed: the agents' seed (and the scheduler's).
        round_measurements: measurements per scheduler round (default :func:`default_round`: 16, or fewer so that
            every task gets a round).
        strategy: ``"gradient"`` (Ansor's task scheduler) or ``"round-robin"``.
        agent_params: keyword arguments of the agent.
        progress: called after every round with the scheduler's row (task, measurements, best...).
        analytical: analytical picks each task on a packed template measures first, in its first round (at most
            half of it); 0: none, the agent alone (see the module docstring).
        finalists: on a backend that measures hardware, each task's this many fastest configs are timed again
            after the schedule, ``finalist_rounds`` times each, and the lowest median is the task's pick
            (:func:`~schedule_gym.models.finalists.retime_finalists`; no new config is measured, and a run resumed
            from its records times them again); 0 or 1: the fastest tuned measurement is the pick, so that a resumed
            run picks what the records say. A mock's latencies are its model's: nothing is re-timed.
        finalist_rounds: timings of each finalist.
    """
    from schedule_gym.agents import AGENTS, SCHEDULE_AGENTS

    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive number of measurements, got {budget!r}")
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; known agents: {', '.join(AGENTS)}")
    if agent in SCHEDULE_AGENTS:
        raise ValueError(f"agent {agent!r} tunes loop orders too; a model is tuned with tile agents")
    if not mapped.tasks:
        raise ValueError("the model has no tunable task: no sub-graph was mapped (see its mapping report)")
    if isinstance(analytical, bool) or not isinstance(analytical, int) or analytical < 0:
        raise ValueError(f"analytical must be a non-negative number of configs, got {analytical!r}")
    if isinstance(finalists, bool) or not isinstance(finalists, int) or finalists < 0:
        raise ValueError(f"finalists must be a non-negative number of configs per task, got {finalists!r}")
    if isinstance(finalist_rounds, bool) or not isinstance(finalist_rounds, int) or finalist_rounds < 1:
        raise ValueError(f"finalist_rounds must be a positive number of timings, got {finalist_rounds!r}")
    owns = not isinstance(backend, LatencyBackend)
    options = dict(backend_options or {})
    if records is not None:
        options["records"] = records
    shared = make_backend(backend, **options) if owns else backend
    if not owns and records is not None:
        raise ValueError("give records= with a backend name, or wrap your backend object in a ReplayBackend yourself")
    tuners: list[_TaskTuner] = []
    try:
        arch = MicroArch.of_host(cores=options.get("num_threads")) if analytical else None
        for model_task in mapped.tasks:
            picks = analytical_configs(model_task.task, arch, analytical)  # none when analytical == 0
            tuners.append(_TaskTuner(model_task.task, shared, agent, seed, dict(agent_params or {}), picks))
        sched_tasks = [SchedulerTask(t.task.name, float(t.weight), float(t.task.flops), similarity_tag(t.task.op, t.task.flops))
                       for t in mapped.tasks]
        if round_measurements is None:
            round_measurements = default_round(budget, len(sched_tasks))
        scheduler = GradientTaskScheduler(sched_tasks, round_measurements, seed=seed, strategy=strategy)
        history = run_schedule(scheduler, lambda i, n: tuners[i].round(n), budget, progress)
        if isinstance(shared, ReplayBackend):
            for tuner in tuners:
                if tuner.best is None:
                    tuner.adopt_records(shared)
        tables: list[list[Finalist]] = [[] for _ in tuners]
        if finalists > 1 and shared.measuring_backend.measures_hardware:
            candidates = [(tuner.env.unwrapped.session.task, tuner.fastest(finalists)) for tuner in tuners]
            tables = retime_finalists(shared.measuring_backend, candidates, finalist_rounds)
        outcomes = []
        for model_task, tuner, table in zip(mapped.tasks, tuners, tables):
            best = tuner.best
            if table and table[0].retimed_s is not None:
                best = (table[0].retimed_s, table[0].config)
            outcomes.append(TaskOutcome(model_task.task.name, model_task.weight, model_task.task.flops, tuner.spent,
                                        None if best is None else best[0], None if best is None else best[1], table))
        return ModelTuneResult(outcomes, history)
    finally:
        for tuner in tuners:
            tuner.close()
        if owns:
            shared.close()
