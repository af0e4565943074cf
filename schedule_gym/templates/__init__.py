"""TVM schedule templates: a task and a tile config in, a scheduled TVM IRModule (kernel ``main``) out.

Templates are keyed by (operator, target kind) (:func:`template_for`) and looked up by name so worker
processes can rebuild them; each has a version that measurement records remember. The CPU template is one
schedule for every operator (:mod:`~schedule_gym.templates.cpu`) and the CUDA template one for every operator
with CUDA axes (:mod:`~schedule_gym.templates.cuda`); each is registered once per operator, under the name
the operator's module (:mod:`schedule_gym.operators`) states as its default for that target kind, with the
version ``<name>-v1``, so that each operator keeps its own. The operator's module also names its packed CPU
template (:data:`PACKED`), whose tasks are its packed form. TVM is imported only when a template builds
something.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schedule_gym.operators import OPERATORS, get_workload
from schedule_gym.templates import packed_conv2d, packed_matmul
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["DEFAULTS", "PACKED", "TEMPLATES", "Template", "get_template", "has_packed_template", "schedule_script",
           "template_for", "template_of"]


@dataclass(frozen=True)
class Template:
    name: str
    version: str
    target_kind: str  # "llvm" or "cuda"
    ops: tuple[str, ...]
    schedule: Callable[[Task, Config], Any]
    #: raises ValueError naming what is wrong if the template cannot build a task of its operators (e.g.
    #: other split counts than its tile space needs); None: any task of ``ops``
    check_task: Callable[[Task], None] | None = None
    #: ``(input index, tile)`` for each input the kernel of a config takes with its columns tiled
    #: (:mod:`~schedule_gym.templates.layouts`); None: every input as the workload lays it out
    tiled_inputs: Callable[[Task, Config], tuple[tuple[int, int], ...]] | None = None

    def input_layout(self, task: Task, config: Config) -> tuple[tuple[int, int], ...]:
        """The inputs the kernel of ``config`` takes with their columns tiled (``()``: none)."""
        return () if self.tiled_inputs is None else tuple(self.tiled_inputs(task, config))

    def check_target(self, target_kind: str) -> None:
        if target_kind != self.target_kind:
            raise ValueError(f"template {self.name!r} is for {self.target_kind!r} targets, not {target_kind!r}")

    def check(self, task: Task, target_kind: str) -> None:
        if task.op not in self.ops:
            raise ValueError(f"template {self.name!r} builds {list(self.ops)} tasks, not {task.op!r} ({task.name})")
        if self.check_task is not None:
            self.check_task(task)
        self.check_target(target_kind)


def _cpu(task: Task, config: Config) -> Any:
    from schedule_gym.templates.cpu import schedule_cpu

    return schedule_cpu(task, config)


def _packed(op: str, version: int) -> tuple[Callable[[Task, Config], Any], Callable[[Task], None], Any]:
    """The schedule, check and tiled inputs of the packed template ``<op>-cpu-v<version>``
    (templates/packed_*.py)."""
    module = packed_conv2d if op == "conv2d" else packed_matmul
    schedule = packed_conv2d.schedule_packed_conv2d if op == "conv2d" else packed_matmul.schedule_packed_matmul
    tiled = module.tiled_inputs
    return ((lambda task, config: schedule(task, config, version)), (lambda task: module.check_task(task, version)),
            (lambda task, config: tiled(task, config, version)) if version in module.WEIGHT_PACKED_VERSIONS else None)


def _gemm_cuda_v2(task: Task, config: Config) -> Any:
    from schedule_gym.templates.cuda_v2 import schedule_gemm_cuda_v2

    return schedule_gemm_cuda_v2(task, config)


def _cuda(task: Task, config: Config) -> Any:
    from schedule_gym.templates.cuda import schedule_cuda

    return schedule_cuda(task, config)


def _no_epilogue(task: Task) -> None:
    blocks = get_workload(task.op).epilogues(task)
    if blocks:
        raise ValueError(f"the CUDA template builds no epilogue: {task.name} has one ({', '.join(blocks)}); tune the "
                         f"{task.op} without it and leave the epilogue to the graph")


#: the schedule (and its check) of every operator's default template, by target kind
_GENERIC: dict[str, tuple[Callable[[Task, Config], Any], Callable[[Task], None] | None]] = {
    "llvm": (_cpu, None),
    "cuda": (_cuda, _no_epilogue),
}


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
    # the generic CPU and CUDA schedules (templates/cpu.py, templates/cuda.py), once per operator and kind
    **{name: Template(name, f"{name}-v1", kind, (op.name,), *_GENERIC[kind])
       for op in OPERATORS.values() for kind, name in op.templates.items()},
    # packed B (and A in v2, v3) and a register micro-kernel (templates/packed_matmul.py), and NHWC conv2d as a
    # packed implicit GEMM (templates/packed_conv2d.py); not defaults: their tasks are the operators' packed forms
    # (schedule_gym.operators.packed_task), built by the version its operator names (PACKED); v2 vectorises the
    # micro-tile's columns as one vector (templates/vectors.py), v3 packs A; both stay for their records; dense's
    # v5, v7 and v8 and conv2d's v5 take their weight packed (templates/layouts.py)
    **{
        f"{op}-cpu-v{version}": Template(f"{op}-cpu-v{version}", f"{op}-cpu-v{version}", "llvm", (op,),
                                         *_packed(op, version))
        for op, versions in [*((op, packed_matmul.versions(op)) for op in packed_matmul.OPS),
                             ("conv2d", packed_conv2d.VERSIONS)]
        for version in versions
    },
    # v1's tile space with vectorised shared copies, padded shared rows and a pipelined k loop
    # (templates/cuda_v2.py); not the default: ask for it by name
    "gemm-cuda-v2": Template("gemm-cuda-v2", "gemm-cuda-v2", "cuda", ("gemm",), _gemm_cuda_v2),
    # Deliberately broken templates (test doubles shipped with the package, as SB3 ships IdentityEnv):
    # each fails in one way a real kernel can, to show that failures become results.
    **_faults(),
}

#: The template each (operator, target kind) gets by default (its operator's ``templates``).
DEFAULTS: dict[tuple[str, str], str] = {
    (op.name, kind): name for op in OPERATORS.values() for kind, name in op.templates.items()
}
#: The packed CPU template of each operator that has a packed form.
PACKED: dict[str, str] = {op.name: op.packed.template for op in OPERATORS.values() if op.packed is not None}


def get_template(name: str) -> Template:
    if not isinstance(name, str) or name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}; known templates: {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def template_for(op: str, target_kind: str) -> Template:
    """The default template of an operator on a target kind (``"llvm"``, ``"cuda"``)."""
    name = DEFAULTS.get((op, target_kind))
    if name is None:
        have = sorted(f"{o} on {k}" for o, k in DEFAULTS)
        raise ValueError(f"no template builds {op!r} for {target_kind!r} targets; templates exist for {', '.join(have)}")
    return TEMPLATES[name]


def has_packed_template(task: Task) -> bool:
    """Whether ``task`` has a packed form (``schedule_gym.operators.packed_task``; conv2d: NHWC, at least four output
    channels a group, or depthwise)."""
    operator = OPERATORS.get(task.op)
    return operator is not None and operator.packed is not None and operator.packed.accepts(task)


def template_of(task: Task, target_kind: str) -> Template:
    """The template ``"auto"`` builds ``task`` with: the packed CPU template if ``task`` is in its form (the
    splits and loop order ``schedule_gym.operators.packed_task`` gives), else the operator's default
    (:func:`template_for`)."""
    if target_kind == "llvm" and task.op in PACKED:
        packed = TEMPLATES[PACKED[task.op]]
        try:
            packed.check(task, target_kind)
        except ValueError:
            pass
        else:
            return packed
    return template_for(task.op, target_kind)


def schedule_script(task: Task, config: Config, template: str = "auto") -> str:
    """The scheduled kernel of ``config`` as TVMScript (``IRModule.script()``): what the template builds."""
    chosen = template_of(task, "llvm") if template == "auto" else get_template(template)
    return chosen.schedule(task, config).script()
