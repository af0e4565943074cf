"""Fixed generalisation protocols: training tasks, held-out tasks, a budget, seeds and one metric.

A :class:`Protocol` names its training and held-out tasks by suite or task name; held-out tasks are compared
with training tasks by :attr:`~schedule_gym.tasks.Task.key` (the computation: operator, parameters, shape,
splits, dtype, loop order), and a held-out task whose key is also a training task's is dropped from the
held-out split (ResNet-18 shares layers with ResNet-50), so no held-out computation is ever trained on.

The metric is the **median over held-out tasks of the regret** ``best_found / reference - 1`` (each task's
regret the mean over seeds), on the deterministic mock backend with a named profile. The reference is

* ``"exact"``: the mock's optimum over the whole space (:meth:`MockBackend.score_space`), for spaces of at
  most ``exact_limit`` configs;
* ``"search"``: for larger spaces, the best of ``REFERENCE_SAMPLES`` configs drawn uniformly (seed 0) and
  greedy descent (best neighbour, until none is better) from the best ``REFERENCE_STARTS`` of them. It is a
  strong reference, not the optimum: an agent can beat it, giving a negative regret.

References are cached in the user cache (``<cache>/benchmark/references.json``) by mock target and task key.

With ``run_protocol(..., ray=ADDRESS)`` every (held-out task, seed) run is a Ray task, and so is every
reference the cache does not hold yet (:mod:`schedule_gym.benchmark.ray_fanout`); the row is the one a
single machine makes. The tuner is then rebuilt on the workers from plain data: :func:`agent_tuner`'s (an
agent's name and parameters) or :func:`policy_tuner`'s given a policy file (the file's bytes).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from schedule_gym.backends.mock import MockBackend
from schedule_gym.envs.multitask_env import TaskLayout, resolve_tasks
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import V0_OPERATORS, Task, expand_suites, gemm

__all__ = ["PROTOCOLS", "RAY_TIMEOUT_S", "REFERENCE_SAMPLES", "REFERENCE_STARTS", "AgentTuner", "PolicyTuner",
           "Protocol", "agent_tuner", "cached_reference", "compute_reference", "get_protocol", "policy_tuner",
           "reference_kind", "reference_latency", "run_protocol", "store_reference"]

#: configs drawn for a ``"search"`` reference, and how many of the best start a greedy descent
REFERENCE_SAMPLES = 20_000
REFERENCE_STARTS = 8
#: the longest ``run_protocol(..., ray=...)`` waits for the next Ray task to finish before it gives up
RAY_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Protocol:
    """A generalisation protocol. ``train`` and ``held_out``: comma-separated suite or task names (or Task
    tuples); ``budget``: unique measurements per held-out task and seed; ``seeds``: the default seeds;
    ``operators``: the operators whose layers its suites hold (comma-separated; None: every layer)."""

    name: str
    train: str | tuple[Task, ...]
    held_out: str | tuple[Task, ...]
    budget: int = 100
    seeds: tuple[int, ...] = (0, 1)
    profile: str = "znver5-2core-fitted"
    exact_limit: int = 200_000
    description: str = ""
    operators: str | None = None

    def train_tasks(self) -> tuple[Task, ...]:
        return resolve_tasks(expand_suites(self.train, self.operators))

    def held_out_tasks(self) -> tuple[Task, ...]:
        """The held-out tasks, less any whose key is a training task's."""
        train_keys = {t.key for t in self.train_tasks()}
        return tuple(t for t in resolve_tasks(expand_suites(self.held_out, self.operators)) if t.key not in train_keys)

    def layout(self) -> TaskLayout:
        """One observation/action layout for both splits (a policy trained on one runs on the other)."""
        return TaskLayout.of_tasks(self.train_tasks() + self.held_out_tasks())

    def env_kwargs(self, split: str = "train") -> dict[str, Any]:
        """Keyword arguments of a :class:`~schedule_gym.envs.MultiTaskEnv` on one split."""
        tasks = {"train": self.train_tasks, "held_out": self.held_out_tasks}[split]()
        return {"tasks": list(tasks), "layout": self.layout().to_dict(),
                "backend_options": {"profile": self.profile}}

    def to_dict(self) -> dict[str, Any]:
        def names(x: str | tuple[Task, ...]) -> str:
            return x if isinstance(x, str) else ",".join(t.name for t in x)
        return {"name": self.name, "train": names(self.train), "held_out": names(self.held_out), "budget": self.budget,
                "seeds": list(self.seeds), "profile": self.profile, "exact_limit": self.exact_limit,
                **({"operators": self.operators} if self.operators is not None else {})}


