"""What the commands read of a backend by its short name: :data:`schedule_gym.backends.BACKENDS`' traits.

The commands never compare a backend's name with a literal: they read
:class:`~schedule_gym.backends.BackendSpec` (``measures_hardware``, ``needs_tvm``, ``serves_records``, ``remote``).
"""

from __future__ import annotations

from schedule_gym.backends import BACKENDS

__all__ = ["measures_remotely", "spoken_list"]


def measures_remotely(name: str) -> bool:
    """Whether the backend ``name`` times its kernels on other machines than this one (their kernels cannot be
    checked here, and Ray workers may use them without timing kernels side by side)."""
    return name in BACKENDS and BACKENDS[name].remote


def spoken_list(names: list[str]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
