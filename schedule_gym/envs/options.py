"""The one options object every environment is configured by, and the one validator of actions and options.

:class:`EnvOptions` holds what an episode is (reward, observation, start, penalties, budget, reference);
``TilingEnv``, ``ScheduleEnv``, the vector environments, ``MultiTaskEnv`` and ``ModelEnv`` take the same
keyword arguments and build one with :meth:`EnvOptions.of` (every value checked, the bad one named).
:func:`check_action` and :func:`check_reset_options` are what every environment's ``step`` and ``reset``
call, so each id accepts exactly what it documents and refuses the rest with the argument named.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from schedule_gym.envs.rewards import RewardSpace, get_reward

__all__ = ["EPISODES", "FEATURE_OBSERVATIONS", "OBSERVATIONS", "REWARD_SCALES", "STARTS", "EnvOptions", "check_action", "check_reset_options"]

#: Observation spaces by name (see :mod:`schedule_gym.envs.observations`).
OBSERVATIONS = ("fraction", "log2", "features", "move_features")
#: The observations built by :class:`~schedule_gym.envs.features.FeatureTables` (``"move_features"`` adds, per
#: action, the nest features of the config the move leads to).
FEATURE_OBSERVATIONS = ("features", "move_features")
#: Where an episode starts: the untiled config ``s0``, or a config drawn uniformly.
STARTS = ("s0", "random")
#: ``"none"``, or ``"task"``: rewards divided by the task's scale (:mod:`schedule_gym.envs.rewards`).
REWARD_SCALES = ("none", "task")
#: What an episode is: ``"steps"``, a walk of moves within a measurement session that outlives the episode
#: (``reset(seed=...)`` starts a new session); ``"session"``, one measurement session per episode, truncated
#: when its budget is spent (the game a tuner plays under a measurement budget).
EPISODES = ("steps", "session")


def _finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class EnvOptions:
    """What an episode is, shared by every environment (each field documented in ``TilingEnv``'s docstring).

    Build one with :meth:`of`, which checks every value and names the bad one; ``reward`` is a
    :class:`~schedule_gym.envs.rewards.RewardSpace` (a name is resolved by :func:`~schedule_gym.envs.rewards.get_reward`).
    """

    reward: RewardSpace
    observation: str = "fraction"
    include_shape: bool = False
    start: str = "s0"
    episode: str = "steps"
    illegal_action_penalty: float = -1.0
    failure_penalty: float = -1.0
    budget_measurements: int | None = None
    budget_fraction: float | None = None
    budget_seconds: float | None = None
    reward_ref_latency_s: float | None = None
    reward_scale: str = "none"

    @classmethod
    def of(cls, reward: str | RewardSpace = "inverse", **values: Any) -> EnvOptions:
        """Checked options from keyword arguments (the environments' own), each bad value named."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown environment argument {unknown[0]!r}; known: {', '.join(sorted(known))}")
        out = cls(reward=get_reward(reward), **values)
        out._check()
        return out

    def with_values(self, **values: Any) -> EnvOptions:
        """A copy with some values replaced (checked)."""
        out = replace(self, **values)
        out._check()
        return out

    def _check(self) -> None:
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {self.observation!r}")
        if not isinstance(self.include_shape, bool):
            raise TypeError(f"include_shape must be a bool, got {self.include_shape!r}")
        if self.start not in STARTS:
            raise ValueError(f"start must be one of {STARTS}, got {self.start!r}")
        if self.reward_scale not in REWARD_SCALES:
            raise ValueError(f"reward_scale must be one of {REWARD_SCALES}, got {self.reward_scale!r}")
        if self.episode not in EPISODES:
            raise ValueError(f"episode must be one of {EPISODES}, got {self.episode!r}")
        object.__setattr__(self, "illegal_action_penalty", _finite(self.illegal_action_penalty, "illegal_action_penalty"))
        object.__setattr__(self, "failure_penalty", _finite(self.failure_penalty, "failure_penalty"))
        ref = self.reward_ref_latency_s
        if ref is not None and (isinstance(ref, bool) or not isinstance(ref, numbers.Real)
                                or not (math.isfinite(ref) and ref > 0)):
            raise ValueError(f"reward_ref_latency_s must be a positive number or None, got {ref!r}")
        if self.episode == "session" and self.budget_measurements is None and self.budget_fraction is None:
            raise ValueError("episode='session' needs a measurement budget (budget_measurements or budget_fraction): "
                             "the episode ends when it is spent")
        # the budget's values are checked where they are applied (MeasureSession.set_budget), with the same names

    @property
    def fixed_ref_latency_s(self) -> float:
        """``reward_ref_latency_s`` as a float, NaN when the reference is measured (``s0``'s latency)."""
        return math.nan if self.reward_ref_latency_s is None else float(self.reward_ref_latency_s)


def check_action(action: object, n_actions: int) -> int:
    """``action`` as an int in ``[0, n_actions)``; anything else (a float, a bool, a string, None, an array
    that is not a 0-d integer) is refused naming the argument and the value."""
    if type(action) is int:
        if 0 <= action < n_actions:
            return action
        raise ValueError(f"action {action!r} is out of range [0, {n_actions})")
    if isinstance(action, (bool, np.bool_)) or not isinstance(action, (numbers.Integral, np.ndarray)):
        raise TypeError(f"action must be an integer in [0, {n_actions}), got {action!r} ({type(action).__name__})")
    if isinstance(action, np.ndarray):
        if action.shape != () or not np.issubdtype(action.dtype, np.integer):
            raise TypeError(f"action must be an integer in [0, {n_actions}), got the array {action!r}")
        action = action.item()
    if not 0 <= action < n_actions:
        raise ValueError(f"action {action!r} is out of range [0, {n_actions})")
    return int(action)


def check_reset_options(options: object, known: Collection[str]) -> dict[str, Any]:
    """``options`` as a dict (None: empty), refusing a non-dict and unknown keys with the known ones named."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"reset options must be a dict or None, got {options!r} ({type(options).__name__})")
    unknown = sorted(set(options) - set(known), key=str)
    if unknown:
        raise ValueError(f"unknown reset options {unknown}; known: {sorted(known)}")
    return dict(options)