PROTOCOLS: dict[str, Protocol] = {
    # Train on ResNet-50 and BERT-base layers; hold out two whole networks, ResNet-18 and MobileNet-V2
    # (depthwise convolutions, never seen in training), less the layers ResNet-18 shares with ResNet-50.
    "v0": Protocol("v0", train="resnet50,bert-base", held_out="resnet18,mobilenetv2", budget=100, seeds=(0, 1),
                   description="train ResNet-50 + BERT-base, hold out ResNet-18 + MobileNet-V2; 100 measurements",
                   operators=V0_OPERATORS),
    # Seconds-long protocol for tests and smoke runs: small GEMMs whose spaces are scored exactly.
    "smoke": Protocol(
        "smoke",
        train=(gemm(32, 32, 32, d_m=2, d_k=2, d_n=2, name="smoke-train-32"),
               gemm(64, 16, 64, d_m=2, d_k=2, d_n=2, name="smoke-train-64x16x64")),
        held_out=(gemm(16, 64, 32, d_m=2, d_k=2, d_n=2, name="smoke-held-16x64x32"),
                  gemm(64, 64, 16, d_m=2, d_k=2, d_n=2, name="smoke-held-64x64x16")),
        budget=10, seeds=(0,),
        description="tiny GEMMs, exact optima, 10 measurements",
    ),
}


def get_protocol(name: str | Protocol) -> Protocol:
    if isinstance(name, Protocol):
        return name
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; known protocols: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


# ----------------------------------------------------------------------------------------------- references
def _references_path() -> Path:
    from schedule_gym.cache import cache_dir

    return cache_dir() / "benchmark" / "references.json"


def _greedy_descent(backend: MockBackend, task: Task, space: TileSpace, index: int, latency: float) -> tuple[int, float]:
    strides = space.strides
    while True:
        rows = space.rows_of_index(index)
        neighbours = []
        for x, d in enumerate(space.dims):
            for new_row in d.next_row_lists[rows[x]]:
                if new_row >= 0:
                    neighbours.append(index + (new_row - rows[x]) * strides[x])
        if not neighbours:
            return index, latency
        scores = backend.model_latency_s(task, np.array(neighbours, dtype=np.int64))
        best = int(np.argmin(scores))
        if scores[best] >= latency:
            return index, latency
        index, latency = neighbours[best], float(scores[best])


def reference_kind(task: Task, backend: MockBackend, exact_limit: int) -> str:
    """``"exact"`` for a space of at most ``exact_limit`` configs, else ``"search"``."""
    return "exact" if backend.space(task).size <= exact_limit else "search"


def _reference_key(task: Task, backend: MockBackend, kind: str) -> str:
    target = backend.record_context(task)[0]
    return f"{target}|{task.key}|{kind}" + ("" if kind == "exact" else f"|{REFERENCE_SAMPLES}x{REFERENCE_STARTS}")


def _read_references() -> dict[str, float]:
    path = _references_path()
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def cached_reference(task: Task, backend: MockBackend, exact_limit: int) -> tuple[float, str] | None:
    """The task's reference ``(latency_s, kind)`` from the cache (None: not there). Reads only."""
    kind = reference_kind(task, backend, exact_limit)
    latency = _read_references().get(_reference_key(task, backend, kind))
    return None if latency is None else (float(latency), kind)


def compute_reference(task: Task, backend: MockBackend, kind: str) -> float:
    """The task's reference latency of ``kind`` (see the module docstring), computed; no cache."""
    if kind == "exact":
        return float(backend.score_space(task).min())
    space = backend.space(task)
    rng = np.random.default_rng(0)
    sample = np.unique(np.concatenate([
        space.sample_indices(rng, min(REFERENCE_SAMPLES, space.size)),
        [space.index_of_rows(space.rows(space.initial_config()))],
    ]))
    scores = backend.model_latency_s(task, sample)
    order = np.argsort(scores, kind="stable")[:REFERENCE_STARTS]
    return min(_greedy_descent(backend, task, space, int(sample[i]), float(scores[i]))[1] for i in order)


def store_reference(task: Task, backend: MockBackend, kind: str, latency_s: float) -> None:
    """Add a reference to the cache: the whole file rewritten beside it and renamed over it, so a reader
    never sees half a file (two processes storing at once may lose one entry, recomputed when next needed)."""
    cached = _read_references()
    cached[_reference_key(task, backend, kind)] = latency_s
    path = _references_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cached, indent=0, sort_keys=True) + "\n")
    tmp.replace(path)


def reference_latency(task: Task, backend: MockBackend, exact_limit: int, use_cache: bool = True) -> tuple[float, str]:
    """``(latency_s, kind)`` of the task's reference: ``"exact"`` or ``"search"`` (see the module docstring)."""
    if use_cache:
        found = cached_reference(task, backend, exact_limit)
        if found is not None:
            return found
    kind = reference_kind(task, backend, exact_limit)
    latency = compute_reference(task, backend, kind)
    if use_cache:
        store_reference(task, backend, kind, latency)
    return latency, kind


