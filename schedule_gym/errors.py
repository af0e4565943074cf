"""The error contract: which exceptions the public surface raises, and what the command line prints.

Measurement failures are values, never exceptions: a config whose kernel fails to build, crashes, hangs,
runs out of memory or computes a wrong answer is a :class:`~schedule_gym.types.MeasureResult` with
``error`` and ``error_kind`` set. Everything else that cannot be done raises one of these, with a
message that names the bad value (the argument, the file and line, the address):

==========================  ===============================================================================
``TypeError``               an argument of the wrong type (names the argument and the value)
``ValueError``              a bad value: an unknown name, a number out of range, a config or action
                            outside the task's space, an unknown option
  :class:`TaskError`        a task that cannot be tuned here: no legal moves, a dtype whose result
                            cannot be checked soundly, inputs larger than this machine's memory
                            (names the task and the limit); a model that cannot be captured or imported
                            (:class:`~schedule_gym.models.importer.ModelImportError`)
  :class:`RecordFileError`  a record file, or a line of one, that cannot be used: not found, a
                            directory, not gzip, not UTF-8, not JSON, wrong fields, a template version
                            this code does not know (names file and line); a place that cannot be
                            written, a write that failed (names file and cause)
``LookupError``
  :class:`MissingRecordError`  a replay backend without a delegate asked for a config it has no record of
``ImportError``
  :class:`MissingExtraError`  an optional dependency is not installed (names it and the extra that installs
                            it: ``pip install 'schedule-gym[tvm]'``)
``ConnectionError``         a remote service (RPC tracker, RPC servers) unreachable, not what it should
                            be, or silent past its deadline (names the address, the key, the deadline)
``RuntimeError``            an object used after ``close()``; the host cannot do what was asked (its
                            CPU cannot be named to LLVM, no GPU for a CUDA check); a compiled model whose
                            outputs differ from PyTorch's
                            (:class:`~schedule_gym.models.pipeline.OutputMismatchError`, names the output)
  :class:`MachineError`     this machine cannot measure, whatever the config: every build of a batch
                            failed the same machine way (a file-size limit, a full disk, a missing compiler
                            or linker, the builder out of memory), or the target's device is not there (a
                            CUDA target without a GPU); names the cause, nothing of the batch is recorded
==========================  ===============================================================================

A failure of the machine is not a failure of the config: a build that fails that way is a
:class:`~schedule_gym.types.MeasureResult` of ``error_kind`` ``"machine"``, which no record file stores (a
resumed run measures the config again), and a batch whose every build fails the same machine way raises
:class:`MachineError` instead of reporting results that say nothing about the configs.

``KeyboardInterrupt`` passes through untouched (records written so far stay intact).

The command line (``schedule-gym``) prints any of :data:`USER_ERRORS` (and bad arguments) as one line,
``schedule-gym: error: <message>``, on stderr and returns exit code 2; Ctrl-C returns 130. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["MachineError", "MissingExtraError", "MissingRecordError", "PUBLIC_ERRORS", "RecordFileError", "TaskError", "USER_ERRORS"]


class TaskError(ValueError):
    """A task this environment or backend cannot tune; the message names the task and the limit."""


class RecordFileError(ValueError):
    """A record file (or one of its lines) cannot be used; the message names the file and line."""


class MissingRecordError(LookupError):
    """A config asked of a replay backend without a delegate is not in its records.

    ``what`` says which config and which files, ``way_out`` what to do in Python (the message is both);
    ``measured_by`` names the backends whose records the files hold, so that a caller with other means
    (the command line: ``--backend tvm --records FILE``) can say its own way out."""

    def __init__(self, what: str, way_out: str = "", measured_by: tuple[str, ...] = ()) -> None:
        super().__init__(f"{what}; {way_out}" if way_out else what)
        self.what, self.way_out, self.measured_by = what, way_out, tuple(measured_by)

    def __reduce__(self) -> tuple:  # pickled whole (Ray, worker processes), not from the message alone
        return (type(self), (self.what, self.way_out, self.measured_by))


class MissingExtraError(ImportError):
    """Something asked for needs an optional dependency that is not installed; the message names the extra
    to install (``pip install 'schedule-gym[agents]'``)."""


class MachineError(RuntimeError):
    """This machine cannot measure now, whatever the config (every build of a batch failed the same machine way,
    or the target's device is missing); the message names the cause and what to fix. Nothing of the batch is
    recorded, so the same run resumed measures it."""


#: Every exception type the public surface raises on purpose (subclasses included).
PUBLIC_ERRORS: tuple[type[Exception], ...] = (
    TypeError, ValueError, LookupError, ImportError, ConnectionError, RuntimeError
)

#: What the command line reports as one line with exit code 2, whichever command raised it.
USER_ERRORS: tuple[type[Exception], ...] = (
    TaskError, RecordFileError, MissingRecordError, MissingExtraError, ConnectionError, MachineError
)
