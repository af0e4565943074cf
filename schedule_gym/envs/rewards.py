"""Reward spaces: what a step is rewarded for, as objects (CompilerGym's ``spaces/reward.py`` convention).

Every environment, single or vector, computes a step's reward with the same object, on NumPy scalars or
arrays alike, so the single and vector environments agree to the bit by construction. The environment
resolves what a formula needs before calling it: ``latency_s`` is the new config's latency (a censored
measurement's bound: the most it can deserve), ``prev_s`` the last successful latency of the episode and
``ref_s`` the reference (``s0``'s exact latency, or ``reward_ref_latency_s``), each replaced by
``latency_s`` where there is none yet; ``best_before_s`` / ``best_after_s`` are the session's best exact
latency before and after the step (``inf`` where there is none). Illegal moves, failed measurements and
moves refused by a spent budget never reach a reward object: they get the environment's penalties.

==========================  ================================================  ==========================================
name                        reward of a step                                  scale
==========================  ================================================  ==========================================
``"inverse"``               ``ref / cost`` (Zhang et al., Eq. 8)              the speed-up over ``s0``: 1 at ``s0``, up to
                                                                              hundreds at the optimum of a large task
``"log_speedup_prev"``      ``log(prev / cost)``                              order one; an episode's sum telescopes to
                                                                              the log speed-up over its start
``"log_speedup_s0"``        ``log(ref / cost)``                               order one to a few; 0 at ``s0``
``"best_improvement"``      ``log(best_before / best_after) - c * new``       >= 0 before the cost; an episode's sum is the
                            (``c``: ``cost_per_measurement``)                  log speed-up of its best over the start's
                                                                              latency, less ``c`` per new measurement
==========================  ================================================  ==========================================

``get_reward("best_improvement:0.01")`` sets the cost per new measurement; :class:`BestImprovement` can
be made directly too. A reward object may be passed wherever a reward name is accepted.

**Per-task normalisation** (``reward_scale="task"``): every reward of a task is divided by
:meth:`RewardSpace.task_scale` of the task (the log speed-up from ``s0`` to the best of
``NORMALISATION_SAMPLES`` configs drawn uniformly with seed 0, or for ``"inverse"`` that speed-up itself), so
tasks whose spaces hold larger speed-ups do not dominate a multi-task objective: climbing from ``s0`` to
that optimum earns about 1 on every task. It needs a backend that scores configs in bulk (the mock, tables).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["NORMALISATION_SAMPLES", "REWARDS", "BestImprovement", "Inverse", "LogSpeedupPrev", "LogSpeedupS0", "RewardSpace", "get_reward"]


#: configs drawn (seed 0) to estimate a task's optimum for ``reward_scale="task"``
NORMALISATION_SAMPLES = 4096


class RewardSpace:
    """A reward formula over resolved step facts (see the module docstring).

    ``needs_reference``: the environment must know ``s0``'s exact latency (it measures ``s0`` at the
    start of a session unless ``reward_ref_latency_s`` is given); ``uses_best``: the formula reads the
    session's best before the step (other formulas get None there).
    """

    name: str = ""
    needs_reference: bool = False
    #: reads ``best_before_s`` (the environment keeps the session's best before each step)
    uses_best: bool = False
    #: read ``prev_s`` / ``ref_s``: a vector environment passes None for what a formula declares it does not
    #: read, saving the array operations that resolve it (True, the safe default, for a formula of your own)
    uses_prev: bool = True
    uses_reference: bool = True

    def __call__(self, latency_s: Any, prev_s: Any, ref_s: Any, best_before_s: Any, best_after_s: Any,
                 new: Any) -> Any:
        raise NotImplementedError

    def of_arrays(self, latency_s: np.ndarray, prev_s: np.ndarray, ref_s: np.ndarray,
                  best_before_s: np.ndarray | None, best_after_s: np.ndarray, new: np.ndarray) -> np.ndarray:
        """The rewards of a batch of steps (the vector environments'): ``prev_s`` and ``ref_s`` hold NaN where
        there is none yet and are resolved to ``latency_s`` there, each only if the formula reads it."""
        prev = ref = None
        if self.uses_prev:
            prev = np.where(np.isnan(prev_s), latency_s, prev_s)
        if self.uses_reference:
            ref = np.where(np.isnan(ref_s), latency_s, ref_s)
        return self(latency_s, prev, ref, best_before_s, best_after_s, new)

    def task_scale(self, s0_s: float, optimum_s: float) -> float:
        """What ``reward_scale="task"`` divides this reward by on a task whose ``s0`` takes ``s0_s`` and whose
        (estimated) optimum ``optimum_s``: the log speed-up between them, so an episode that climbs from ``s0``
        to the optimum sums to about 1 on every task."""
        return math.log(s0_s / optimum_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))


class Inverse(RewardSpace):
    """``ref / cost``: the speed-up over ``s0`` (the paper's Eq. 8 with ``s0``'s latency as the unit)."""

    name = "inverse"
    uses_prev = False
    needs_reference = True

    def __call__(self, latency_s: Any, prev_s: Any, ref_s: Any, best_before_s: Any, best_after_s: Any,
                 new: Any) -> Any:
        return ref_s / latency_s

    def task_scale(self, s0_s: float, optimum_s: float) -> float:
        """The speed-up of the optimum over ``s0``: a normalised reward is 1 at the optimum."""
        return s0_s / optimum_s


class LogSpeedupPrev(RewardSpace):
    """``log(prev / cost)``: the log speed-up over the previous state (0 on the episode's first measurement)."""

    name = "log_speedup_prev"
    uses_reference = False

    def __call__(self, latency_s: Any, prev_s: Any, ref_s: Any, best_before_s: Any, best_after_s: Any,
                 new: Any) -> Any:
        return np.log(prev_s / latency_s)


class LogSpeedupS0(RewardSpace):
    """``log(ref / cost)``: the log speed-up over ``s0``."""

    name = "log_speedup_s0"
    uses_prev = False
    needs_reference = True

    def __call__(self, latency_s: Any, prev_s: Any, ref_s: Any, best_before_s: Any, best_after_s: Any,
                 new: Any) -> Any:
        return np.log(ref_s / latency_s)


class BestImprovement(RewardSpace):
    """``log(best_before / best_after) - cost_per_measurement * new``: what a tuner under a measurement
    budget is scored on (the best config it has seen), with an optional price on each new measurement. The
    first best of a session (none before it) earns 0."""

    name = "best_improvement"
    uses_prev = False
    uses_reference = False
    uses_best = True

    def __init__(self, cost_per_measurement: float = 0.0) -> None:
        if isinstance(cost_per_measurement, bool) or not isinstance(cost_per_measurement, (int, float)) or not (
            math.isfinite(cost_per_measurement) and cost_per_measurement >= 0
        ):
            raise ValueError(f"cost_per_measurement must be a non-negative number, got {cost_per_measurement!r}")
        self.cost_per_measurement = float(cost_per_measurement)

    def __repr__(self) -> str:
        return f"BestImprovement(cost_per_measurement={self.cost_per_measurement!r})"

    def __call__(self, latency_s: Any, prev_s: Any, ref_s: Any, best_before_s: Any, best_after_s: Any,
                 new: Any) -> Any:
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(np.isinf(best_before_s) | np.isinf(best_after_s), 0.0, np.log(best_before_s / best_after_s))
        return gain - self.cost_per_measurement * np.asarray(new, dtype=np.float64)


#: Reward spaces by name (the first three are v0's).
REWARDS: dict[str, type[RewardSpace]] = {
    cls.name: cls for cls in (Inverse, LogSpeedupPrev, LogSpeedupS0, BestImprovement)
}


def get_reward(reward: str | RewardSpace) -> RewardSpace:
    """A reward object from its name (``"best_improvement:0.01"`` gives a cost per measurement) or itself."""
    if isinstance(reward, RewardSpace):
        return reward
    if isinstance(reward, str):
        name, _, arg = reward.partition(":")
        cls = REWARDS.get(name)
        if cls is BestImprovement and arg:
            try:
                return BestImprovement(float(arg))
            except ValueError as exc:
                raise ValueError(f"reward {reward!r}: {exc}") from None
        if cls is not None and not arg:
            return cls()
    raise ValueError(f"reward must be one of {tuple(REWARDS)} (or a RewardSpace), got {reward!r}")
