"""The packed CPU templates (gemm-, dense-, batch_matmul-, conv2d-cpu-v2): tasks and tile space, registration,
precise refusals, correct kernels on odd shapes."""

import hashlib
import math

import numpy as np
import pytest

from schedule_gym import TilingEnv, batch_matmul, conv2d, dense, gemm
from schedule_gym.loopnest import LoopNest
from schedule_gym.operators import get_operator, packed_task
from schedule_gym.operators.matmul import PACKED_LOOP_ORDER as LOOP_ORDER
from schedule_gym.spaces import TileSpace
from schedule_gym.templates import DEFAULTS, TEMPLATES, get_template, template_for
from schedule_gym.tasks import get_task
from schedule_gym.templates.matmul_cpu_v2 import check_task

SPLITS = (3, 2, 3)


def gemm_task(m, k, n, dtype="float32"):
    """The GEMM task gemm-cpu-v2 builds."""
    return packed_task(gemm(m, k, n, dtype=dtype))

ODD_SHAPES = ((100, 75, 130), (97, 89, 101), (1, 7, 13))  # non-powers of two, primes, a single row


@pytest.mark.parametrize("op", ["gemm", "dense", "batch_matmul", "conv2d"])
def test_registered_selectable_and_not_a_default(op):
    template = get_template(f"{op}-cpu-v2")
    assert template is TEMPLATES[f"{op}-cpu-v2"]
    assert (template.name, template.version, template.target_kind, template.ops) == (f"{op}-cpu-v2", f"{op}-cpu-v2", "llvm", (op,))
    # v1 stays the default and keeps its version, so its records stay valid
    assert DEFAULTS[(op, "llvm")] == f"{op}-cpu" and template_for(op, "llvm").version == f"{op}-cpu-v1"


def test_packed_tasks_of_each_operator_and_by_name():
    """packed_task keeps the operator, its shape, parameters and operands; only splits, order and name change."""
    base = dense(128, 768, 3072, activation="gelu")
    task = packed_task(base)
    assert (task.op, task.extents, task.params, task.operands) == (base.op, base.extents, base.params, base.operands)
    assert task.name == "dense-128x768x3072+bias+gelu-packed" and task.splits == SPLITS and task.loop_order == LOOP_ORDER
    assert packed_task(task) == task  # idempotent
    bmm = packed_task(batch_matmul(12, 128, 64, 128, transpose_b=True))
    assert bmm.splits == (1, 3, 2, 3) and bmm.loop_order == (("b", 0),) + LOOP_ORDER
    assert LoopNest.cpu(bmm).describe() == "b0 m0 n0 | k0 n1 m1 k1 m2(unroll) n2(vector)"
    for name, want in (("gemm-64x32x48-packed", gemm_task(64, 32, 48)), ("dense-128x768x3072+bias+gelu-packed", task),
                       ("bmmNT-12x128x64x128-packed", bmm), ("gemm-1024-packed", packed_task(get_task("gemm-1024")))):
        assert get_task(name) == want
    with pytest.raises(ValueError, match=r"unknown task 'gemm-x-packed': -packed follows the name of a GEMM preset or "
                                         r"of a task of an operator with a packed form \(gemm, conv2d, dense, batch_matmul\)"):
        get_task("gemm-x-packed")
    conv = get_task("conv2d-1x8x8x4-8-k3-s1-p1-packed")
    assert conv == packed_task(conv2d(1, 8, 8, 4, 8, 3, 1, 1)) and conv.loop_order == get_operator("conv2d").packed.loop_order
    assert LoopNest.cpu(conv).describe() == "n0 h0 w0 co0 | rc0 co1 h1 w1 rh0 rw0 rc1 w2(unroll) co2(vector)"
    with pytest.raises(ValueError, match=r"builds NHWC convolutions with groups=1; 'conv2d-1x8x8x4-4-k3-s1-p1-g4' has layout NHWC and groups=4"):
        packed_task(conv2d(1, 8, 8, 4, 4, 3, 1, 1, groups=4))
    with pytest.raises(ValueError, match=r"has layout NCHW and groups=1 \(tune it with conv2d-cpu\)"):
        get_task("conv2d-1x8x8x4-8-k3-s1-p1-nchw-packed")
    with pytest.raises(ValueError, match=r"'conv2d-cpu-v2' needs splits 1/2/3/3/1/1/2 \(n, h, w, co, rh, rw, rc\); task .* has splits 4/4/4/4/2/2/2"):
        get_template("conv2d-cpu-v2").check(conv2d(1, 8, 8, 4, 8, 3, 1, 1), "llvm")


def test_task_splits_order_and_nest():
    task = gemm_task(1024, 1024, 1024)
    assert task.name == "gemm-1024x1024x1024-packed" and task.op == "gemm"
    assert task.splits == SPLITS == (3, 2, 3) and task.loop_order == LOOP_ORDER
    # the one loop-nest description (mock, Felix) reads the same nest the template builds
    assert LoopNest.cpu(task).describe() == "m0 n0 | k0 n1 m1 k1 m2(unroll) n2(vector)"
    check_task(task)
    assert gemm_task(8, 8, 8, dtype="float64").dtype == "float64"


