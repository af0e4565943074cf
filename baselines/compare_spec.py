"""What a comparison is (:class:`CompareSpec`) and one of its runs (:func:`run_one`): the same on this machine
(:mod:`schedule_gym.baselines.compare`) and on a Ray worker (:mod:`schedule_gym.baselines.ray_fanout`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedule_gym.agents import make_agent

__all__ = ["CompareSpec", "run_one"]


@dataclass(frozen=True)
class CompareSpec:
    """What to compare: ``make_env()`` builds a fresh environment per run."""

    name: str
    make_env: Callable[[str | None], Any]  # record file (or None) -> environment
    agents: Sequence[str]
    seeds: Sequence[int]
    budgets: Sequence[str]
    out_dir: Path
    optimum_s: float | None = None  # the known optimum, if any
    records: bool = False  # keep a record file per run (measuring backends)
    #: runs that are not agents of our space, by name: ``run(seed, budget, work_dir)`` returns a
    #: ``TuneResult.to_dict()``-shaped dict (e.g. MetaSchedule, :mod:`schedule_gym.baselines.metaschedule`)
    external: Mapping[str, Callable[[int, str, Path], dict[str, Any]]] = field(default_factory=dict)
    #: hyper-parameters per agent name (e.g. ``{"policy": {"model": "runs/sb3/x/model.zip"}}``)
    agent_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: seeds per name where they differ from ``seeds`` (e.g. fewer for a slow external run)
    agent_seeds: Mapping[str, Sequence[int]] = field(default_factory=dict)


def run_one(spec: CompareSpec, agent: str, seed: int, budget: str, record_file: str | None) -> dict[str, Any]:
    """One agent run on a fresh environment measuring into ``record_file``: its ``TuneResult.to_dict()``
    (``KeyboardInterrupt`` if the run was interrupted). The same on this machine and on a Ray worker."""
    env = spec.make_env(record_file)
    try:
        result = make_agent(agent, seed=seed, **spec.agent_params.get(agent, {})).run(env, budget)
    finally:
        env.close()
    if result.stop_reason == "interrupted":
        raise KeyboardInterrupt
    return result.to_dict()
