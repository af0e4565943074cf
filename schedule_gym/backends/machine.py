"""Failures of the machine, told apart from failures of the config.

A build fails because of its config (the schedule does not compile, the compiler crashes on it) or because
of the machine it runs on: a file-size limit (``ulimit -f``, ``RLIMIT_FSIZE``) or a full disk stops the
compiler or linker writing the kernel, the linker or compiler is not installed, the build process runs out
of memory. The second kind says nothing about the config. Such a build is a result of ``error_kind``
:data:`MACHINE`, which no record file stores (:meth:`~schedule_gym.records.RecordStore.append` refuses it),
so a resumed run measures the config again; :func:`machine_cause` recognises it from the error's text, in
a build that just failed and in a record written before the kind existed (the replay backend measures
those again too).
"""

from __future__ import annotations

import re

from schedule_gym.errors import MachineError
from schedule_gym.types import MACHINE

__all__ = ["DISK_FULL", "MACHINE", "MachineError", "machine_cause", "machine_failure"]

#: The cause named for a full disk.
DISK_FULL = "the disk is full (no space left on device)"

#: (what an error's text says, the cause it names), the first that matches wins. A missing program is named
#: by a message of the form ``No such file or directory: 'g++'`` (a bare program name, not a path).
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"file too large|file size limit exceeded|\bEFBIG\b", re.I),
     "a file-size limit (ulimit -f, RLIMIT_FSIZE) stops the compiler or linker writing the kernel"),
    (re.compile(r"no space left on device|\bENOSPC\b", re.I), DISK_FULL),
    (re.compile(r"disk quota exceeded|\bEDQUOT\b", re.I), "the disk quota is used up"),
    (re.compile(r"cannot find '?ld'?(\s|$)|no linker", re.I),
     "no linker: ld (binutils) is not installed or not on PATH"),
    (re.compile(r"No such file or directory: '([A-Za-z0-9_+-]+)'"), "{0} is not installed or not on PATH"),
    (re.compile(r"MemoryError|out of memory|cannot allocate memory|std::bad_alloc", re.I),
     "the build process ran out of memory"),
)


def machine_cause(error: str | None) -> str | None:
    """The machine cause a build error's text names (see the module docstring), or None: a failure of the config.

    >>> machine_cause("LLVM ERROR: IO failure on output stream: File too large")
    'a file-size limit (ulimit -f, RLIMIT_FSIZE) stops the compiler or linker writing the kernel'
    >>> machine_cause("build failed: FileNotFoundError: [Errno 2] No such file or directory: 'nvcc'")
    'nvcc is not installed or not on PATH'
    >>> machine_cause("build failed: TVMError: Check failed: factor > 0") is None
    True
    """
    if not error:
        return None
    for pattern, cause in _CAUSES:
        found = pattern.search(error)
        if found:
            return cause.format(*found.groups())
    return None


def machine_failure(results: list[tuple[str | None, str]], task_name: str) -> MachineError | None:
    """The :class:`MachineError` to raise when every one of ``results`` (``(machine cause or None, error
    text)`` per build of a batch of configs of task ``task_name``) failed the same machine way, else None."""
    causes = {cause for cause, _ in results}
    if not results or None in causes or len(causes) != 1:
        return None
    cause, detail = results[0]
    n = len(results)
    builds = f"every build of the {n} configs" if n > 1 else "the build of the config"
    return MachineError(
        f"{builds} of task {task_name!r} failed because of this machine, not the config{'s' * (n > 1)}: {cause} "
        f"({detail}); nothing of it was recorded: fix this and run the same command again to measure {'them' if n > 1 else 'it'}"
    )