@pytest.mark.parametrize("shape", ODD_SHAPES + ((1024, 1024, 1024),))
def test_every_config_multiplies_to_the_extents(shape):
    """The factors mean (M/MC, MC/MR, MR), (K/KC, KC), (N/NC, NC/NR, NR): each tuple's product is the extent."""
    task = gemm_task(*shape)
    space = TileSpace(task)
    rng = np.random.default_rng(0)
    configs = [space.sample(rng) for _ in range(50)] if len(space) > 50 else list(space)
    for config in configs:
        factors = dict(zip(task.dim_names, config))
        assert tuple(math.prod(factors[d]) for d in ("m", "k", "n")) == shape
        assert [len(factors[d]) for d in ("m", "k", "n")] == [3, 2, 3]


def test_bad_task_template_combinations_are_precise_errors():
    v2 = get_template("gemm-cpu-v2")
    with pytest.raises(ValueError, match=r"needs splits 3/2/3 .* task 'gemm-64x64x64' has splits 4/2/4: build it with schedule_gym.operators.packed_task"):
        v2.check(gemm(64, 64, 64), "llvm")
    plain = gemm(64, 64, 64, 3, 2, 3)  # the right split counts in their default (v1-style) order
    with pytest.raises(ValueError, match=r"builds the loop order m0 n0 k0 n1 m1 k1 m2 n2; task 'gemm-64x64x64' has m0 n0 k0 m1 n1 k1 m2 n2"):
        v2.check(plain, "llvm")
    with pytest.raises(ValueError, match=r"'batch_matmul-cpu-v2' needs splits 1/3/2/3 .*; b: 1\); task 'bmmNN-2x8x8x8' has splits 4/4/2/4"):
        get_template("batch_matmul-cpu-v2").check(batch_matmul(2, 8, 8, 8), "llvm")
    with pytest.raises(ValueError, match=r"template 'gemm-cpu-v2' builds \['gemm'\] tasks, not 'dense'"):
        v2.check(dense(64, 64, 64), "llvm")
    with pytest.raises(ValueError, match="template 'gemm-cpu-v2' is for 'llvm' targets, not 'cuda'"):
        v2.check(gemm_task(64, 64, 64), "cuda")
    # v1 builds any split count, so it builds v2's tasks too
    get_template("gemm-cpu").check(gemm_task(64, 64, 64), "llvm")


# ------------------------------------------------------------------------------------------- TVM
V1_SCRIPT_SHA256 = "b6cf747b0f794a3af7b3c9b1386883bbead9fd0da91b61a5d4edeaa6c7b947c4"


@pytest.mark.tvm
def test_v1_script_is_unchanged():
    """gemm-cpu (v1) builds byte-identical TVMScript: its records stay valid."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    script = schedule_script(gemm(128, 64, 96), ((2, 2, 4, 8), (8, 8), (1, 3, 4, 8)), "gemm-cpu")
    assert hashlib.sha256(script.encode()).hexdigest() == V1_SCRIPT_SHA256


@pytest.mark.tvm
def test_v2_schedule_packs_both_operands_and_keeps_the_output():
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    script = schedule_script(gemm_task(64, 32, 48), ((2, 8, 4), (2, 16), (1, 3, 16)), "gemm-cpu-v2")
    assert "B_global = T.sblock_alloc_buffer((3, 32, 16))" in script  # [N/NR][K][NR], compacted per block when lowered
    assert "A_global = T.sblock_alloc_buffer((16, 32, 4))" in script  # [M/MR][K][MR]
    assert "def main(A: T.Buffer((64, 32), \"float32\"), B: T.Buffer((32, 48), \"float32\"), C: T.Buffer((64, 48), \"float32\"))" in script
    assert "T.parallel(2)" in script and "T.unroll(4)" in script and "T.vectorized(16)" in script


@pytest.fixture(scope="module")
def v2_backend():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    backend = TVMBackend(template="gemm-cpu-v2", protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    yield backend
    backend.close()


@pytest.mark.tvm
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_v2_kernels_are_correct_on_odd_shapes(v2_backend, shape):
    """Random configs and degenerate corners (all factors outer; one whole row of ``C`` as the micro-tile)
    build, run and pass the workload's check against the float64 reference. (The all-inner corner, a
    ``M``-times unrolled ``N``-wide vector, is correct too but takes a minute to build at 100 x 130.)"""
    task = gemm_task(*shape)
    space = TileSpace(task)
    rng = np.random.default_rng(1)
    m, k, n = shape
    corners = [((m, 1, 1), (k, 1), (n, 1, 1)), ((1, m, 1), (1, k), (1, 1, n)), ((1, m, 1), (k, 1), (1, 1, n))]
    configs = corners + [space.sample(rng) for _ in range(4)]
    results = v2_backend.measure(task, configs)
    for config, result in zip(configs, results):
        assert result.ok, (config, result.error)


@pytest.mark.tvm
def test_v2_through_the_environment(v2_backend):
    """gemm-cpu-v2 is usable from the environment with its task; a v1-split task is refused up front."""
    env = TilingEnv(gemm_task(48, 40, 64), backend=v2_backend)
    obs, info = env.reset(seed=0)
    action = int(np.flatnonzero(env.action_masks())[0])
    obs, reward, terminated, truncated, info = env.step(action)
    assert np.isfinite(reward) and info["latency_s"] > 0
    env.close()
    with pytest.raises(ValueError, match="needs splits 3/2/3"):
        TilingEnv(gemm(48, 40, 64), backend=v2_backend)


@pytest.mark.tvm
def test_v2_dense_schedule_applies_the_epilogue_per_block():
    """dense: W is packed like B, and the bias + activation run on each finished block inside the parallel loop."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(dense(64, 32, 48, activation="relu"))
    script = schedule_script(task, ((2, 8, 4), (2, 16), (1, 3, 16)), "dense-cpu-v2")
    assert "W_global = T.sblock_alloc_buffer((3, 32, 16))" in script and "X_global = T.sblock_alloc_buffer((16, 32, 4))" in script
    parallel, epilogue = script.index("T.parallel(2)"), script.index('T.sblock("Y")')
    assert parallel < epilogue  # the epilogue is under the parallel block loop, not a pass of its own after it


