"""Measurement records: an append-only JSON-lines file, one measurement per line.

Each line is self-describing (schema ``schedule-gym/record/v1``): the task's key and definition, the
backend, target and template version that produced it, the config, the latency and raw costs or the
error, build and run seconds, the measurement protocol and a timestamp. A censored result ("slower than
``latency_s``", :attr:`~schedule_gym.types.MeasureResult.censored`) is written with ``"censored": true``
under schema ``schedule-gym/record/v2``, so that a reader that knows only v1 refuses it rather than take
its bound for a latency; both schemas are read, and a record without the field is not censored. A record is keyed by
``(task key, target, template, config)``; a later line with the same key replaces an earlier one. A failure
of the machine (``error_kind`` ``"machine"``: a file-size limit, a full disk, no linker) is never written: it
is no result of its config, and a record of it would stop a resumed run measuring the config.

Durability. A record is written with one ``write`` on a file opened ``O_APPEND`` and flushed to disk
(``fsync``) before :meth:`RecordStore.append` returns, so killing the process at any moment loses at
most the measurement in flight. The only damage a kill can leave is a last line without its newline;
opening the file for appending cuts that partial line off (it was the one in flight). A write that fails
(a full disk, a file-size limit, an I/O error) is cut back off the file at once and raised as a
:class:`RecordFileError` naming the file and the cause, so the file holds exactly the records written
before it. Any other line that does not parse is a :class:`RecordFileError` naming the file and the line.
:meth:`RecordStore.ensure_writable` opens the file for appending (creating its folder) so that a place
that cannot be written is refused before anything is measured.

Files ending in ``.gz`` are read (read-only): the shipped tables are stored that way.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedule_gym.errors import RecordFileError
from schedule_gym.types import ERROR_KINDS, MeasureResult
from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

__all__ = ["CENSORED_RECORD_SCHEMA", "RECORD_SCHEMA", "Record", "RecordFileError", "RecordStore"]

RECORD_SCHEMA = "schedule-gym/record/v1"
#: the schema of a censored result's record: v1 plus ``"censored": true``. A reader that knows only v1
#: refuses the line instead of taking the bound for a latency.
CENSORED_RECORD_SCHEMA = "schedule-gym/record/v2"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One measurement as stored: the result plus where it came from."""

    task: Task
    backend: str
    target: str
    template: str
    result: MeasureResult
    protocol: dict[str, Any]
    time: float
    host: str

    @property
    def key(self) -> tuple[str, str, str, Config]:
        return (self.task.key, self.target, self.template, self.result.config)

    def to_json(self) -> str:
        r = self.result
        return json.dumps(
            {
                "schema": CENSORED_RECORD_SCHEMA if r.censored else RECORD_SCHEMA,
                "task": self.task.key,
                "task_def": self.task.to_dict(),
                "backend": self.backend,
                "target": self.target,
                "template": self.template,
                "config": [list(f) for f in r.config],
                "latency_s": r.latency_s,
                "costs_s": list(r.costs_s),
                "error": r.error,
                "error_kind": r.error_kind,
                "build_s": r.build_s,
                "run_s": r.run_s,
                "coarse": r.coarse,
                **({"censored": True} if r.censored else {}),  # absent: not censored (v1 records)
                "protocol": self.protocol,
                "time": self.time,
                "host": self.host,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, line: str, where: str) -> Record:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RecordFileError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict) or data.get("schema") not in (RECORD_SCHEMA, CENSORED_RECORD_SCHEMA):
            found = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise RecordFileError(f"{where}: not a schedule-gym record (schema {found!r}, expected {RECORD_SCHEMA!r} or {CENSORED_RECORD_SCHEMA!r})")
        try:
            task = Task.from_dict(data["task_def"])
            if task.key != data["task"]:
                raise ValueError(f"task key {data['task']!r} does not match its definition ({task.key!r})")
            config = _config_of(task, data["config"])
            latency = data["latency_s"]
            error_kind = data.get("error_kind")
            if error_kind is not None and error_kind not in ERROR_KINDS:
                raise ValueError(f"unknown error_kind {error_kind!r}")
            result = MeasureResult(
                config=config,
                latency_s=None if latency is None else float(latency),
                costs_s=tuple(float(c) for c in data.get("costs_s", ())),
                error=data.get("error"),
                error_kind=error_kind,
                build_s=float(data.get("build_s", 0.0)),
                run_s=float(data.get("run_s", 0.0)),
                coarse=bool(data.get("coarse", False)),
                censored=_flag(data.get("censored", False), "censored"),
            )
            return cls(
                task=task,
                backend=str(data["backend"]),
                target=str(data["target"]),
                template=str(data["template"]),
                result=result,
                protocol=dict(data.get("protocol") or {}),
                time=float(data.get("time", 0.0)),
                host=str(data.get("host", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            missing = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RecordFileError(f"{where}: bad record ({missing})") from None


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _config_of(task: Task, raw: Any) -> Config:
    """``raw`` as a config of ``task``; ValueError naming the mismatch if it is not one (a record whose
    config does not belong to its task could never be looked up: it is reported, not skipped)."""
    if not isinstance(raw, list) or len(raw) != len(task.dims) or not all(isinstance(f, list) for f in raw):
        raise ValueError(f"config {raw!r} does not belong to task {task.name!r}: it has {len(task.dims)} dimensions")
    for dim, factors in zip(task.dims, raw):
        if len(factors) != dim.splits or not all(isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in factors):
            raise ValueError(
                f"config {raw!r} does not belong to task {task.name!r}: dimension {dim.name!r} needs "
                f"{dim.splits} positive integer factors, got {factors!r}"
            )
        product = 1
        for f in factors:
            product *= f
        if product != dim.extent:
            raise ValueError(
                f"config {raw!r} does not belong to task {task.name!r}: the factors of {dim.name!r} multiply "
                f"to {product}, not its extent {dim.extent}"
            )
    return tuple(tuple(factors) for factors in raw)


class RecordStore:
    """The records of one file, indexed by key; new records are appended durably.

    Args:
        path: the JSON-lines file (created on the first append). ``.gz`` files are read-only.
        fsync: flush every append to disk (default). Turn off only for throw-away files.
    """

    def __init__(self, path: str | os.PathLike, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.read_only = self.path.suffix == ".gz"
        self._records: dict[tuple[str, str, str, Config], Record] = {}
        #: the first line of each template version read from the file (for errors that name the line)
        self._template_lines: dict[str, int] = {}
        self._fd: int | None = None
        if self.path.is_dir():
            raise RecordFileError(f"{self.path}: is a directory, not a record file")
        if self.path.exists():
            for record in self._read():
                self._records[record.key] = record
        elif self.read_only:
            raise RecordFileError(f"{self.path}: record file does not exist")

    def _read(self) -> Iterator[Record]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise RecordFileError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        if self.read_only:
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:  # not gzip, truncated, corrupt
                raise RecordFileError(f"{self.path}: not a readable gzip file ({exc or type(exc).__name__})") from None
        lines = data.split(b"\n")
        # A last line without its newline is the write a kill interrupted: skip it (append cuts it off).
        complete, tail = lines[:-1], lines[-1]
        if tail.strip():
            log.warning("%s:%d: ignoring an incomplete last line (interrupted write)", self.path, len(lines))
        for lineno, raw in enumerate(complete, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordFileError(f"{self.path}:{lineno}: not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from None
            if line.strip():
                record = Record.from_json(line, f"{self.path}:{lineno}")
                self._template_lines.setdefault(record.template, lineno)
                yield record

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records.values())

    def get(self, task: Task, target: str, template: str, config: Config) -> Record | None:
        return self._records.get((task.key, target, template, config))

    def contexts(self) -> dict[tuple[str, str, str], int]:
        """How many records each (task key, target, template) holds."""
        out: dict[tuple[str, str, str], int] = {}
        for task_key, target, template, _ in self._records:
            out[(task_key, target, template)] = out.get((task_key, target, template), 0) + 1
        return out

    def tasks(self) -> dict[str, Task]:
        return {r.task.key: r.task for r in self._records.values()}

    def records_of(self, task: Task, target: str | None = None, template: str | None = None) -> list[Record]:
        return [
            r
            for r in self._records.values()
            if r.task.key == task.key and target in (None, r.target) and template in (None, r.template)
        ]

    def check_templates(self, known: Collection[str]) -> None:
        """Raise :class:`RecordFileError` naming the first line whose template version is not in ``known``
        (a record of another schedule-gym's template, or written by hand, is never served or skipped silently)."""
        for template, lineno in sorted(self._template_lines.items(), key=lambda item: item[1]):
            if template not in known:
                raise RecordFileError(
                    f"{self.path}:{lineno}: template version {template!r} is not one this schedule-gym knows "
                    f"({', '.join(sorted(known))}); the record was written by another version or by hand"
                )

    def _unwritable(self, exc: OSError) -> RecordFileError:
        return RecordFileError(f"{self.path}: cannot be written ({exc.strerror or exc})")

    def ensure_writable(self) -> None:
        """Open the file for appending now, creating its folder and the file: a place that cannot be written
        raises :class:`RecordFileError` naming the file and the cause (before anything is measured)."""
        self._open_for_append()

    def _open_for_append(self) -> int:
        if self.read_only:
            raise RecordFileError(f"{self.path}: compressed record files are read-only")
        if self._fd is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RecordFileError(
                    f"{self.path}: cannot be written: its folder cannot be made ({exc.strerror or exc}: {exc.filename})"
                ) from None
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as exc:
                raise self._unwritable(exc) from None
            try:
                size = os.fstat(fd).st_size
                if size:
                    # cut off an interrupted last line so the next record starts on a line of its own
                    with open(self.path, "rb") as f:
                        data = f.read()
                    end = data.rfind(b"\n") + 1
                    if end != len(data):
                        os.ftruncate(fd, end)
            except OSError as exc:
                os.close(fd)
                raise self._unwritable(exc) from None
            self._fd = fd
        return self._fd

    def append(
        self,
        task: Task,
        backend: str,
        target: str,
        template: str,
        result: MeasureResult,
        protocol: dict[str, Any] | None = None,
    ) -> Record:
        """Write one measurement (durably) and index it. A write that fails is cut back off the file and
        raised as :class:`RecordFileError` naming the file and the cause; the records before it stay. A
        failure of the machine (:attr:`MeasureResult.machine_failure`) is not a result of its config and is
        refused (``ValueError``): a record of it would stop a resumed run measuring the config."""
        if result.machine_failure:
            raise ValueError(f"{self.path}: a failure of the machine is never recorded as config {result.config}'s "
                             f"result ({result.error})")
        record = Record(task, backend, target, template, result, dict(protocol or {}), time.time(), socket.gethostname())
        line = (record.to_json() + "\n").encode("utf-8")
        fd = self._open_for_append()
        try:
            start = os.fstat(fd).st_size
        except OSError as exc:
            raise self._unwritable(exc) from None
        try:
            rest = memoryview(line)
            while rest:  # a write cut short (a full disk, a file-size limit) is followed by one that says why
                written = os.write(fd, rest)
                if written == 0:
                    raise OSError(errno.EIO, "no byte written")
                rest = rest[written:]
            if self.fsync:
                os.fsync(fd)
        except BaseException as exc:  # an interrupt too: a later append must not follow a torn line
            self._cut_back(start)
            if isinstance(exc, OSError):
                raise RecordFileError(
                    f"{self.path}: could not write a record ({exc.strerror or exc}); the records written "
                    "before it are intact"
                ) from None
            raise
        self._records[record.key] = record
        return record

    def _cut_back(self, size: int) -> None:
        """Truncate the file to ``size`` bytes (what it held before a failed write); if even that fails, close
        it, so that the next append's open cuts the torn line off."""
        try:
            os.ftruncate(self._fd, size)  # type: ignore[arg-type]
        except OSError:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


