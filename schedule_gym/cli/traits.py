"""What the commands read of a backend by its short name: :data:`schedule_gym.backends.BACKENDS`' traits, and
the one trait it does not declare yet.

The commands never compare a backend's name with a literal: they read
:class:`~schedule_gym.backends.BackendSpec` (``measures_hardware``, ``needs_tvm``, ``serves_records``), or
:func:`measures_remotely` here.
"""

from __future__ import annotations

__all__ = ["REMOTE_BACKENDS", "measures_remotely", "spoken_list"]

#: The backends whose kernels run on other machines (a device farm behind a TVM RPC tracker): their kernels
#: cannot be checked here, and Ray workers may use them without timing kernels side by side. ``BackendSpec``
#: has no trait for this yet; when it has one, :func:`measures_remotely` reads it instead.
REMOTE_BACKENDS = frozenset({"rpc"})


def measures_remotely(name: str) -> bool:
    """Whether the backend ``name`` times its kernels on other machines than this one."""
    return name in REMOTE_BACKENDS


def spoken_list(names: list[str]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
