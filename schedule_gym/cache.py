"""Where schedule-gym keeps what it learns about the user's machine (one place for the path rules).

The user cache is ``$SCHEDULE_GYM_CACHE`` if set, else ``$XDG_CACHE_HOME/schedule-gym``, else
``~/.cache/schedule-gym``. It holds

* ``profiles/<cpu>.json``: a mock CPU profile fitted on this machine by ``schedule-gym calibrate``, named
  by the CPU (:func:`schedule_gym.hardware.cpu_name`); the mock prefers it to the shipped profiles
  (:func:`schedule_gym.backends.mock.selection.select_profile`);
* ``calibration/``: the measurements ``schedule-gym calibrate`` made (record files, resumable);
* ``benchmark/references.json``: the benchmark's reference latencies (:mod:`schedule_gym.benchmark.references`).

Nothing is created until something is written there.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir", "calibration_dir", "profile_path", "profiles_dir", "references_path"]

#: The environment variable that moves the whole cache (tests point it at a temporary folder).
CACHE_ENV = "SCHEDULE_GYM_CACHE"


def cache_dir() -> Path:
    """The user cache folder (read from the environment at every call, so a changed variable counts)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "schedule-gym"
    return Path.home() / ".cache" / "schedule-gym"


def profiles_dir() -> Path:
    """Folder of the user's fitted mock CPU profiles, one JSON file per CPU name."""
    return cache_dir() / "profiles"


def profile_path(cpu: str) -> Path:
    """The file of the user's fitted mock profile for the CPU named ``cpu`` (e.g. ``znver3``)."""
    if not isinstance(cpu, str) or not cpu or "/" in cpu or cpu.startswith("."):
        raise ValueError(f"a CPU name must be a plain non-empty name, got {cpu!r}")
    return profiles_dir() / f"{cpu}.json"


def calibration_dir() -> Path:
    """Folder of the record files ``schedule-gym calibrate`` measures into."""
    return cache_dir() / "calibration"


def references_path() -> Path:
    """The file of the benchmark's cached reference latencies."""
    return cache_dir() / "benchmark" / "references.json"
