"""Declarative registration of the environments (run when :mod:`schedule_gym` is imported).

Keyword arguments are plain strings, numbers and dicts of them, so vector and subprocess environments
can rebuild an environment in each worker. Environments on noisy backends are registered
``nondeterministic=True``.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

#: Step limit of every registered environment (the ``TimeLimit`` wrapper truncates episodes there).
MAX_EPISODE_STEPS = 100

ENV_IDS = (
    # GEMM C[m,n] = A[m,k] B[k,n] on the deterministic mock CPU model; shape and splits are kwargs.
    "schedule_gym/Gemm-v0",
    # The same with 5% multiplicative log-normal measurement noise (seeded).
    "schedule_gym/GemmNoisy-v0",
    # Any task by name (``task="bert-base-qkv"``, ``task="resnet50/conv3"``; schedule-gym tasks) or Task object.
    "schedule_gym/Tiling-v0",
    # conv2d (NHWC/NCHW, stride, padding, dilation, groups), batch matmul, dense with its epilogue; kwargs
    # are the operator's arguments (schedule_gym.tasks.conv2d ...) and the environment's.
    "schedule_gym/Conv2d-v0",
    "schedule_gym/BatchMatmul-v0",
    "schedule_gym/Dense-v0",
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
        "schedule_gym/Gemm-v0": dict(
            entry_point="schedule_gym.envs:gemm_env", kwargs={"m": 1024, "k": 1024, "n": 1024},
            vector_entry_point="schedule_gym.envs.vector_env:gemm_vector_env",
        ),
        "schedule_gym/GemmNoisy-v0": dict(
            entry_point="schedule_gym.envs:gemm_env",
            kwargs={"m": 1024, "k": 1024, "n": 1024, "backend": "mock", "backend_options": {"noise": 0.05}},
            nondeterministic=True,
        ),
        "schedule_gym/Tiling-v0": dict(entry_point="schedule_gym.envs:TilingEnv", kwargs={"task": "gemm-1024"},
                                     vector_entry_point="schedule_gym.envs.vector_env:TilingVectorEnv"),
        # ResNet-50's second conv2d layer, BERT-base's attention scores, BERT-base's FFN up-projection
        "schedule_gym/Conv2d-v0": dict(
            entry_point="schedule_gym.envs:conv2d_env",
            vector_entry_point="schedule_gym.envs.vector_env:conv2d_vector_env",
            kwargs={"n": 1, "h": 56, "w": 56, "ci": 64, "co": 64, "kernel": 3, "padding": 1},
        ),
        "schedule_gym/BatchMatmul-v0": dict(
            entry_point="schedule_gym.envs:batch_matmul_env",
            vector_entry_point="schedule_gym.envs.vector_env:batch_matmul_vector_env",
            kwargs={"b": 12, "m": 128, "k": 64, "n": 128, "transpose_b": True},
        ),
        "schedule_gym/Dense-v0": dict(
            entry_point="schedule_gym.envs:dense_env",
            vector_entry_point="schedule_gym.envs.vector_env:dense_vector_env",
            kwargs={"m": 128, "k": 768, "n": 3072, "bias": True, "activation": "gelu"},
        ),
        "schedule_gym/GemmTVM-v0": dict(
            entry_point="schedule_gym.envs:gemm_env",
            kwargs={"m": 1024, "k": 1024, "n": 1024, "backend": "tvm"},
            nondeterministic=True,
        ),
        "schedule_gym/GemmTable-v0": dict(
            entry_point="schedule_gym.envs:table_env", kwargs={"table": "gemm-128-323-znver5-1t"},
            vector_entry_point="schedule_gym.envs.vector_env:table_vector_env",
        ),
        "schedule_gym/Conv2dTable-v0": dict(
            entry_point="schedule_gym.envs:table_env", kwargs={"table": "conv2d-14-k3-znver3-1t"},
            vector_entry_point="schedule_gym.envs.vector_env:table_vector_env",
        ),
        "schedule_gym/Schedule-v0": dict(entry_point="schedule_gym.envs:ScheduleEnv", kwargs={"task": "gemm-1024"}),
        "schedule_gym/MultiTask-v0": dict(entry_point="schedule_gym.envs:MultiTaskEnv",
                                          vector_entry_point="schedule_gym.envs.vector_env:MultiTaskVectorEnv",
                                          kwargs={"tasks": "resnet50,bert-base"}),
        # its episode ends after steps_per_task steps on the last task: no step limit of its own
        "schedule_gym/Model-v0": dict(entry_point="schedule_gym.envs:ModelEnv", kwargs={"model": "resnet18"},
                                      max_episode_steps=None),
    }
    for env_id in ENV_IDS:
        if env_id not in registry:
            register(id=env_id, **{"max_episode_steps": MAX_EPISODE_STEPS, **specs[env_id]})
