"""Which CPU profile the mock models: the shipped profiles, and the choice ``profile="auto"`` makes.

The shipped profiles are the JSON files in this package's ``profiles/`` folder, one per profile, named
after it (:data:`PROFILES`); a shipped profile's numbers never change under its name (a refit gets a new
name), so records of its measurements (target ``mock:<name>``) stay valid. Where each fitted profile came
from is in ``examples/results/calibration/profiles.md``.

``profile="auto"`` (:func:`select_profile`) models the CPU it runs on
(:func:`schedule_gym.hardware.cpu_name`), in this order:

1. a profile fitted on this machine with ``schedule-gym calibrate`` and stored in the user cache as
   ``profiles/<cpu>.json`` (:mod:`schedule_gym.cache`);
2. the shipped profile fitted to that CPU (:data:`FITTED_FOR_CPU`);
3. for any other CPU, the nominal, unfitted profile of its vector ISA (:func:`nominal_profile_name`).
   Nominal profiles rank configs worse than fitted ones: such a user should run ``schedule-gym calibrate``
   once, after which step 1 applies.

A profile named explicitly, or given as a :class:`CPUProfile`, is used as given on any machine
(:func:`resolve_profile`): name one wherever numbers must not depend on the machine.
"""

from __future__ import annotations

from pathlib import Path

from schedule_gym import cache, hardware
from schedule_gym.backends.mock.profile import CPUProfile, read_profile

__all__ = [
    "AUTO_PROFILE",
    "FITTED_FOR_CPU",
    "PROFILES",
    "PROFILES_DIR",
    "is_shipped",
    "nominal_profile_name",
    "resolve_profile",
    "select_profile",
]

#: The folder of the shipped profiles, ``<name>.json`` each.
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


def _shipped_profiles() -> dict[str, CPUProfile]:
    profiles = {}
    for path in sorted(PROFILES_DIR.glob("*.json")):
        profile = read_profile(path)
        if profile.name != path.stem:
            raise ValueError(f"mock profile file {path} holds profile {profile.name!r}; a shipped profile's file is named after it")
        profiles[profile.name] = profile
    return profiles


#: The shipped CPU profiles by name (read from :data:`PROFILES_DIR`).
PROFILES: dict[str, CPUProfile] = _shipped_profiles()

#: The default of :class:`~schedule_gym.backends.mock.backend.MockBackend`'s ``profile``: choose by this
#: machine's CPU (:func:`select_profile`).
AUTO_PROFILE = "auto"

#: The shipped profile fitted to each CPU (by :func:`schedule_gym.hardware.cpu_name`'s names).
FITTED_FOR_CPU: dict[str, str] = {
    "znver5": "znver5-2core-fitted", "znver4": "znver4-2core-fitted", "znver3": "znver3-2core-fitted",
    # fitted on a Xeon LLVM calls sapphirerapids; Emerald Rapids (the Xeon of other days) is the nearest fit
    "sapphirerapids": "sapphirerapids-2core-fitted", "emeraldrapids": "sapphirerapids-2core-fitted",
}


def nominal_profile_name(cpu: str | None = None) -> str:
    """The nominal profile of a CPU's vector ISA: ``avx512-2core-nominal`` with AVX-512, else
    ``avx2-2core-nominal`` (``cpu``: a name as :func:`schedule_gym.hardware.cpu_name` gives; default: this one)."""
    return "avx512-2core-nominal" if hardware.cpu_has_avx512(cpu) else "avx2-2core-nominal"


def select_profile(cpu: str | None = None) -> tuple[CPUProfile, str]:
    """The profile ``profile="auto"`` picks for the CPU named ``cpu`` (default: this machine's), and a
    phrase saying why: the user's calibrated profile for that CPU if the cache holds one, else the shipped
    profile fitted to it, else the nominal profile of its ISA (see the module's documentation). A
    malformed cache file raises ``ValueError`` naming the file and the field."""
    cpu = hardware.cpu_name() if cpu is None else cpu
    path = cache.profile_path(cpu)
    if path.is_file():
        return read_profile(path), f"calibrated on this machine ({path})"
    if cpu in FITTED_FOR_CPU:
        return PROFILES[FITTED_FOR_CPU[cpu]], f"shipped profile fitted to {cpu}"
    name = nominal_profile_name(cpu)
    return PROFILES[name], f"nominal profile for {cpu} (no fitted profile: run schedule-gym calibrate)"


def resolve_profile(profile: CPUProfile | str) -> tuple[CPUProfile, str]:
    """The profile ``profile`` stands for and why: ``"auto"`` (:func:`select_profile`), the name of a
    shipped profile (``"named"``), or a :class:`CPUProfile` (``"given"``). Anything else raises, naming it."""
    if isinstance(profile, str) and profile == AUTO_PROFILE:
        return select_profile()
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise ValueError(f"unknown CPU profile {profile!r}; known profiles: "
                             f"{AUTO_PROFILE!r} (by this CPU), {', '.join(map(repr, PROFILES))}")
        return PROFILES[profile], "named"
    if not isinstance(profile, CPUProfile):
        raise TypeError(f"profile must be a CPUProfile or a profile name, got {profile!r}")
    return profile, "given"


def is_shipped(profile: CPUProfile) -> bool:
    """Whether ``profile`` is a shipped profile, numbers and name (its records need no digest in their target)."""
    return PROFILES.get(profile.name) == profile