@pytest.mark.tvm
@pytest.mark.parametrize(
    "task",
    [
        packed_task(dense(100, 75, 130, activation="gelu")),
        packed_task(dense(97, 89, 101, bias=False, activation="relu")),
        *(packed_task(batch_matmul(3, 20, 12, 28, ta, tb)) for ta in (False, True) for tb in (False, True)),
    ],
    ids=lambda t: t.name,
)
def test_v2_dense_and_batch_matmul_kernels_are_correct(task):
    """Odd shapes, epilogues and every transposition: random configs and the all-outer corner pass the
    workload's check against the float64 reference (a wrong packing index or epilogue placement fails it)."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    space = TileSpace(task)
    rng = np.random.default_rng(2)
    outer = tuple((d.extent,) + (1,) * (d.splits - 1) for d in task.dims)
    configs = [outer] + [space.sample(rng) for _ in range(3)]
    backend = TVMBackend(template=f"{task.op}-cpu-v2", protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    try:
        results = backend.measure(task, configs)
    finally:
        backend.close()
    for config, result in zip(configs, results):
        assert result.ok, (config, result.error)


@pytest.mark.tvm
def test_v2_conv2d_schedule_packs_weights_and_pads_per_block():
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(conv2d(1, 14, 14, 16, 32, 3, padding=1, bias=True, activation="relu"))
    config = ((1,), (7, 2), (1, 7, 2), (2, 2, 8), (1,), (1,), (2, 8))
    script = schedule_script(task, config, "conv2d-cpu-v2")
    assert "W_global = T.sblock_alloc_buffer((4, 3, 3, 16, 8))" in script  # [CO/NR][KH][KW][CI][NR]
    parallel = script.index("T.parallel(14)")
    # the padding and the epilogue are computed inside the parallel block loop, per block
    assert parallel < script.index('T.sblock("pad")') and parallel < script.index('T.sblock("O")')
    update = script[script.index('T.sblock("C_update")') - 400:script.index('T.sblock("C_update")')]
    assert "T.unroll(2)" in update and "T.vectorized(8)" in update


@pytest.mark.tvm
def test_v2_conv2d_kernels_are_correct():
    """Padding, strides, dilation, rectangular windows, batch 2, 1x1 and every epilogue: the all-outer corner
    and random configs pass the workload's check against the float64 reference."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    tasks = [
        packed_task(conv2d(1, 14, 14, 16, 32, 3, padding=1)),
        packed_task(conv2d(1, 15, 13, 6, 10, 3, stride=2, padding=1, bias=True, activation="relu6")),
        packed_task(conv2d(2, 7, 7, 12, 20, 1)),
        packed_task(conv2d(1, 9, 11, 5, 7, (3, 1), padding=(1, 0), dilation=2, bias=True, activation="gelu")),
    ]
    rng = np.random.default_rng(3)
    backend = TVMBackend(template="conv2d-cpu-v2", protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    try:
        for task in tasks:
            space = TileSpace(task)
            outer = tuple((d.extent,) + (1,) * (d.splits - 1) for d in task.dims)
            configs = [outer] + [space.sample(rng) for _ in range(3)]
            for config, result in zip(configs, backend.measure(task, configs)):
                assert result.ok, (task.name, config, result.error)
    finally:
        backend.close()
