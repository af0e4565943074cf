"""Artefacts pretrained on a protocol's training split: Felix's cost models.

:func:`pretrain_felix` fits one :class:`~schedule_gym.agents.felix.FelixCostModel` per operator of the
training split (one feature spec spans only tasks with the same numbers of dimensions and operands), on
latencies of the protocol's mock profile, and :func:`check_training_tasks` refuses any task whose
computation (:attr:`~schedule_gym.tasks.Task.key`) is held out, so nothing held out is ever fitted.
``examples/pretrain_felix.py`` writes the models shipped in ``leaderboard/``; ``FelixAgent`` takes a list
of them (``cost_model=[...]``) and uses, per task, the first whose feature spec fits it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.tasks import Task

__all__ = ["check_training_tasks", "pretrain_felix"]


def check_training_tasks(protocol: str | Protocol, tasks: Iterable[Task]) -> tuple[Task, ...]:
    """``tasks`` as a tuple, after checking that none is one of ``protocol``'s held-out computations (by
    task key, whatever its name); a held-out one is a ``ValueError`` naming it."""
    protocol = get_protocol(protocol)
    tasks = tuple(tasks)
    for t in tasks:
        if not isinstance(t, Task):
            raise TypeError(f"expected Task objects, got {t!r}")
    held_out = {t.key: t.name for t in protocol.held_out_tasks()}
    leaked = [f"{t.name} (held-out task {held_out[t.key]})" for t in tasks if t.key in held_out]
    if leaked:
        raise ValueError(f"refusing to pretrain on held-out tasks of protocol {protocol.name}: {', '.join(leaked)}; "
                         "pretrain on its training split only")
    return tasks


def pretrain_felix(
    protocol: str | Protocol = "v0",
    ops: Sequence[str] | None = None,
    tasks: Iterable[Task] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Felix cost models pretrained on ``protocol``'s training tasks, one per operator, by operator name.

    Args:
        protocol: the protocol whose training split is fitted, on its mock profile (the benchmark's).
        ops: only these operators (default: every operator of the training tasks).
        tasks: tasks to fit instead of the whole training split; checked by :func:`check_training_tasks`.
        options: passed to :func:`~schedule_gym.agents.felix.pretrain_cost_model` (``n_samples``,
            ``epochs``, ``hidden_size``, ``n_hidden_layers``, ``seed``...), the same for every operator.

    >>> models = pretrain_felix("smoke", n_samples=16, epochs=1, hidden_size=4)
    >>> sorted(models)
    ['gemm']
    """
    from schedule_gym.agents.felix import pretrain_cost_model
    from schedule_gym.backends.mock.backend import MockBackend

    protocol = get_protocol(protocol)
    if "backend" in options or "records" in options:
        raise TypeError("pretrain_felix fits the protocol's mock profile only: no backend or records")
    chosen = check_training_tasks(protocol, protocol.train_tasks() if tasks is None else tasks)
    by_op: dict[str, list[Task]] = {}
    for t in chosen:
        by_op.setdefault(t.op, []).append(t)
    if ops is not None:
        missing = sorted(set(ops) - set(by_op))
        if missing:
            raise ValueError(f"no training task of protocol {protocol.name} has operator {', '.join(missing)}; "
                             f"its operators: {', '.join(sorted(by_op))}")
        by_op = {op: by_op[op] for op in ops}
    backend = MockBackend(profile=protocol.profile)
    return {op: pretrain_cost_model(group, backend=backend, **options) for op, group in by_op.items()}
