"""The command line's error contract: exit codes, and :class:`CLIError` for bad command-line input.

Bad input (an unknown name, a malformed value), an unusable record file, an unreachable or silent RPC
tracker, a task that cannot be tuned: one line on stderr, ``schedule-gym: error: ...``, naming the value,
exit code :data:`EXIT_USAGE` (the library's side of the contract: :mod:`schedule_gym.errors`). A run
stopped by Ctrl-C exits with :data:`EXIT_INTERRUPTED`.
"""

from __future__ import annotations

import argparse

from schedule_gym.errors import MissingRecordError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "CLIError", "Parser", "user_error_line"]

#: Exit codes: bad input, and a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CLIError(Exception):
    """Bad command-line input; the message is printed as one line and the exit code is 2."""


class Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is a :class:`CLIError` (one line, no usage dump, no exit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CLIError(f"{message} (see {self.prog} --help)")


def user_error_line(exc: Exception) -> str:
    """The one line printed for a user error: its message, except that a config missing from the records
    ends with the command line's way out (the backend that measured them, with the same ``--records``),
    not the Python API's."""
    if isinstance(exc, MissingRecordError):
        backend = exc.measured_by[0] if len(exc.measured_by) == 1 else "tvm"
        return (f"schedule-gym: error: {exc.what}; to measure what is missing, run the command with --backend "
                f"{backend} and the same --records (it serves the records and measures and appends the rest)")
    return f"schedule-gym: error: {exc}"
