"""Optional dependencies: which extra of ``pip install 'schedule-gym[...]'`` installs what.

The core install (numpy and Gymnasium) runs the environments on the mock and replay backends with the agents
that need nothing more (random, gbfs, grid). The rest comes with extras (``pyproject.toml``):
:data:`EXTRAS` says which modules each installs. :func:`require` is called where each kind of thing is
loaded (an agent by name, the TVM backend, the SB3 adapters, the model commands), so that a missing module
is a :class:`~schedule_gym.errors.MissingExtraError` naming what to install, before any work, rather than
a bare ``ModuleNotFoundError`` from deep inside (or after the first measurements).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from schedule_gym.errors import MissingExtraError

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: extra -> the modules it installs that schedule-gym imports (top-level names)
EXTRAS: dict[str, tuple[str, ...]] = {
    "agents": ("torch",),
    "rl": ("torch", "stable_baselines3", "sb3_contrib"),
    "baselines": ("xgboost", "matplotlib"),
    "tvm": ("tvm", "tvm_ffi", "cloudpickle", "psutil"),
    "cli": ("rich",),
    "ray": ("ray",),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module object without a spec, or a broken parent
        return False


def require(what: str, *extras: str, modules: Sequence[str] = ()) -> None:
    """Raise :class:`MissingExtraError` if a module ``what`` needs is not installed: ``modules`` (default:
    every module of ``extras``). The message names ``what``, the missing modules and the extras that install
    them (``pip install 'schedule-gym[agents,tvm]'``).

    >>> require("the mock backend", "agents", modules=["numpy"])
    >>> require("agent 'x'", "agents", modules=["no_such_module_here"])
    Traceback (most recent call last):
    ...
    schedule_gym.errors.MissingExtraError: agent 'x' needs no_such_module_here, which is not installed: pip install 'schedule-gym[agents]'
    """
    unknown = [extra for extra in extras if extra not in EXTRAS]
    if unknown or not extras:
        raise ValueError(f"unknown extras {unknown}; extras: {', '.join(EXTRAS)}")
    wanted = modules or [module for extra in extras for module in EXTRAS[extra]]
    missing = [module for module in dict.fromkeys(wanted) if not _installed(module)]
    if missing:
        install = [extra for extra in extras if set(EXTRAS[extra]) & set(missing)] or list(extras)
        verb = "is" if len(missing) == 1 else "are"
        raise MissingExtraError(
            f"{what} needs {', '.join(missing)}, which {verb} not installed: pip install 'schedule-gym[{','.join(install)}]'"
        )
