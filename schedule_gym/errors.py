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
``ConnectionError``         a remote service (RPC tracker, RPC servers) unreachable, not what it should
                            be, or silent past its deadline (names the address, the key, the deadline)
``RuntimeError``            an object used after ``close()``; the host cannot do what was asked (its
                            CPU cannot be named to LLVM, no GPU for a CUDA check); a compiled model whose
                            outputs differ from PyTorch's
                            (:class:`~schedule_gym.models.pipeline.OutputMismatchError`, names the output)
==========================  ===============================================================================

``KeyboardInterrupt`` passes through untouched (records written so far stay intact).

The command line (``schedule-gym``) prints any of :data:`USER_ERRORS` (and bad arguments) as one line,
``schedule-gym: error: <message>``, on stderr and returns exit code 2; Ctrl-C returns 130. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["MissingRecordError", "PUBLIC_ERRORS", "RecordFileError", "TaskError", "USER_ERRORS"]


class TaskError(ValueError):
    """A task this environment or backend cannot tune; the message names the task and the limit."""


class RecordFileError(ValueError):
    """A record file (or one of its lines) cannot be used; the message names the file and line."""


class MissingRecordError(LookupError):
    """A config asked of a replay backend without a delegate is not in its records."""


#: Every exception type the public surface raises on purpose (subclasses included).
PUBLIC_ERRORS: tuple[type[Exception], ...] = (TypeError, ValueError, LookupError, ConnectionError, RuntimeError)

#: What the command line reports as one line with exit code 2, whichever command raised it.
USER_ERRORS: tuple[type[Exception], ...] = (TaskError, RecordFileError, MissingRecordError, ConnectionError)
