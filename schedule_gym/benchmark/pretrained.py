"""Artefacts pretrained on a protocol's training split: Felix's cost models.

:func:`pretrain_felix` fits one :class:`~schedule_gym.agents.felix.FelixCostModel` per operator of the
training split (one feature spec spans only tasks with the same numbers of dimensions and operands), on
latencies of the protocol's mock profile, and :func:`check_training_tasks` refuses any task whose
computation (:attr:`~schedule_gym.tasks.Task.key`) is held out, so nothing held out is ever fitted.
``examples/pretrain_felix.py`` writes the models shipped in ``leaderboard/``; ``FelixAgent`` takes a list
of them (``cost_model=[...]``) and uses, per task, the first whose feature spec fits it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from schedule_gym.benchmark.protocol import Protocol, computation_key, get_protocol
from schedule_gym.tasks import Task

__all__ = ["artefact_training_keys", "check_artefact", "check_training_tasks", "checkpoint_training_tasks",
           "felix_training_tasks", "pretrain_felix", "sidecar_path", "write_sidecar"]


def check_training_tasks(protocol: str | Protocol, tasks: Iterable[Task]) -> tuple[Task, ...]:
    """``tasks`` as a tuple, after checking that none is one of ``protocol``'s held-out computations (by
    :func:`~schedule_gym.benchmark.protocol.computation_key`, whatever its name or epilogue); a held-out one
    is a ``ValueError`` naming it."""
    protocol = get_protocol(protocol)
    tasks = tuple(tasks)
    for t in tasks:
        if not isinstance(t, Task):
            raise TypeError(f"expected Task objects, got {t!r}")
    held_out = {computation_key(t): t.name for t in protocol.held_out_tasks()}
    leaked = [f"{t.name} (held-out task {held_out[computation_key(t)]})" for t in tasks if computation_key(t) in held_out]
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
    backend = MockBackend(profile=protocol.profile)
    return {op: pretrain_cost_model(group, backend=backend, **options)
            for op, group in felix_training_tasks(protocol, ops, tasks).items()}


def felix_training_tasks(protocol: str | Protocol, ops: Sequence[str] | None = None,
                         tasks: Iterable[Task] | None = None) -> dict[str, tuple[Task, ...]]:
    """The tasks :func:`pretrain_felix` fits, by operator: ``tasks`` (default: the training split), checked by
    :func:`check_training_tasks`, of the operators ``ops`` (default: all of theirs)."""
    protocol = get_protocol(protocol)
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
    return {op: tuple(group) for op, group in by_op.items()}


def sidecar_path(path: str | os.PathLike) -> Path:
    """``model.pt``, ``model.json`` or ``model.json.gz`` -> ``model.meta.json``: where an artefact's sidecar
    lives (a compression suffix is not part of the artefact's name)."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    return path.with_name((name.rpartition(".")[0] or name) + ".meta.json")


def write_sidecar(path: str | os.PathLike, protocol: str | Protocol, tasks: Iterable[Task],
                  **details: Any) -> Path:
    """Write the sidecar of the artefact at ``path``: ``protocol`` (its ``to_dict()``), the keys of the
    ``tasks`` it was trained on (checked by :func:`check_training_tasks`) and ``details`` (plain JSON: the
    command, sample counts...); returns the sidecar's path."""
    protocol = get_protocol(protocol)
    keys = [t.key for t in check_training_tasks(protocol, tasks)]
    out = sidecar_path(path)
    out.write_text(json.dumps({**details, "protocol": protocol.to_dict(), "training_tasks": keys},
                              indent=1, sort_keys=True) + "\n")
    return out


def checkpoint_training_tasks(checkpoint: str | os.PathLike) -> tuple[Task, ...]:
    """The tasks a policy checkpoint was trained on, as its trainer recorded them (the ``tasks`` of the ``.json``
    beside a ``ppo_vec`` or DAgger checkpoint): what its leak-check sidecar must name, which can be more than the
    protocol's training split (synthetic layers). A missing or malformed record is a ``ValueError`` naming it."""
    from schedule_gym.envs.multitask_env import resolve_tasks

    record = Path(checkpoint).with_suffix(".json")
    try:
        tasks = json.loads(record.read_text()).get("tasks")
    except (FileNotFoundError, ValueError, AttributeError) as exc:
        raise ValueError(f"checkpoint {str(checkpoint)!r} has no readable record {str(record)!r} of its training "
                         f"tasks: {exc}") from None
    if not isinstance(tasks, list) or not tasks:
        raise ValueError(f"record {str(record)!r} must hold 'tasks', the non-empty list of the training tasks")
    return tuple(resolve_tasks(tasks))


def artefact_training_keys(path: str | os.PathLike) -> tuple[str, frozenset[str]]:
    """The protocol name and the training task keys recorded in the sidecar of the artefact at ``path``; a
    missing or malformed sidecar is a ``ValueError`` naming it."""
    side = sidecar_path(path)
    try:
        meta = json.loads(side.read_text())
    except FileNotFoundError:
        raise ValueError(f"artefact {str(path)!r} has no sidecar {str(side)!r} recording its training tasks") from None
    except ValueError as exc:
        raise ValueError(f"sidecar {str(side)!r} is not valid JSON: {exc}") from None
    protocol = meta.get("protocol") if isinstance(meta, Mapping) else None
    name = protocol.get("name") if isinstance(protocol, Mapping) else protocol
    keys = meta.get("training_tasks") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"sidecar {str(side)!r} must hold 'protocol' (a name or a protocol's dict) and "
                         "'training_tasks' (a list of task keys)")
    return name, frozenset(keys)


def check_artefact(protocol: str | Protocol, path: str | os.PathLike) -> str:
    """The name of the protocol the artefact at ``path`` was trained on, after checking that none of its
    recorded training keys (:func:`artefact_training_keys`) is the computation of a held-out task of
    ``protocol`` (:func:`~schedule_gym.benchmark.protocol.computation_key`); one that is is a ``ValueError``
    naming the artefact and the leaked held-out tasks."""
    protocol = get_protocol(protocol)
    trained_on, keys = artefact_training_keys(path)
    computations = {computation_key(k) for k in keys}
    leaked = sorted(t.name for t in protocol.held_out_tasks() if computation_key(t) in computations)
    if leaked:
        shown = ", ".join(leaked[:5]) + (f" and {len(leaked) - 5} more" if len(leaked) > 5 else "")
        raise ValueError(f"artefact {str(path)!r} was trained on {len(leaked)} held-out tasks of protocol "
                         f"{protocol.name} ({shown}): it was trained for protocol {trained_on}")
    return trained_on
