"""Environment factories: the entry points of the registered ids, and the named ones users call.

* :func:`operator_env`, :func:`operator_vector_env`: a :class:`~schedule_gym.envs.TilingEnv` (or
  :class:`~schedule_gym.envs.TilingVectorEnv`) on a task of any registered operator, built from keyword
  arguments: its builder's (``schedule_gym.operators.get_operator(operator).build``), the environment's the
  rest. Every operator's id (``schedule_gym/Conv2d-v0``...) is registered with them (:mod:`schedule_gym.registration`).
* :func:`gemm_env`: a GEMM by its shape, positionally (``gemm_env(1024, 1024, 1024)``).
* :func:`table_env`, :func:`table_vector_env`: a shipped exhaustive real-hardware table, replayed.
* :func:`multitask_env` (:func:`multitask_vector_env`), :func:`model_env`: ``MultiTask-v0`` and ``Model-v0``, whose ``operators`` keeps the
  layers of those operators only (the ids pass the operators of their version, so their task lists stay).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from schedule_gym.envs.model_env import ModelEnv, model_tasks
from schedule_gym.envs.multitask_env import MultiTaskEnv
from schedule_gym.envs.tiling_env import TilingEnv
from schedule_gym.envs.vector_env import MultiTaskVectorEnv, TilingVectorEnv
from schedule_gym.operators import get_operator
from schedule_gym.tasks import Task, expand_suites, gemm, parse_operators

__all__ = ["gemm_env", "model_env", "multitask_env", "multitask_vector_env", "operator_env", "operator_vector_env", "table_env",
           "table_vector_env"]


def _split_kwargs(builder: Callable[..., Task], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate an operator builder's keyword arguments from the environment's."""
    names = set(inspect.signature(builder).parameters) - {"name"}
    return {k: v for k, v in kwargs.items() if k in names}, {k: v for k, v in kwargs.items() if k not in names}


def _operator_task(operator: str, kwargs: dict[str, Any]) -> tuple[Task, dict[str, Any]]:
    build = get_operator(operator).build
    task_kwargs, env_kwargs = _split_kwargs(build, kwargs)
    return build(**task_kwargs), env_kwargs


def operator_env(operator: str, **kwargs: Any) -> TilingEnv:
    """A :class:`TilingEnv` on a task of ``operator`` (``"conv2d"``...): the builder's arguments (for conv2d
    ``n, h, w, ci, co, kernel, stride, padding, dilation, groups, layout, splits, dtype, bias, activation``) and
    the environment's, as keyword arguments.

    >>> operator_env("conv2d", n=1, h=14, w=14, ci=16, co=32, kernel=3, reward="log_speedup_prev").task.name
    'conv2d-1x14x14x16-32-k3-s1-p0'
    """
    task, env_kwargs = _operator_task(operator, kwargs)
    return TilingEnv(task=task, **env_kwargs)


def operator_vector_env(operator: str, num_envs: int = 1, **kwargs: Any) -> TilingVectorEnv:
    """:class:`TilingVectorEnv` on a task of ``operator`` (the vector entry point of its id; arguments as
    :func:`operator_env`)."""
    task, env_kwargs = _operator_task(operator, kwargs)
    return TilingVectorEnv(num_envs, task=task, **env_kwargs)


def gemm_env(
    m: int = 1024,
    k: int = 1024,
    n: int = 1024,
    d_m: int = 4,
    d_k: int = 2,
    d_n: int = 4,
    dtype: str = "float32",
    **kwargs: Any,
) -> TilingEnv:
    """A :class:`TilingEnv` on GEMM ``(m, k, n)`` split ``d_m/d_k/d_n`` (the shape positionally; the
    ``Gemm-v0`` id is :func:`operator_env` of ``"gemm"``)."""
    return TilingEnv(task=gemm(m, k, n, d_m=d_m, d_k=d_k, d_n=d_n, dtype=dtype), **kwargs)


def _table_kwargs(table: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    from schedule_gym.data import get_table

    entry = get_table(table)
    if "backend" in kwargs or "backend_options" in kwargs:
        raise ValueError("a table environment replays its table: do not pass backend or backend_options")
    return {"task": entry.task, "backend": "replay", "backend_options": {"records": str(entry.path)}}


def table_env(table: str = "gemm-128-323-znver5-1t", **kwargs: Any) -> TilingEnv:
    """A :class:`TilingEnv` replaying a shipped exhaustive real-hardware table (``GemmTable-v0``, ``Conv2dTable-v0``).

    Every config of the table's task was measured, so rewards are real and the optimum is known:
    ``env.unwrapped.backend.stores[0]`` holds all records.
    """
    return TilingEnv(**_table_kwargs(table, kwargs), **kwargs)


def table_vector_env(num_envs: int = 1, table: str = "gemm-128-323-znver5-1t", **kwargs: Any) -> TilingVectorEnv:
    """A shipped table replayed (``GemmTable-v0``, ``Conv2dTable-v0``; arguments as :func:`table_env`)."""
    return TilingVectorEnv(num_envs, **_table_kwargs(table, kwargs), **kwargs)


def multitask_env(
    tasks: str | Sequence[Task | str] = "resnet50,bert-base", operators: str | None = None, **kwargs: Any
) -> MultiTaskEnv:
    """A :class:`MultiTaskEnv` (``MultiTask-v0``) on ``tasks``, each suite in it reduced to its layers of
    ``operators`` (comma-separated operator names; None: every layer)."""
    return MultiTaskEnv(tasks=tasks if operators is None else expand_suites(tasks, operators), **kwargs)


def multitask_vector_env(
    num_envs: int = 1, tasks: str | Sequence[Task | str] = "resnet50,bert-base", operators: str | None = None,
    **kwargs: Any,
) -> MultiTaskVectorEnv:
    """:class:`MultiTaskVectorEnv` (``MultiTask-v0``'s vector entry point; arguments as :func:`multitask_env`)."""
    return MultiTaskVectorEnv(num_envs, tasks=tasks if operators is None else expand_suites(tasks, operators), **kwargs)


def model_env(model: str | Sequence[tuple[Task, int]] = "resnet18", operators: str | None = None,
              **kwargs: Any) -> ModelEnv:
    """A :class:`ModelEnv` (``Model-v0``) on ``model``'s tasks of ``operators`` (comma-separated operator names;
    None: every task)."""
    kept = parse_operators(operators)
    chosen = model if kept is None else [(t, w) for t, w in model_tasks(model) if t.op in kept]
    return ModelEnv(model=chosen, **kwargs)
