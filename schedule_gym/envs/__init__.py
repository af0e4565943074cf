"""Gymnasium environments (registered under the ``schedule_gym/`` namespace on import)."""

from schedule_gym.envs.tiling_env import (
    OBSERVATIONS,
    REWARDS,
    STARTS,
    TilingEnv,
    batch_matmul_env,
    conv2d_env,
    dense_env,
    gemm_env,
    table_env,
)
from schedule_gym.envs.schedule_env import ScheduleEnv
from schedule_gym.envs.multitask_env import MultiTaskEnv, TaskLayout
from schedule_gym.envs.model_env import ModelEnv
from schedule_gym.envs.vector_env import TilingVectorEnv

__all__ = ["OBSERVATIONS", "REWARDS", "STARTS", "ModelEnv", "MultiTaskEnv", "ScheduleEnv", "TaskLayout", "TilingEnv", "TilingVectorEnv", "batch_matmul_env", "conv2d_env",
           "dense_env", "gemm_env",
           "table_env"]