# ----------------------------------------------------------------------------------------------- running
#: ``tune(task, backend, seed, budget) -> best latency (s) or None``: how one held-out task is tuned
Tuner = Callable[[Task, MockBackend, int, int], "float | None"]


@dataclass(frozen=True)
class AgentTuner:
    """A tuner running a registered search agent (:func:`schedule_gym.agents.make_agent`) on a TilingEnv.
    Plain data, the agent's name and parameters: a Ray worker rebuilds it from them (``portable``)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    portable: ClassVar[bool] = True

    def __call__(self, task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        from schedule_gym.agents import make_agent
        from schedule_gym.envs import TilingEnv

        env = TilingEnv(task, backend=backend)
        try:
            return make_agent(self.name, seed, **self.params).run(env, budget).best_latency_s
        finally:
            env.close()


def agent_tuner(name: str, params: dict[str, Any] | None = None) -> AgentTuner:
    """An :class:`AgentTuner`; an unknown agent or bad parameters fail here, before anything runs."""
    from schedule_gym.agents import make_agent

    make_agent(name, 0, **(params or {}))
    return AgentTuner(name, dict(params or {}))


class PolicyTuner:
    """A tuner running a trained SB3 policy (see :func:`policy_tuner`). Made from a policy file it holds the
    file's bytes and is ``portable``: it pickles as those bytes, the protocol and its two step counts, never
    as the loaded model, and a Ray worker loads the model from the bytes (:func:`load_policy`: unpickling
    nothing). Made from a model in memory it runs on this machine only."""

    def __init__(self, model: Any, protocol: Protocol, episode_steps: int = 100, max_steps_factor: int = 20,
                 policy_bytes: bytes | None = None) -> None:
        if model is None and policy_bytes is None:
            raise TypeError("a PolicyTuner needs a model or the bytes of a policy file")
        self.protocol = protocol
        self.episode_steps = episode_steps
        self.max_steps_factor = max_steps_factor
        self.policy_bytes = policy_bytes
        self._model = model

    @property
    def portable(self) -> bool:
        return self.policy_bytes is not None

    @property
    def model(self) -> Any:
        if self._model is None:
            from schedule_gym.benchmark.policy import load_policy

            self._model = load_policy(self.policy_bytes, self.protocol)
        return self._model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.portable:
            state["_model"] = None
        return state

    def __call__(self, task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        import torch

        from schedule_gym.envs import MultiTaskEnv

        model = self.model
        maskable = hasattr(model, "policy") and "Maskable" in type(model.policy).__name__
        env = MultiTaskEnv(tasks=[task], layout=self.protocol.layout(), backend=backend, budget_measurements=budget)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                obs, _ = env.reset(seed=seed, options={"task": task.name})
                session = env.env.session
                steps = 0
                while session.num_measurements < budget and steps < self.max_steps_factor * budget:
                    for _ in range(self.episode_steps):
                        kwargs = {"action_masks": env.action_masks()} if maskable else {}
                        action, _ = model.predict(obs, deterministic=False, **kwargs)
                        obs, _, _, truncated, _ = env.step(int(action))
                        steps += 1
                        if truncated or session.num_measurements >= budget:
                            break
                    if session.budget_exhausted():
                        break
                    obs, _ = env.reset(options={"task": task.name, "keep_session": True})
                best = session.best
                return None if best is None else best.latency_s
        finally:
            env.close()


def policy_tuner(policy: Any, protocol: Protocol, episode_steps: int = 100, max_steps_factor: int = 20) -> PolicyTuner:
    """A tuner running a trained SB3 policy (MaskablePPO: illegal moves masked) on a MultiTaskEnv of the
    held-out split: episodes of ``episode_steps`` moves from ``s0`` within one measurement session, actions
    sampled from the policy (torch seeded per run), until ``budget`` unique configs are measured or
    ``max_steps_factor * budget`` moves are made.

    ``policy``: a loaded model, or the path of a model saved by SB3 (loaded here with :func:`load_policy`,
    unpickling nothing; a bad file is a ``ValueError``), which makes a tuner that can run on Ray."""
    if isinstance(policy, (str, os.PathLike)):
        from schedule_gym.benchmark.policy import load_policy

        model = load_policy(policy, protocol)
        return PolicyTuner(model, get_protocol(protocol), episode_steps, max_steps_factor,
                           policy_bytes=Path(policy).read_bytes())
    return PolicyTuner(policy, get_protocol(protocol), episode_steps, max_steps_factor)


def run_protocol(
    tuner: Tuner,
    protocol: str | Protocol,
    agent: str,
    params: dict[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    tasks: Sequence[str] | None = None,
    command: str | None = None,
    progress: Callable[[str], None] | None = None,
    ray: str | None = None,
    cpus_per_run: float = 1,
    ray_timeout_s: float = RAY_TIMEOUT_S,
) -> dict[str, Any]:
    """Run ``tuner`` on every held-out task and seed of ``protocol``; return the result row (plain JSON).

    ``tasks`` restricts the run to some held-out tasks by name (the row records it; a partial row is not a
    leaderboard entry). The row holds per-task results (reference latency and kind, best latency per seed,
    regret), ``median_regret`` (the metric), ``mean_regret``, the CPU, the mock profile, the date, wall time.

    ``ray``: a Ray address (``"local"``, ``"auto"``, ``HOST:PORT``, ``ray://HOST:PORT``): each run is a Ray
    task asking for ``cpus_per_run`` CPUs (:mod:`schedule_gym.benchmark.ray_fanout`); ``tuner`` must be
    ``portable`` (:func:`agent_tuner`, or :func:`policy_tuner` of a file). The row is the one this machine
    would make; progress lines come as tasks finish. A task that fails is a ``RuntimeError`` naming its
    held-out task and seed; none finishing for ``ray_timeout_s`` seconds, a ``ConnectionError`` naming those
    still pending. Either way the other tasks are cancelled.
    """
    from schedule_gym.hardware import cpu_name

    protocol = get_protocol(protocol)
    seeds = tuple(protocol.seeds if seeds is None else seeds)
    if ray is not None:
        from schedule_gym.ray_tasks import check_address

        check_address(ray)
        if not getattr(tuner, "portable", False):
            raise TypeError("with ray, the tuner is rebuilt on each worker from plain data: give agent_tuner(name, "
                            f"params) or policy_tuner(path of the policy file, protocol), not {tuner!r}")
        for name, value in (("cpus_per_run", cpus_per_run), ("ray_timeout_s", ray_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
    held_out = protocol.held_out_tasks()
    if tasks is not None:
        wanted = set(tasks)
        unknown = wanted - {t.name for t in held_out}
        if unknown:
            raise ValueError(f"not held-out tasks of protocol {protocol.name}: {', '.join(sorted(unknown))}")
        held_out = tuple(t for t in held_out if t.name in wanted)
    backend = MockBackend(profile=protocol.profile)  # one backend: its chunk cache serves every seed
    t0 = time.perf_counter()
    if ray is None:
        results = _run_here(tuner, protocol, held_out, seeds, backend)
    else:
        from schedule_gym.benchmark.ray_fanout import fan_out

        results = fan_out(tuner, protocol, held_out, seeds, backend, ray, cpus_per_run=cpus_per_run,
                          timeout_s=ray_timeout_s, progress=progress)
    by_task: dict[int, dict[str, Any]] = {}
    with contextlib.closing(results):  # an error here stops the Ray tasks at once
        for i, (reference, kind), best in results:
            task = held_out[i]
            regrets = [math.inf if b is None else b / reference - 1.0 for b in best]
            regret = statistics.fmean(regrets)
            by_task[i] = {"task": task.name, "key": task.key, "space_size": backend.space(task).size,
                          "reference_latency_s": reference, "reference": kind, "best_latency_s": best,
                          "regret": regret}
            if progress is not None:
                progress(f"{task.name}: regret {regret:.4f} ({kind} reference)")
    rows = [by_task[i] for i in range(len(held_out))]
    regrets = [r["regret"] for r in rows]
    return {
        "agent": agent,
        "params": dict(params or {}),
        "protocol": protocol.to_dict(),
        "seeds": list(seeds),
        "partial": tasks is not None,
        "median_regret": statistics.median(regrets),
        "mean_regret": statistics.fmean(regrets),
        "tasks": rows,
        "cpu": cpu_name(),
        "profile": backend.record_context(held_out[0])[0] if held_out else f"mock:{protocol.profile}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - t0, 3),
        "command": command,
    }


#: one held-out task's results: its index in the protocol's order, its reference ``(latency_s, kind)``, and
#: the best latency of each seed (None: nothing measured)
TaskResult = tuple[int, tuple[float, str], list["float | None"]]


def _run_here(tuner: Tuner, protocol: Protocol, held_out: Sequence[Task], seeds: Sequence[int],
              backend: MockBackend) -> Iterator[TaskResult]:
    """Every held-out task on this machine, in order: its reference, then its seeds."""
    for i, task in enumerate(held_out):
        reference = reference_latency(task, backend, protocol.exact_limit)
        yield i, reference, [tuner(task, backend, seed, protocol.budget) for seed in seeds]
