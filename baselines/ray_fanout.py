"""The comparison harness's runs as Ray tasks (``schedule-gym compare --ray ADDRESS``).

:func:`~schedule_gym.baselines.compare.run_comparison` hands the runs that are not saved yet to
:func:`fan_out`, which makes each (agent, seed, budget) run one Ray task and yields the runs as they
finish; the driver saves each one the moment it arrives, exactly as on one machine, so an interrupted
comparison resumes and the tables and plots are made from the same files.

Records. A task never writes into the driver's output folder (on a cluster it is on another machine): it
measures into a record file of its own in a temporary folder of the worker, seeded with the bytes of the
run's record file if the driver already had one (a run cut short earlier re-measures nothing), and returns
the file's bytes with the run's result. The driver then writes ``<run>.jsonl`` (first) and ``<run>.json``
beside each other, as the single-machine harness does. One run, one record file, one writer at a time.

Measurement. With the mock backend or a replayed table the tasks compute; with ``--backend rpc`` they
request sessions from the TVM RPC tracker as a single machine does, so real-hardware timing stays on the
device farm. Each task asks Ray for ``cpus_per_run`` CPUs (default 1).

The session and the gathering of tasks are :mod:`schedule_gym.ray_tasks`'s, shared with the benchmark
(``schedule-gym benchmark --ray``). Ray is imported only when a comparison fans out: ``import
schedule_gym`` never needs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from schedule_gym.baselines.compare_spec import CompareSpec, run_one
from schedule_gym.ray_tasks import LOCAL, as_finished, cancelling, ray_session, task_error

__all__ = ["LOCAL", "RunKey", "fan_out", "ray_session"]

RunKey = tuple[str, int, str]  # agent, seed, budget


def _run_task(spec: CompareSpec, agent: str, seed: int, budget: str, records: bytes | None) -> tuple[dict[str, Any], bytes | None]:
    """One run on a Ray worker: its ``TuneResult.to_dict()`` and the bytes of its record file (or None)."""
    with tempfile.TemporaryDirectory(prefix="schedule-gym-run-") as tmp:
        record_file = None
        if spec.records:
            record_file = Path(tmp) / "records.jsonl"
            if records is not None:
                record_file.write_bytes(records)
        saved = run_one(spec, agent, seed, budget, None if record_file is None else str(record_file))
        written = record_file.read_bytes() if record_file is not None and record_file.exists() else None
    return saved, written


def fan_out(
    spec: CompareSpec, runs: Sequence[RunKey], address: str, records: dict[RunKey, bytes] | None = None,
    cpus_per_run: float = 1, while_running: Callable[[], object] | None = None,
) -> Iterator[tuple[RunKey, dict[str, Any], bytes | None]]:
    """Run ``runs`` as Ray tasks at ``address``; yield ``(key, result dict, record bytes or None)`` in the
    order they finish. ``while_running()`` is called once the tasks are submitted (the harness runs its
    external runs there, on this machine). ``records`` holds record files the driver already has, by run.
    A task that fails raises here once every other task has finished (those are yielded, so the driver
    saves them); closing the generator early (Ctrl-C in the driver) cancels the tasks still running."""
    if not runs:
        if while_running is not None:
            while_running()
        return
    records = records or {}
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=cpus_per_run, max_retries=0)(_run_task)
        spec_ref = ray.put(spec)
        pending = {task.remote(spec_ref, agent, seed, budget, records.get((agent, seed, budget))): (agent, seed, budget)
                   for agent, seed, budget in runs}
        failure: tuple[RunKey, BaseException] | None = None
        with cancelling(ray, pending):
            if while_running is not None:
                while_running()
            for key, result, error in as_finished(ray, pending):
                if error is not None:
                    failure = failure or (key, error)
                    continue
                saved, written = result
                yield key, saved, written
        if failure is not None:
            (agent, seed, budget), exc = failure
            raise RuntimeError(f"run {agent} seed {seed} budget {budget} failed on Ray: {task_error(exc)}") from exc
