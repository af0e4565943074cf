"""TVM schedule templates: a task and a tile config in, a scheduled TVM IRModule (kernel ``main``) out.

Templates are looked up by name so worker processes can rebuild them; each has a version that
measurement records remember. TVM is imported only when a template builds something.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schedule_gym.spaces import Config
from schedule_gym.tasks import Task

__all__ = ["TEMPLATES", "Template", "get_template", "schedule_script"]


@dataclass(frozen=True)
class Template:
    name: str
    version: str
    target_kind: str  # "llvm" or "cuda"
    ops: tuple[str, ...]
    schedule: Callable[[Task, Config], Any]

    def check_target(self, target_kind: str) -> None:
        if target_kind != self.target_kind:
            raise ValueError(f"template {self.name!r} is for {self.target_kind!r} targets, not {target_kind!r}")

    def check(self, task: Task, target_kind: str) -> None:
        if task.op not in self.ops:
            raise ValueError(f"template {self.name!r} builds {list(self.ops)} tasks, not {task.op!r} ({task.name})")
        self.check_target(target_kind)


def _gemm_cpu(task: Task, config: Config) -> Any:
    from schedule_gym.templates.gemm_cpu import schedule_gemm_cpu

    return schedule_gemm_cpu(task, config)


def _gemm_cuda(task: Task, config: Config) -> Any:
    from schedule_gym.templates.gemm_cuda import schedule_gemm_cuda

    return schedule_gemm_cuda(task, config)


def _faults() -> dict[str, Template]:
    from schedule_gym.templates import faults

    return {
        name: Template(name, f"{name}-v1", "llvm", ("gemm",), fn)
        for name, fn in (
            ("fault-build", faults.build_failure),
            ("fault-crash", faults.crashing_kernel),
            ("fault-hang", faults.hanging_kernel),
            ("fault-wrong", faults.wrong_kernel),
        )
    }


TEMPLATES: dict[str, Template] = {
    "gemm-cpu": Template("gemm-cpu", "gemm-cpu-v1", "llvm", ("gemm",), _gemm_cpu),
    "gemm-cuda": Template("gemm-cuda", "gemm-cuda-v1", "cuda", ("gemm",), _gemm_cuda),
    # Deliberately broken templates (test doubles shipped with the package, as SB3 ships IdentityEnv):
    # each fails in one way a real kernel can, to show that failures become results.
    **_faults(),
}


def get_template(name: str) -> Template:
    if not isinstance(name, str) or name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}; known templates: {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def schedule_script(task: Task, config: Config, template: str = "gemm-cpu") -> str:
    """The scheduled kernel of ``config`` as TVMScript (``IRModule.script()``): what the template builds."""
    return get_template(template).schedule(task, config).script()
