"""The operator registry: every operator states all of itself in its module, and everything above reads it."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest

import schedule_gym  # noqa: F401  (registers the ids)
from schedule_gym.operators import OPERATORS, get_operator, get_workload, operator_names, packed_task
from schedule_gym.tasks import Task, get_task
from schedule_gym.templates import DEFAULTS, PACKED, TEMPLATES, has_packed_template, template_for, template_of

OPS = list(OPERATORS.values())
#: a small task of every operator, by its name (an NHWC one whose torch result, NCHW in shape, differs in shape)
SMALL_NAMES = {"gemm": "gemm-24x16x8", "conv2d": "conv2d-1x9x9x4-6-k3-s2-p1", "dense": "dense-6x16x10+bias+relu6",
               "batch_matmul": "bmmNT-3x8x4x5", "pool2d": "pool2d-avg-1x9x7x5-k3-s2-p1"}


def default_task(op):
    return op.build(**op.env_kwargs)


def test_unknown_operators_are_named_with_the_known_ones():
    known = ", ".join(operator_names())
    with pytest.raises(ValueError, match=f"unknown operator 'conv3d'; known operators: {known}"):
        get_operator("conv3d")
    with pytest.raises(ValueError, match="unknown operator 'conv3d'"):
        get_workload("conv3d")
    assert operator_names()[:4] == ("gemm", "conv2d", "dense", "batch_matmul")


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_an_operator_builds_names_and_parses_its_own_tasks(op):
    task = default_task(op)
    assert task.op == op.name and op.workload.op == op.name
    assert task.ops_per_point == op.ops_per_point and task.flops == op.ops_per_point * math.prod(task.extents)
    assert op.task_of_name(task.name) == task and get_task(task.name) == task
    for other in OPS:  # no operator reads another's names
        assert other is op or other.parse_name(task.name) is None


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_an_operators_templates_packed_form_and_cuda_axes_are_registered(op):
    task = default_task(op)
    assert DEFAULTS[(op.name, "llvm")] == op.templates["llvm"] and template_for(op.name, "llvm").ops == (op.name,)
    for kind, name in op.templates.items():
        assert TEMPLATES[name].target_kind == kind and TEMPLATES[name].version == f"{name}-v1"
    assert ("cuda" in op.templates) == (op.cuda_axes is not None)
    if op.cuda_axes is not None:  # every spatial dimension on exactly one CUDA axis
        on_axes = [d for axis in op.cuda_axes(task) for d in axis.dims]
        assert sorted(on_axes) == sorted(d.name for d in task.dims if not d.reduction)
    if op.packed is None:
        assert op.name not in PACKED and not has_packed_template(task)
        with pytest.raises(ValueError, match=f"operator '{op.name}' .* has no packed form; operators with one: gemm"):
            packed_task(task)
    else:
        packed = packed_task(task)
        assert packed_task(packed) == packed and packed.name == f"{task.name}-packed"
        assert get_task(packed.name) == packed
        assert template_of(packed, "llvm").name == PACKED[op.name] == op.packed.template
        assert template_of(task, "llvm").name == op.templates["llvm"]


@pytest.mark.parametrize("op", [op for op in OPS if op.env_id], ids=lambda op: op.name)
def test_an_operators_environment_is_registered_with_its_default_task(op):
    spec = gymnasium.spec(op.env_id)
    assert spec.kwargs == {"operator": op.name, **op.env_kwargs}
    assert spec.entry_point == "schedule_gym.envs.factories:operator_env"
    assert gymnasium.make(op.env_id).unwrapped.task == default_task(op)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_an_operators_patterns_are_plain_data_of_its_own(op):
    for pattern in op.patterns:
        assert pattern["op_type"]["type"] == op.name and pattern["cell"]
        assert all(set(node) == {"name", "op", "inputs"} for node in pattern["cell"])
    assert (op.implement is None) == (not op.patterns)


def test_patterns_of_one_size_go_in_registry_order_dense_before_batch_matmul():
    """map_model tries patterns largest first, then in registry order: a matmul by a constant must be tried as a
    dense layer before a batch matmul takes it."""
    assert operator_names().index("dense") < operator_names().index("batch_matmul")


def test_every_operator_has_a_small_task_here():
    assert set(SMALL_NAMES) == set(OPERATORS)


@pytest.mark.parametrize("op", [op for op in OPS if op.torch_kernel], ids=lambda op: op.name)
def test_the_torch_reference_computes_what_the_workload_computes(op):
    torch = pytest.importorskip("torch")
    task = get_task(SMALL_NAMES[op.name])
    inputs = op.workload.inputs(task)
    expected, tol = op.workload.reference(task, inputs)
    out = op.torch_kernel(task, [torch.from_numpy(x) for x in inputs])().numpy()
    if out.shape != expected.shape:  # an NHWC task's torch result is NCHW in channels_last memory
        out = out.transpose(0, 2, 3, 1)
    assert np.all(np.abs(out - expected) <= 2 * tol + 1e-6)


def test_tasks_count_their_operations_per_point_and_record_it_only_where_it_is_not_two():
    task = get_task("gemm-8x4x2")
    assert "ops_per_point" not in task.to_dict() and Task.from_dict(task.to_dict()) == task
    ones = Task(task.name, task.op, task.dims, task.operands, ops_per_point=1)
    assert ones.flops == 8 * 4 * 2 and ones.key == task.key
    assert ones.to_dict()["ops_per_point"] == 1 and Task.from_dict(ones.to_dict()) == ones
    with pytest.raises(ValueError, match="ops_per_point of task 'gemm-8x4x2' must be a positive integer, got 0"):
        Task(task.name, task.op, task.dims, task.operands, ops_per_point=0)
