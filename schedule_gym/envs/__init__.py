"""Gymnasium environments (registered under the ``schedule_gym/`` namespace on import)."""

from schedule_gym.envs.tiling_env import OBSERVATIONS, REWARDS, STARTS, TilingEnv
from schedule_gym.envs.schedule_env import ScheduleEnv
from schedule_gym.envs.multitask_env import MultiTaskEnv, TaskLayout
from schedule_gym.envs.model_env import ModelEnv
from schedule_gym.envs.vector_env import TilingVectorEnv
from schedule_gym.envs.factories import (
    gemm_env, model_env, multitask_env, operator_env, operator_vector_env, table_env, table_vector_env,
)

__all__ = ["OBSERVATIONS", "REWARDS", "STARTS", "ModelEnv", "MultiTaskEnv", "ScheduleEnv", "TaskLayout", "TilingEnv",
           "TilingVectorEnv", "gemm_env", "model_env", "multitask_env", "operator_env", "operator_vector_env",
           "table_env", "table_vector_env"]
