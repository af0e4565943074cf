"""Action masking for RLlib's new API stack: a Dict observation that carries the mask, and a PPO RLModule
that reads it.

RLlib masks actions only inside an RLModule, and an RLModule sees observations, not the environment; so the
mask travels in the observation, as in RLlib's own example (``ray/rllib/examples/envs/classes/action_mask_env.py``
and ``.../rl_modules/classes/action_masking_rlm.py``):

* :class:`ActionMaskObservation` (one environment) and :class:`ActionMaskVectorObservation` (a vector
  environment, such as the native ``TilingVectorEnv``) present the observation as
  ``Dict({"action_mask": Box(0, 1, (n_actions,), float32), "observations": <the original observation>})``,
  the mask being the environment's ``action_masks()`` in the state the observation describes;
* :class:`MaskedPPOTorchRLModule` is RLlib's ``ActionMaskingTorchRLModule``: PPO's networks on the
  ``"observations"`` part, with ``log(mask)`` (clamped at the lowest float32, about -3.4e38) added to the
  action logits, so an illegal action has probability exactly 0 and is never sampled;
* :func:`rllib_env_creator` is the creator to register with ``ray.tune.registry.register_env``: one
  environment, or a native vector environment when RLlib asks for ``num_envs`` (its
  ``gym_env_vectorize_mode="vector_entry_point"``);
* :class:`SamplingMetrics` (an RLlib callback) sums, per training iteration, the actions sampled and those
  that were illegal (``info["legal"]``), and the returns of the episodes that ended.

Needs the ``rllib`` extra (``pip install 'schedule-gym[rllib]'``).

>>> import gymnasium, schedule_gym
>>> env = ActionMaskObservation(gymnasium.make("schedule_gym/Gemm-v0", m=256, k=256, n=256))
>>> obs, info = env.reset(seed=0)
>>> sorted(obs), obs["action_mask"].shape, bool((obs["action_mask"] == info["action_mask"]).all())
(['action_mask', 'observations'], (26,), True)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "ActionMaskObservation",
    "ActionMaskVectorObservation",
    "MaskedPPOTorchRLModule",
    "SamplingMetrics",
    "masked_space",
    "rllib_env_creator",
]

#: The keys of the Dict observation, as RLlib's ActionMaskingTorchRLModule reads them.
MASK_KEY, OBS_KEY = "action_mask", "observations"


def masked_space(observation_space: gym.Space, action_space: gym.Space) -> gym.spaces.Dict:
    """The Dict observation space of an environment whose observations carry its action mask."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(f"action masking needs a Discrete action space, got {action_space}")
    return gym.spaces.Dict({
        MASK_KEY: gym.spaces.Box(0.0, 1.0, (int(action_space.n),), np.float32),
        OBS_KEY: observation_space,
    })


class ActionMaskObservation(gym.ObservationWrapper):
    """An environment's observation with its ``action_masks()`` (float32 0/1) as ``{"action_mask", "observations"}``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not callable(getattr(env.unwrapped, "action_masks", None)):
            raise TypeError(f"{env.unwrapped} has no action_masks() method to mask with")
        self.observation_space = masked_space(env.observation_space, env.action_space)

    def observation(self, observation: Any) -> dict[str, Any]:
        mask = np.asarray(self.env.unwrapped.action_masks(), dtype=np.float32)
        return {MASK_KEY: mask, OBS_KEY: observation}


class ActionMaskVectorObservation(VectorWrapper):
    """A vector environment's observations with its ``action_masks()`` (``(N, n_actions)`` float32 0/1) as
    ``{"action_mask", "observations"}``.

    Autoreset ``NEXT_STEP`` only (RLlib's and Gymnasium's default): there the observation a step returns is
    the state ``action_masks()`` describes, also when a sub-environment's episode has just ended. A
    ``SAME_STEP`` environment is refused, since its ``info["final_obs"]`` would lack masks."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        if not callable(getattr(env.unwrapped, "action_masks", None)):
            raise TypeError(f"{env.unwrapped} has no action_masks() method to mask with")
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"ActionMaskVectorObservation needs autoreset_mode NEXT_STEP, got {mode}")
        self.single_observation_space = masked_space(env.single_observation_space, env.single_action_space)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def _masked(self, observations: Any) -> dict[str, Any]:
        masks = np.asarray(self.env.unwrapped.action_masks(), dtype=np.float32)
        return {MASK_KEY: masks, OBS_KEY: observations}

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._masked(observations), infos

    def step(self, actions: Any) -> tuple[dict[str, Any], Any, Any, Any, dict[str, Any]]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._masked(observations), rewards, terminations, truncations, infos


