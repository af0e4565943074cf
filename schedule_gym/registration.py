"""Declarative registration of the environments (run when :mod:`schedule_gym` is imported).

Keyword arguments are plain strings, numbers and dicts of them, so vector and subprocess environments
can rebuild an environment in each worker. Environments on noisy backends are registered
``nondeterministic=True``. Every operator's own id (``schedule_gym/Conv2d-v0``...) comes from its module in
:mod:`schedule_gym.operators` (its ``env_id`` and default builder arguments ``env_kwargs``).
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from schedule_gym.operators import OPERATORS
from schedule_gym.tasks import V0_OPERATORS

#: Step limit of every registered environment (the ``TimeLimit`` wrapper truncates episodes there).
MAX_EPISODE_STEPS = 100

_FACTORIES = "schedule_gym.envs.factories"

ENV_IDS = (
    # One per operator, on the deterministic mock CPU model: GEMM C[m,n] = A[m,k] B[k,n], conv2d (NHWC/NCHW,
    # stride, padding, dilation, groups), dense with its epilogue, batch matmul...; kwargs are the operator's
    # arguments (schedule_gym.tasks.conv2d ...) and the environment's.
    *(op.env_id for op in OPERATORS.values() if op.env_id is not None),
    # GEMM with 5% multiplicative log-normal measurement noise (seeded).
    "schedule_gym/GemmNoisy-v0",
    # Any task by name (``task="bert-base-qkv"``, ``task="resnet50/conv3"``; schedule-gym tasks) or Task object.
    "schedule_gym/Tiling-v0",
    # Real kernels: GEMM measured with TVM on this machine's CPU (noisy, so nondeterministic).
    "schedule_gym/GemmTVM-v0",
    # Real-hardware rewards at mock speed: a shipped exhaustive table (every config measured), replayed.
    "schedule_gym/GemmTable-v0",
    # The same for a ResNet-style 3x3 conv2d (14x14, 16 -> 32 channels; every one of its 2,430 configs measured).
    "schedule_gym/Conv2dTable-v0",
    # Tile sizes and loop order together (any task by name): tile moves plus neighbour swaps of loops.
    "schedule_gym/Schedule-v0",
    # A task drawn per episode from suites or task names (comma-separated): one policy across operators and shapes.
    "schedule_gym/MultiTask-v0",
    # A whole model (a suite or a zoo model): an episode visits each task; reward: the model's latency estimate.
    "schedule_gym/Model-v0",
)


def register_envs() -> None:
    specs = {
        op.env_id: dict(
            entry_point=f"{_FACTORIES}:operator_env", vector_entry_point=f"{_FACTORIES}:operator_vector_env",
            kwargs={"operator": op.name, **op.env_kwargs},
        )
        for op in OPERATORS.values() if op.env_id is not None
    }
    specs.update({
        "schedule_gym/GemmNoisy-v0": dict(
            entry_point=f"{_FACTORIES}:gemm_env",
            kwargs={"m": 1024, "k": 1024, "n": 1024, "backend": "mock", "backend_options": {"noise": 0.05}},
            nondeterministic=True,
        ),
        "schedule_gym/Tiling-v0": dict(entry_point="schedule_gym.envs:TilingEnv", kwargs={"task": "gemm-1024"},
                                     vector_entry_point="schedule_gym.envs.vector_env:TilingVectorEnv"),
        "schedule_gym/GemmTVM-v0": dict(
            entry_point=f"{_FACTORIES}:gemm_env",
            kwargs={"m": 1024, "k": 1024, "n": 1024, "backend": "tvm"},
            nondeterministic=True,
        ),
        "schedule_gym/GemmTable-v0": dict(
            entry_point=f"{_FACTORIES}:table_env", kwargs={"table": "gemm-128-323-znver5-1t"},
            vector_entry_point=f"{_FACTORIES}:table_vector_env",
        ),
        "schedule_gym/Conv2dTable-v0": dict(
            entry_point=f"{_FACTORIES}:table_env", kwargs={"table": "conv2d-14-k3-znver3-1t"},
            vector_entry_point=f"{_FACTORIES}:table_vector_env",
        ),
        "schedule_gym/Schedule-v0": dict(entry_point="schedule_gym.envs:ScheduleEnv", kwargs={"task": "gemm-1024"},
                                         vector_entry_point="schedule_gym.envs.schedule_vector:ScheduleVectorEnv"),
        # v0 keeps its suites to the layers of V0_OPERATORS, so its task lists stay v0's
        "schedule_gym/MultiTask-v0": dict(entry_point=f"{_FACTORIES}:multitask_env",
                                          vector_entry_point=f"{_FACTORIES}:multitask_vector_env",
                                          kwargs={"tasks": "resnet50,bert-base", "operators": V0_OPERATORS}),
        # its episode ends after steps_per_task steps on the last task: no step limit of its own
        "schedule_gym/Model-v0": dict(entry_point=f"{_FACTORIES}:model_env",
                                      kwargs={"model": "resnet18", "operators": V0_OPERATORS}, max_episode_steps=None),
    })
    for env_id in ENV_IDS:
        if env_id not in registry:
            register(id=env_id, **{"max_episode_steps": MAX_EPISODE_STEPS, **specs[env_id]})
