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
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.backends.mock import MockBackend
from schedule_gym.envs.multitask_env import TaskLayout, resolve_tasks
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task, gemm

__all__ = ["PROTOCOLS", "Protocol", "REFERENCE_SAMPLES", "REFERENCE_STARTS", "agent_tuner", "policy_tuner",
           "get_protocol", "reference_latency", "run_protocol"]

#: configs drawn for a ``"search"`` reference, and how many of the best start a greedy descent
REFERENCE_SAMPLES = 20_000
REFERENCE_STARTS = 8


@dataclass(frozen=True)
class Protocol:
    """A generalisation protocol. ``train`` and ``held_out``: comma-separated suite or task names (or Task
    tuples); ``budget``: unique measurements per held-out task and seed; ``seeds``: the default seeds."""

    name: str
    train: str | tuple[Task, ...]
    held_out: str | tuple[Task, ...]
    budget: int = 100
    seeds: tuple[int, ...] = (0, 1)
    profile: str = "znver5-2core-fitted"
    exact_limit: int = 200_000
    description: str = ""

    def train_tasks(self) -> tuple[Task, ...]:
        return resolve_tasks(self.train)

    def held_out_tasks(self) -> tuple[Task, ...]:
        """The held-out tasks, less any whose key is a training task's."""
        train_keys = {t.key for t in self.train_tasks()}
        return tuple(t for t in resolve_tasks(self.held_out) if t.key not in train_keys)

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
                "seeds": list(self.seeds), "profile": self.profile, "exact_limit": self.exact_limit}


PROTOCOLS: dict[str, Protocol] = {
    # Train on ResNet-50 and BERT-base layers; hold out two whole networks, ResNet-18 and MobileNet-V2
    # (depthwise convolutions, never seen in training), less the layers ResNet-18 shares with ResNet-50.
    "v0": Protocol("v0", train="resnet50,bert-base", held_out="resnet18,mobilenetv2", budget=100, seeds=(0, 1),
                   description="train ResNet-50 + BERT-base, hold out ResNet-18 + MobileNet-V2; 100 measurements"),
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


def reference_latency(task: Task, backend: MockBackend, exact_limit: int, use_cache: bool = True) -> tuple[float, str]:
    """``(latency_s, kind)`` of the task's reference: ``"exact"`` or ``"search"`` (see the module docstring)."""
    space = backend.space(task)
    kind = "exact" if space.size <= exact_limit else "search"
    target = backend.record_context(task)[0]
    key = f"{target}|{task.key}|{kind}" + ("" if kind == "exact" else f"|{REFERENCE_SAMPLES}x{REFERENCE_STARTS}")
    path = _references_path()
    cached: dict[str, float] = {}
    if use_cache and path.is_file():
        try:
            cached = json.loads(path.read_text())
        except (OSError, ValueError):
            cached = {}
        if key in cached:
            return float(cached[key]), kind
    if kind == "exact":
        latency = float(backend.score_space(task).min())
    else:
        rng = np.random.default_rng(0)
        sample = np.unique(np.concatenate([
            space.sample_indices(rng, min(REFERENCE_SAMPLES, space.size)),
            [space.index_of_rows(space.rows(space.initial_config()))],
        ]))
        scores = backend.model_latency_s(task, sample)
        order = np.argsort(scores, kind="stable")[:REFERENCE_STARTS]
        latency = min(_greedy_descent(backend, task, space, int(sample[i]), float(scores[i]))[1] for i in order)
    if use_cache:
        cached[key] = latency
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=0, sort_keys=True) + "\n")
        tmp.replace(path)
    return latency, kind


# ----------------------------------------------------------------------------------------------- running
#: ``tune(task, backend, seed, budget) -> best latency (s) or None``: how one held-out task is tuned
Tuner = Callable[[Task, MockBackend, int, int], "float | None"]


def agent_tuner(name: str, params: dict[str, Any] | None = None) -> Tuner:
    """A tuner running a registered search agent (:func:`schedule_gym.agents.make_agent`) on a TilingEnv."""
    from schedule_gym.agents import make_agent
    from schedule_gym.envs import TilingEnv

    make_agent(name, 0, **(params or {}))  # fail now on an unknown agent or bad parameters

    def tune(task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        env = TilingEnv(task, backend=backend)
        try:
            return make_agent(name, seed, **(params or {})).run(env, budget).best_latency_s
        finally:
            env.close()

    return tune


def policy_tuner(model: Any, protocol: Protocol, episode_steps: int = 100, max_steps_factor: int = 20) -> Tuner:
    """A tuner running a trained SB3 policy (MaskablePPO: illegal moves masked) on a MultiTaskEnv of the
    held-out split: episodes of ``episode_steps`` moves from ``s0`` within one measurement session, actions
    sampled from the policy (torch seeded per run), until ``budget`` unique configs are measured or
    ``max_steps_factor * budget`` moves are made."""
    from schedule_gym.envs import MultiTaskEnv

    maskable = hasattr(model, "policy") and "Maskable" in type(model.policy).__name__

    def tune(task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        import torch

        env = MultiTaskEnv(tasks=[task], layout=protocol.layout(), backend=backend, budget_measurements=budget)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                obs, _ = env.reset(seed=seed, options={"task": task.name})
                session = env.env.session
                steps = 0
                while session.num_measurements < budget and steps < max_steps_factor * budget:
                    for _ in range(episode_steps):
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

    return tune


def run_protocol(
    tuner: Tuner,
    protocol: str | Protocol,
    agent: str,
    params: dict[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    tasks: Sequence[str] | None = None,
    command: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run ``tuner`` on every held-out task and seed of ``protocol``; return the result row (plain JSON).

    ``tasks`` restricts the run to some held-out tasks by name (the row records it; a partial row is not a
    leaderboard entry). The row holds per-task results (reference latency and kind, best latency per seed,
    regret), ``median_regret`` (the metric), ``mean_regret``, the CPU, the mock profile, the date, wall time.
    """
    from schedule_gym.hardware import cpu_name

    protocol = get_protocol(protocol)
    seeds = tuple(protocol.seeds if seeds is None else seeds)
    held_out = protocol.held_out_tasks()
    if tasks is not None:
        wanted = set(tasks)
        unknown = wanted - {t.name for t in held_out}
        if unknown:
            raise ValueError(f"not held-out tasks of protocol {protocol.name}: {', '.join(sorted(unknown))}")
        held_out = tuple(t for t in held_out if t.name in wanted)
    backend = MockBackend(profile=protocol.profile)  # one backend: its chunk cache serves every seed
    t0 = time.perf_counter()
    rows = []
    for task in held_out:
        reference, kind = reference_latency(task, backend, protocol.exact_limit)
        best = [tuner(task, backend, seed, protocol.budget) for seed in seeds]
        regrets = [math.inf if b is None else b / reference - 1.0 for b in best]
        regret = statistics.fmean(regrets)
        rows.append({"task": task.name, "key": task.key, "space_size": backend.space(task).size,
                     "reference_latency_s": reference, "reference": kind, "best_latency_s": best,
                     "regret": regret})
        if progress is not None:
            progress(f"{task.name}: regret {regret:.4f} ({kind} reference)")
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