class MaskedPPOTorchRLModule(ActionMaskingTorchRLModule):
    """PPO's Torch RLModule with action masking: RLlib's ``ActionMaskingTorchRLModule`` (an example class shipped
    in the ``ray`` wheel) under a name of this package, which configs and checkpoints refer to; if RLlib moves
    its example, only this module's import changes. Its observation space must be :func:`masked_space`'s Dict;
    the networks see ``"observations"`` only, and ``log(mask)`` (at least about -3.4e38) is added to the logits."""


def rllib_env_creator(config: dict[str, Any]) -> gym.Env | VectorEnv:
    """RLlib's environment creator: ``config["id"]`` (a Gymnasium id), ``config["mask"]`` (default True: wrap in
    :class:`ActionMaskObservation` / :class:`ActionMaskVectorObservation`), other keys as ``make`` kwargs.

    RLlib calls it with ``num_envs`` in ``config`` when ``gym_env_vectorize_mode="vector_entry_point"``: it then
    returns ``gymnasium.make_vec(id, num_envs, vectorization_mode="vector_entry_point")`` (the registered
    vector environment, such as ``TilingVectorEnv``); without ``num_envs``, ``gymnasium.make(id)``, which RLlib
    vectorises itself (``"sync"``, ``"async"``)."""
    import schedule_gym  # noqa: F401  (registers the schedule_gym/ ids in this worker)

    kwargs = dict(config)
    env_id = kwargs.pop("id")
    mask = bool(kwargs.pop("mask", True))
    num_envs = kwargs.pop("num_envs", None)
    if num_envs is None:
        env = gym.make(env_id, **kwargs)
        return ActionMaskObservation(env) if mask else env
    envs = gym.make_vec(env_id, num_envs=int(num_envs), vectorization_mode="vector_entry_point", **kwargs)
    return ActionMaskVectorObservation(envs) if mask else envs


class SamplingMetrics(RLlibCallback):
    """Per-iteration sums under ``env_runners`` of a training result (``reduce="sum"``): ``num_actions`` and
    ``num_illegal_actions`` (``info["legal"]`` False) of the steps sampled, ``num_episodes_ended`` and
    ``episode_return_sum`` of the episodes that ended (their whole return, earlier chunks included); so the
    illegal-action fraction and the mean return of one iteration are ratios of two sums."""

    def on_sample_end(self, *, metrics_logger: Any = None, samples: Any = None, **kwargs: Any) -> None:
        actions = illegal = 0
        for episode in samples:
            infos = episode.get_infos()[1:]  # infos[0] belongs to the observation the chunk starts from
            actions += len(infos)
            illegal += sum(1 for info in infos if not info.get("legal", True))
        metrics_logger.log_value("num_actions", actions, reduce="sum")
        metrics_logger.log_value("num_illegal_actions", illegal, reduce="sum")

    def on_episode_end(self, *, episode: Any, prev_episode_chunks: Any = None, metrics_logger: Any = None,
                       **kwargs: Any) -> None:
        episode_return = episode.get_return() + sum(chunk.get_return() for chunk in prev_episode_chunks or ())
        metrics_logger.log_value("num_episodes_ended", 1, reduce="sum")
        metrics_logger.log_value("episode_return_sum", float(episode_return), reduce="sum")
