"""The benchmark's runs as Ray tasks (``schedule-gym benchmark --ray ADDRESS``).

:func:`~schedule_gym.benchmark.runs.run_protocol` with ``ray=ADDRESS`` hands its held-out tasks to
:func:`fan_out`, which makes each (held-out task, seed) run one Ray task, and each reference the driver's
cache does not hold yet one more. It yields a task's results once its reference and every seed are in;
``run_protocol`` builds the row from them in the protocol's order, as on one machine.

What a task is given is plain data: the tuner (an agent's name and parameters, or a policy file's bytes:
:class:`~schedule_gym.benchmark.tuners.AgentTuner`, :class:`~schedule_gym.benchmark.tuners.PolicyTuner`),
the held-out task, the seed and budget, and the mock's CPU profile as the driver resolved it (so every
worker models the same machine, whatever its own CPU). Each worker process keeps one
:class:`~schedule_gym.backends.mock.backend.MockBackend` for its tasks, as one machine keeps one for all of them.

References. A reference task computes without the cache; the driver stores what it returns in its own
cache, so the cache has one writer (workers on other machines have caches of their own, never read).

Deadlines. No task finishing for ``timeout_s`` seconds is a ``ConnectionError`` naming the runs still
pending; a task that fails is a ``RuntimeError`` naming its held-out task and seed. Either way the other
tasks are cancelled: a row needs every run, so nothing partial is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.backends.mock.profile import CPUProfile
from schedule_gym.benchmark.protocol import Protocol
from schedule_gym.benchmark.references import cached_reference, compute_reference, reference_kind, store_reference
from schedule_gym.benchmark.tuners import TaskResult, Tuner
from schedule_gym.ray_tasks import as_finished, cancelling, ray_session, task_error
from schedule_gym.tasks import Task

__all__ = ["RAY_TIMEOUT_S", "fan_out"]

#: the longest ``run_protocol(..., ray=...)`` waits for the next Ray task to finish before it gives up
RAY_TIMEOUT_S = 1800.0


@functools.lru_cache(maxsize=1)
def _backend(profile: CPUProfile) -> MockBackend:
    """This worker's backend (its chunk cache serves every run the worker is given)."""
    return MockBackend(profile=profile)


def _tune_task(tuner: Tuner, profile: CPUProfile, task: Task, seed: int, budget: int) -> float | None:
    """One run on a Ray worker: the best latency the tuner found (None: nothing measured)."""
    return tuner(task, _backend(profile), seed, budget)


def _reference_task(profile: CPUProfile, task: Task, kind: str) -> float:
    """One reference on a Ray worker, computed without the cache."""
    return compute_reference(task, _backend(profile), kind)


def fan_out(
    tuner: Tuner, protocol: Protocol, held_out: Sequence[Task], seeds: Sequence[int], backend: MockBackend,
    address: str, cpus_per_run: float = 1, timeout_s: float = RAY_TIMEOUT_S, progress: Callable[[str], None] | None = None,
) -> Iterator[TaskResult]:
    """Run every (held-out task, seed) and the missing references as Ray tasks at ``address``; yield each
    held-out task's ``(index, (reference_s, kind), best per seed)`` once all of it is in. ``backend`` is the
    driver's: its profile goes to the workers, and it names the references in the cache."""
    references: dict[int, tuple[float, str]] = {}
    kinds: dict[int, str] = {}
    for i, task in enumerate(held_out):
        found = cached_reference(task, backend, protocol.exact_limit)
        if found is None:
            kinds[i] = reference_kind(task, backend, protocol.exact_limit)
        else:
            references[i] = found
    best: dict[int, list[float | None]] = {i: [None] * len(seeds) for i in range(len(held_out))}
    missing = {i: len(seeds) for i in range(len(held_out))}

    def describe(key: tuple[int, int | None]) -> str:
        i, j = key
        return f"reference of {held_out[i].name}" if j is None else f"run {held_out[i].name} seed {seeds[j]}"

    with ray_session(address) as ray:
        run = ray.remote(num_cpus=cpus_per_run, max_retries=0)(_tune_task)
        reference = ray.remote(num_cpus=cpus_per_run, max_retries=0)(_reference_task)
        tuner_ref, profile_ref = ray.put(tuner), ray.put(backend.profile)
        pending: dict[Any, tuple[int, int | None]] = {}
        for i, kind in kinds.items():
            pending[reference.remote(profile_ref, held_out[i], kind)] = (i, None)
        for i, task in enumerate(held_out):
            for j, seed in enumerate(seeds):
                pending[run.remote(tuner_ref, profile_ref, task, seed, protocol.budget)] = (i, j)
        if progress is not None:
            progress(f"{len(held_out) * len(seeds)} runs and {len(kinds)} references submitted to Ray at {address}")
        with cancelling(ray, pending):
            for (i, j), value, error in as_finished(ray, pending, timeout_s, describe):
                if error is not None:
                    raise RuntimeError(f"{describe((i, j))} failed on Ray: {task_error(error)}") from error
                if j is None:
                    references[i] = (value, kinds[i])
                    store_reference(held_out[i], backend, kinds[i], value)
                else:
                    best[i][j] = value
                    missing[i] -= 1
                if missing[i] == 0 and i in references:
                    yield i, references[i], best[i]
