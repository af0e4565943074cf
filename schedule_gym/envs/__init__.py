"""Gymnasium environments (registered under the ``schedule_gym/`` namespace on import).

* :mod:`~schedule_gym.envs.options`: :class:`EnvOptions`, the one options object, and the one validator of
  actions and reset options;
* :mod:`~schedule_gym.envs.rewards` and :mod:`~schedule_gym.envs.observations`: reward and observation spaces;
* :mod:`~schedule_gym.envs.core`: the episode core over arrays (:class:`~schedule_gym.envs.core.VectorEpisodes`)
  and :mod:`~schedule_gym.envs.episode` its scalar side (:class:`~schedule_gym.envs.episode.SingleEpisode`);
* the shells: :class:`TilingEnv`, :class:`ScheduleEnv`, :class:`MultiTaskEnv`, :class:`ModelEnv`,
  :class:`TilingVectorEnv`, :class:`MultiTaskVectorEnv`; :mod:`~schedule_gym.envs.sb3_vec` adapts the vector
  environments to Stable-Baselines3.
"""

from schedule_gym.envs.observations import TaskLayout
from schedule_gym.envs.options import EnvOptions
from schedule_gym.envs.rewards import REWARDS, RewardSpace
from schedule_gym.envs.tiling_env import TilingEnv
from schedule_gym.envs.schedule_env import ScheduleEnv
from schedule_gym.envs.multitask_env import MultiTaskEnv
from schedule_gym.envs.model_env import ModelEnv
from schedule_gym.envs.vector_env import MultiTaskVectorEnv, TilingVectorEnv
from schedule_gym.envs.options import OBSERVATIONS, STARTS
from schedule_gym.envs.factories import (
    gemm_env, model_env, multitask_env, multitask_vector_env, operator_env, operator_vector_env, table_env,
    table_vector_env,
)

__all__ = ["OBSERVATIONS", "REWARDS", "STARTS", "EnvOptions", "ModelEnv", "MultiTaskEnv", "MultiTaskVectorEnv",
           "RewardSpace", "ScheduleEnv", "TaskLayout", "TilingEnv", "TilingVectorEnv", "gemm_env", "model_env",
           "multitask_env", "multitask_vector_env", "operator_env", "operator_vector_env", "table_env",
           "table_vector_env"]
