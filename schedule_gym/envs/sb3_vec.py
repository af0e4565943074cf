"""Stable-Baselines3's ``VecEnv`` over :class:`~schedule_gym.envs.TilingVectorEnv`, so ``PPO`` and sb3-contrib's
``MaskablePPO`` train from the native vector environment directly (SB3 does not take a Gymnasium ``VectorEnv``).

SB3 resets a finished environment in the step that finishes it and hands the final observation over as
``info["terminal_observation"]``: that is Gymnasium's ``AutoresetMode.SAME_STEP``, so the adapter runs its
vector environment in that mode. ``MaskablePPO`` reads masks through ``env_method("action_masks")``
(sb3-contrib's ``get_action_masks``), answered with one array for all environments.

>>> from stable_baselines3 import PPO
>>> envs = SB3VecEnv.make("schedule_gym/Gemm-v0", num_envs=4, m=64, k=64, n=64)
>>> model = PPO("MlpPolicy", envs, n_steps=8, batch_size=32, n_epochs=1, seed=0).learn(32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from schedule_gym.extras import require

require("schedule_gym.envs.sb3_vec (Stable-Baselines3's VecEnv)", "rl", modules=["stable_baselines3"])

from stable_baselines3.common.vec_env import VecEnv  # noqa: E402 - after the check that names the extra
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn  # noqa: E402

from schedule_gym.envs.vector_env import EpisodesVectorEnv  # noqa: E402

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """An SB3 ``VecEnv`` driving one native vector environment (``TilingVectorEnv``, ``MultiTaskVectorEnv``)
    made with ``autoreset_mode=SAME_STEP``."""

    def __init__(self, venv: EpisodesVectorEnv) -> None:
        if not isinstance(venv, EpisodesVectorEnv):
            raise TypeError(f"SB3VecEnv wraps a native vector environment (TilingVectorEnv, MultiTaskVectorEnv), got {venv!r}")
        if venv.autoreset_mode is not AutoresetMode.SAME_STEP:
            raise ValueError(
                "SB3 expects a finished environment to be reset in the same step: make the vector environment with "
                f"autoreset_mode=AutoresetMode.SAME_STEP (or use SB3VecEnv.make), got {venv.autoreset_mode}"
            )
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None

    @classmethod
    def make(cls, env_id: str, num_envs: int, **kwargs: Any) -> SB3VecEnv:
        """``gymnasium.make_vec(env_id, num_envs, autoreset_mode=SAME_STEP, **kwargs)`` wrapped for SB3."""
        if gym.spec(env_id).vector_entry_point is None:
            raise ValueError(f"{env_id} has no native vector environment; use SB3's DummyVecEnv (make_vec_env) for it")
        venv = gym.make_vec(env_id, num_envs=num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
        return cls(venv)

    def reset(self) -> np.ndarray:
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        options = self._options[0] if self._options and all(o == self._options[0] for o in self._options) else None
        if options is None and any(self._options):
            raise ValueError(f"the vector environment takes one reset options dict for all environments, got {self._options}")
        obs, _ = self.venv.reset(seed=seeds, options=dict(options) if options else None)
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs).astype(np.int64, copy=False)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("call step_async() before step_wait()")
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones).tolist():
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, infos

    def action_masks(self) -> np.ndarray:
        return self.venv.action_masks()

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"the sub-environments of a vector environment share their attributes; cannot set {attr_name!r}")

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        if method_name != "action_masks":
            raise AttributeError(f"SB3VecEnv answers env_method('action_masks') only, got {method_name!r}")
        masks = self.venv.action_masks()
        return [masks[i] for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
