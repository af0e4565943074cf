"""schedule-gym: tensor-program tile tuning as a Gymnasium environment.

Importing the package registers the environments (``schedule_gym/Gemm-v0`` ...). TVM is never imported
here: the environment, the tile space and the mock backend import without compiling anything.
"""

from schedule_gym.backends import LatencyBackend, MeasureResult, MockBackend, make_backend
from schedule_gym.envs import TilingEnv, gemm_env
from schedule_gym.registration import ENV_IDS, register_envs
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Action, Config, TileSpace
from schedule_gym.tasks import Task, batch_matmul, conv2d, dense, gemm, get_suite, get_task

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ENV_IDS",
    "Action",
    "Config",
    "LatencyBackend",
    "MeasureResult",
    "MeasureSession",
    "MockBackend",
    "Task",
    "TileSpace",
    "TilingEnv",
    "batch_matmul",
    "conv2d",
    "dense",
    "gemm",
    "gemm_env",
    "get_suite",
    "get_task",
    "make_backend",
]
