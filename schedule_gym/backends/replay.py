"""The replay backend: latencies served from measurement records, optionally measuring misses.

* ``ReplayBackend(records)``: every config must be in the records; a miss raises :class:`MissingRecordError`
  naming the config, the task and the file. Serves a shipped exhaustive table at mock speed.
* ``ReplayBackend(records, delegate=TVMBackend())``: a miss is measured by the delegate and appended to
  the (first, writable) record file, so an interrupted tuning run resumes without measuring anything
  twice. ``make_backend("tvm", records="run.jsonl")`` builds exactly this. A recorded timeout is
  measured again when the delegate's protocol allows longer than the recorded one (``build_timeout_s``
  for a build timeout, ``run_timeout_s`` for a run timeout); otherwise it is served like any record. A
  failure of the machine (a file-size limit, a full disk, a missing linker: ``error_kind`` ``"machine"``,
  :mod:`~schedule_gym.backends.machine`) is passed on but never appended, and a record of one (a build
  failure whose error names such a cause, written before the kind existed) is measured again: it says
  nothing about its config.

A censored record ("slower than its bound") is served as it is by :meth:`~ReplayBackend.measure`, but is
not good enough for :meth:`~ReplayBackend.measure_exact`: there it is a miss (measured in full by the
delegate, whose exact result is appended and replaces it; without a delegate, ``MissingRecordError``).

Records are matched on the task's computation (:attr:`Task.key`), the target and the template version;
a delegate fixes them, otherwise the records must hold exactly one (target, template) for the task or
``target=`` / ``template=`` must choose.

Nothing lost, nothing poisoned: a record of a template version this code does not know
(:func:`known_template_versions`) is a :class:`RecordFileError` naming the file and line, with or without a
delegate (never served, never skipped and measured again); with a delegate the record file is opened for
appending when the backend is made, so a place that cannot be written is refused before the first
measurement; a write that fails later raises :class:`RecordFileError` and leaves the file holding every
measurement before it, so the same run resumed measures only the rest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schedule_gym.backends.base import LatencyBackend, MeasureResult, ResultCallback, valid_config
from schedule_gym.backends.machine import machine_cause
from schedule_gym.backends.mock.model import MOCK_MODEL_VERSION
from schedule_gym.errors import MissingRecordError, RecordFileError
from schedule_gym.records import Record, RecordStore
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task
from schedule_gym.templates import TEMPLATES
from schedule_gym.types import Config

__all__ = ["MissingRecordError", "ReplayBackend", "known_template_versions"]

#: what a backend that does not override ``record_context`` records as its template version
NO_TEMPLATE = "none"


def known_template_versions(backend: LatencyBackend | None = None) -> frozenset[str]:
    """The template versions whose records this code can use: every registered template's (the fault
    templates' too), the mock model's, :data:`NO_TEMPLATE`, and those ``backend`` declares in a
    ``template_versions`` attribute (a backend of one's own that records versions of its own)."""
    declared = tuple(getattr(backend, "template_versions", ()))
    return frozenset({t.version for t in TEMPLATES.values()} | {MOCK_MODEL_VERSION, NO_TEMPLATE, *declared})


class _ReplayLatencies:
    """A replay backend's records as one dense array, built once (NaN for failed records); a config
    without a record raises :class:`MissingRecordError` when it is measured, as the backend does.
    ``censored`` marks censored records (their latency is the bound); :meth:`require_exact` refuses them
    where an exact latency is needed, as the backend's ``measure_exact`` does."""

    def __init__(self, backend: ReplayBackend, task: Task, space: TileSpace) -> None:
        target, template = backend.record_context(task)
        self._latency_s = np.full(space.size, np.nan)
        self._held = np.zeros(space.size, dtype=bool)
        self.censored = np.zeros(space.size, dtype=bool)
        for store in reversed(backend.stores):  # the first store that holds a config wins, as in lookup()
            for record in store.records_of(task, target, template):
                index = space.index(record.result.config)
                latency = record.result.latency_s
                self._latency_s[index] = np.nan if latency is None else latency
                self._held[index] = True
                self.censored[index] = record.result.censored
        self._complete = bool(self._held.all())
        self._backend, self._task, self._space = backend, task, space

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        if not self._complete and not self._held[indices].all():
            config = self._space.config(int(indices[~self._held[indices]][0]))
            raise MissingRecordError(
                f"config {config} of task {self._task.name!r} is not in the records "
                f"{[str(f) for f in self._backend.files]}", "the vector environment replays records without a delegate",
                self._backend.measured_by(self._task),
            )
        return self._latency_s[indices]

    def require_exact(self, index: int) -> None:
        """Raise :class:`MissingRecordError` if the record of ``index`` is censored (no exact latency)."""
        if self.censored[index]:
            raise MissingRecordError(
                f"config {self._space.config(index)} of task {self._task.name!r} has only a censored record in "
                f"{[str(f) for f in self._backend.files]} and its exact latency is needed",
                "replay with a delegate (the sync vector environment) to measure it", self._backend.measured_by(self._task),
            )


class ReplayBackend(LatencyBackend):
    name = "replay"

    def __init__(
        self,
        records: str | os.PathLike | RecordStore | Sequence[str | os.PathLike | RecordStore],
        delegate: LatencyBackend | None = None,
        target: str | None = None,
        template: str | None = None,
    ) -> None:
        items = records if isinstance(records, (list, tuple)) else [records]
        if not items:
            raise ValueError("ReplayBackend needs at least one record file")
        self.stores = [r if isinstance(r, RecordStore) else RecordStore(r) for r in items]
        if delegate is None:
            absent = [s.path for s in self.stores if not s.path.exists()]
            if absent:  # a typo, most likely: said now, not as "no measurements of task ..." later
                raise RecordFileError(f"{absent[0]}: record file does not exist (without a delegate the records are "
                                      "only served, nothing is measured into them)")
        if delegate is not None and not isinstance(delegate, LatencyBackend):
            raise TypeError(f"delegate must be a LatencyBackend or None, got {delegate!r}")
        self.delegate = delegate
        self.target = target
        self.template = template
        self.deterministic = delegate is None or delegate.deterministic
        self._known = known_template_versions(delegate) | ({template} if template else set())  # named: known
        for store in self.stores:
            store.check_templates(self._known)
        self._writable = next((s for s in self.stores if not s.read_only), None)
        if delegate is not None:
            if self._writable is None:
                raise RecordFileError(
                    f"measured misses need a writable record file; {[str(s.path) for s in self.stores]} are all compressed"
                )
            self._writable.ensure_writable()  # a place that cannot be written: refused before measuring
        self._context: dict[Task, tuple[str, str]] = {}

    @property
    def files(self) -> list[Path]:
        return [s.path for s in self.stores]

    def check_task(self, task: Task) -> None:
        if self.delegate is not None:
            self.delegate.check_task(task)

    @property
    def scores_in_bulk(self) -> bool:
        """Without a delegate every latency is a record: one dense array serves vectorised callers."""
        return self.delegate is None

    @property
    def measures_hardware(self) -> bool:  # type: ignore[override]
        return self.delegate is not None and self.delegate.measures_hardware

    @property
    def needs_tvm(self) -> bool:  # type: ignore[override]
        return self.delegate is not None and self.delegate.needs_tvm

    def cpu_profile(self) -> object | None:
        return None if self.delegate is None else self.delegate.cpu_profile()

    @property
    def measuring_backend(self) -> LatencyBackend:
        """The delegate's measuring backend (misses are its measurements), or this one without a delegate."""
        return self if self.delegate is None else self.delegate.measuring_backend

    @property
    def record_store(self) -> RecordStore | None:
        """The first writable record file (where measured misses are appended), or None: all are compressed."""
        return self._writable

    def latency_table(self, task: Task, space: TileSpace) -> _ReplayLatencies:
        if self.delegate is not None:
            return super().latency_table(task, space)
        return _ReplayLatencies(self, task, space)

    def record_context(self, task: Task) -> tuple[str, str]:
        if self.delegate is not None:
            return self.delegate.record_context(task)
        context = self._context.get(task)
        if context is not None:
            return context
        found: dict[tuple[str, str], int] = {}
        for store in self.stores:
            for (task_key, target, template), count in store.contexts().items():
                if task_key == task.key and self.target in (None, target) and self.template in (None, template):
                    found[(target, template)] = found.get((target, template), 0) + count
        if not found:
            held = sorted({key for store in self.stores for key in store.tasks()})
            raise RecordFileError(
                f"the records in {[str(f) for f in self.files]} hold no measurements of task {task.name!r} "
                f"({task.key})"
                + (f" for target={self.target!r}" if self.target else "")
                + (f" and template={self.template!r}" if self.template else "")
                + f"; they hold tasks {held}"
            )
        if len(found) > 1:
            raise RecordFileError(
                f"the records hold task {task.name!r} for several (target, template) pairs {sorted(found)}; "
                "pass target= and template= to choose"
            )
        context = self._context[task] = next(iter(found))
        return context

    def measured_by(self, task: Task) -> tuple[str, ...]:
        """The names of the backends whose records of ``task`` (in its record context) these files hold."""
        target, template = self.record_context(task)
        return tuple(sorted({r.backend for s in self.stores for r in s.records_of(task, target, template)}))

    def recorded(self, task: Task) -> list[MeasureResult]:
        """The exact results the records hold for ``task`` in its record context (each config's as :meth:`lookup`
        serves it: the first file that holds it), fastest first; none if they hold no record of it."""
        if self.delegate is None and not any(task.key in store.tasks() for store in self.stores):
            return []  # without a delegate the context comes from the records, which hold none of this task
        target, template = self.record_context(task)
        results: dict[Config, MeasureResult] = {}
        for store in self.stores:
            for record in store.records_of(task, target, template):
                results.setdefault(record.result.config, record.result)
        return sorted((r for r in results.values() if r.exact), key=lambda r: r.latency_s)  # type: ignore[arg-type]

    def lookup(self, task: Task, config: Config, exact: bool = False) -> MeasureResult | None:
        """The recorded result of ``config``, or None (a miss); with ``exact`` a censored record is a miss."""
        target, template = self.record_context(task)
        for store in self.stores:
            record = store.get(task, target, template, config)
            if record is not None:
                if self._retry_timeout(record) or self._retry_machine(record) or (exact and record.result.censored):
                    return None
                return record.result
        return None

    def _retry_machine(self, record: Record) -> bool:
        """Whether a recorded failure is one of the machine, measured again by a delegate: its kind says so, or
        it is a build failure whose error names a machine cause (a record written before the kind existed)."""
        result = record.result
        return self.delegate is not None and (
            result.machine_failure or (result.error_kind == "build" and machine_cause(result.error) is not None)
        )

    def _retry_timeout(self, record: Record) -> bool:
        """Whether a recorded timeout is measured again: with a delegate whose protocol allows longer
        than the recorded one for what timed out (``build_timeout_s`` for a build, ``run_timeout_s``
        for a run). The new result is appended and replaces the old one."""
        if self.delegate is None or record.result.error_kind != "timeout":
            return False
        field = "build_timeout_s" if (record.result.error or "").startswith("build") else "run_timeout_s"
        now, then = self.delegate.protocol_dict().get(field), record.protocol.get(field)
        return isinstance(now, (int, float)) and isinstance(then, (int, float)) and now > then

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        return self._measure(task, configs, on_result, exact=False)

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """:meth:`measure`, where a censored record is a miss (measured in full by the delegate)."""
        return self._measure(task, configs, on_result, exact=True)

    def _measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None, exact: bool
    ) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [self.lookup(task, c, exact) for c in configs]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:  # a config outside the space only misses: named here, a hit costs no check (replay is fast)
            space, configs = TileSpace(task), list(configs)
            for i in missing:
                configs[i] = valid_config(space, configs[i], i)
        if missing and self.delegate is None:
            target, template = self.record_context(task)
            held = sum(len(s.records_of(task, target, template)) for s in self.stores)
            first = configs[missing[0]]
            censored = exact and self.lookup(task, first) is not None
            raise MissingRecordError(
                f"config {first} of task {task.name!r} "
                + ("has only a censored record (slower than its bound; its exact latency is asked for) in "
                   if censored else "is not in ")
                + f"the records {[str(f) for f in self.files]} ({held} configs of this task for {template}); "
                f"{len(missing)} of the {len(configs)} asked are missing",
                "pass delegate= (a backend) to measure misses", self.measured_by(task),
            )
        if on_result is not None:
            for i, hit in enumerate(results):
                if hit is not None:
                    on_result(i, hit)
        if missing:
            assert self.delegate is not None and self._writable is not None
            target, template = self.delegate.record_context(task)
            if template not in self._known:
                raise ValueError(
                    f"backend {self.delegate.name!r} records template version {template!r}, which a record file "
                    f"could not be read back with; declare it in {type(self.delegate).__name__}.template_versions"
                )
            protocol = self.delegate.protocol_dict()
            writable, delegate_name = self._writable, self.delegate.name

            def record(position: int, result: MeasureResult) -> None:
                # appended the moment it is known: a crash loses only the config in flight; a failure of the
                # machine is no result of the config: not appended, so the next run measures it again
                if not result.machine_failure:
                    writable.append(task, delegate_name, target, template, result, protocol)
                results[missing[position]] = result
                if on_result is not None:
                    on_result(missing[position], result)

            delegate_measure = self.delegate.measure_exact if exact else self.delegate.measure
            delegate_measure(task, [configs[i] for i in missing], on_result=record)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for store in self.stores:
            store.close()
        if self.delegate is not None:
            self.delegate.close()
