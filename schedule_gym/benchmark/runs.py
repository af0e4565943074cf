"""Running a protocol: a tuner on every held-out task and seed, and the leaderboard row made of the results.

``split="train"`` runs the training tasks instead (a training-set score, for generalisation gaps), and
``split="validation"`` the protocol's validation split (to choose checkpoints or settings without looking at
the held-out tasks): the row says so, and is no leaderboard entry.

With ``run_protocol(..., ray=ADDRESS)`` every (held-out task, seed) run is a Ray task, and so is every
reference the cache does not hold yet (:mod:`schedule_gym.benchmark.ray_fanout`); the row is the one a
single machine makes. The tuner must then be ``portable`` (:mod:`schedule_gym.benchmark.tuners`).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.aggregate import summarise_regrets
from schedule_gym.benchmark.pretrained import check_artefact, sidecar_path
from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.benchmark.ray_fanout import RAY_TIMEOUT_S, fan_out
from schedule_gym.benchmark.references import reference_latency
from schedule_gym.benchmark.tuners import TaskResult, Tuner
from schedule_gym.tasks import Task

#: the installed package's folder (artefacts shipped in it are named relative to it)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]

__all__ = ["RAY_TIMEOUT_S", "run_protocol"]


def _artefact_name(path: Path) -> str:
    """How a row names an artefact: a file shipped in the package as ``schedule_gym/<path in it>`` (the same
    on every install), any other as given."""
    try:
        return "schedule_gym/" + Path(path).resolve().relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return str(path)


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
    budget_track: int | None = None,
    split: str = "held_out",
) -> dict[str, Any]:
    """Run ``tuner`` on every held-out task and seed of ``protocol``; return the result row (plain JSON).

    ``tasks`` restricts the run to some held-out tasks by name (the row records it; a partial row is not a
    leaderboard entry). The row holds per-task results (reference latency and kind, best latency per seed,
    regret), ``median_regret`` (the metric), ``mean_regret``, the CPU, the mock profile, the date, wall time.
    ``budget_track``: one of the protocol's budget tracks (default: its ``budget``), recorded as the row's
    ``budget_track`` when the protocol has tracks. A protocol with ``intervals`` adds ``iqm_regret`` and the
    intervals of both statistics (:func:`~schedule_gym.benchmark.aggregate.summarise_regrets`).
    ``split``: ``"held_out"`` (the benchmark), ``"train"`` or ``"validation"`` (the row records it).
    Every artefact the tuner names that has a sidecar is checked first
    (:func:`~schedule_gym.benchmark.pretrained.check_artefact`: trained on none of the held-out tasks; a
    leak is a ``ValueError``) and recorded as the row's ``artefacts`` (path: the protocol it was trained for).

    ``ray``: a Ray address (``"local"``, ``"auto"``, ``HOST:PORT``, ``ray://HOST:PORT``): each run is a Ray
    task asking for ``cpus_per_run`` CPUs (:mod:`schedule_gym.benchmark.ray_fanout`); ``tuner`` must be
    ``portable`` (:func:`~schedule_gym.benchmark.tuners.agent_tuner`, or
    :func:`~schedule_gym.benchmark.tuners.policy_tuner` of a file). The row is the one this machine
    would make; progress lines come as tasks finish. A task that fails is a ``RuntimeError`` naming its
    held-out task and seed; none finishing for ``ray_timeout_s`` seconds, a ``ConnectionError`` naming those
    still pending. Either way the other tasks are cancelled.
    """
    from schedule_gym.hardware import cpu_name

    protocol = get_protocol(protocol).at_budget(budget_track)
    seeds = tuple(protocol.seeds if seeds is None else seeds)
    run_tasks = protocol.split_tasks(split)  # refuses an unknown split
    if ray is not None:
        from schedule_gym.ray_tasks import check_address

        check_address(ray)
        if not getattr(tuner, "portable", False):
            raise TypeError("with ray, the tuner is rebuilt on each worker from plain data: give agent_tuner(name, "
                            f"params) or policy_tuner(path of the policy file, protocol), not {tuner!r}")
        for name, value in (("cpus_per_run", cpus_per_run), ("ray_timeout_s", ray_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
    artefacts = {_artefact_name(path): check_artefact(protocol, path) for path in getattr(tuner, "artefacts", tuple)()
                 if sidecar_path(path).is_file()}
    if tasks is not None:
        wanted = set(tasks)
        unknown = wanted - {t.name for t in run_tasks}
        if unknown:
            kind = {"held_out": "held-out", "train": "training", "validation": "validation"}[split]
            raise ValueError(f"not {kind} tasks of protocol {protocol.name}: {', '.join(sorted(unknown))}")
        run_tasks = tuple(t for t in run_tasks if t.name in wanted)
    backend = MockBackend(profile=protocol.profile)  # one backend: its chunk cache serves every seed
    t0 = time.perf_counter()
    if ray is None:
        results = _run_here(tuner, protocol, run_tasks, seeds, backend)
    else:
        results = fan_out(tuner, protocol, run_tasks, seeds, backend, ray, cpus_per_run=cpus_per_run,
                          timeout_s=ray_timeout_s, progress=progress)
    by_task: dict[int, dict[str, Any]] = {}
    per_seed: dict[int, list[float]] = {}
    with contextlib.closing(results):  # an error here stops the Ray tasks at once
        for i, (reference, kind), best in results:
            task = run_tasks[i]
            per_seed[i] = [math.inf if b is None else b / reference - 1.0 for b in best]
            regret = statistics.fmean(per_seed[i])
            by_task[i] = {"task": task.name, "key": task.key, "space_size": backend.space(task).size,
                          "reference_latency_s": reference, "reference": kind, "best_latency_s": best,
                          "regret": regret}
            if progress is not None:
                progress(f"{task.name}: regret {regret:.4f} ({kind} reference)")
    rows = [by_task[i] for i in range(len(run_tasks))]
    regrets = [r["regret"] for r in rows]
    return {
        "agent": agent,
        "params": dict(params or {}),
        "protocol": protocol.to_dict(),
        **({"budget_track": protocol.budget} if protocol.budget_tracks else {}),
        **({"split": split} if split != "held_out" else {}),
        **({"artefacts": artefacts} if artefacts else {}),
        "seeds": list(seeds),
        "partial": tasks is not None,
        "median_regret": statistics.median(regrets),
        "mean_regret": statistics.fmean(regrets),
        **(summarise_regrets([per_seed[i] for i in range(len(run_tasks))]) if protocol.intervals else {}),
        "tasks": rows,
        "cpu": cpu_name(),
        "profile": backend.record_context(run_tasks[0])[0] if run_tasks else f"mock:{protocol.profile}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - t0, 3),
        "command": command,
    }


def _run_here(tuner: Tuner, protocol: Protocol, held_out: Sequence[Task], seeds: Sequence[int],
              backend: MockBackend) -> Iterator[TaskResult]:
    """Every held-out task on this machine, in order: its reference, then its seeds."""
    for i, task in enumerate(held_out):
        reference = reference_latency(task, backend, protocol.exact_limit)
        yield i, reference, [tuner(task, backend, seed, protocol.budget) for seed in seeds]
