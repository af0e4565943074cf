"""The global symbol of a task's kernel in a model's module: ``sg_`` and the task's name, every character
that is not a letter, a digit or ``_`` replaced by ``_`` (one place for the mapping and the padding)."""

from __future__ import annotations

import re

from schedule_gym.tasks.task import Task

__all__ = ["kernel_symbol"]


def kernel_symbol(task: Task) -> str:
    return "sg_" + re.sub(r"[^0-9A-Za-z_]", "_", task.name)
