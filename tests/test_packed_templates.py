"""The packed CPU templates (batch_matmul-cpu-v4, conv2d-cpu-v5, gemm-cpu-v6, dense-cpu-v8, and their earlier
versions): tasks and tile space, registration, precise refusals, correct kernels on odd shapes, v2's kernels unchanged,
v3's whole vectors, v4's A read in place, v5's weight packed once (tests/test_prepacked_weights.py has its layout),
v6's block loops in GotoBLAS's order, v7's column blocks outer and v8's prefetches."""

import hashlib
import math

import numpy as np
import pytest

from schedule_gym import TilingEnv, batch_matmul, conv2d, dense, gemm
from schedule_gym.loopnest import LoopNest
from schedule_gym.operators import get_operator, packed_task
from schedule_gym.operators.matmul import PACKED_LOOP_ORDER as LOOP_ORDER
from schedule_gym.operators.conv2d import is_depthwise
from schedule_gym.spaces import TileSpace
from schedule_gym.templates import DEFAULTS, PACKED, TEMPLATES, get_template, template_for, template_of
from schedule_gym.tasks import get_task
from schedule_gym.templates.packed_matmul import check_task
from schedule_gym.templates.vectors import vector_width

SPLITS = (3, 2, 3)


def gemm_task(m, k, n, dtype="float32"):
    """The GEMM task the packed templates build."""
    return packed_task(gemm(m, k, n, dtype=dtype))

ODD_SHAPES = ((100, 75, 130), (97, 89, 101), (1, 7, 13))  # non-powers of two, primes, a single row


MATMUL_OPS = ("gemm", "dense", "batch_matmul")
VERSIONS = [(op, v) for op in (*MATMUL_OPS, "conv2d") for v in ("v2", "v3", "v4", "v5", "v6", "v7", "v8")
            if (op, v) != ("conv2d", "v4") and (v != "v5" or op in ("dense", "conv2d"))
            and (v != "v6" or op == "gemm") and (v not in ("v7", "v8") or op == "dense")]
#: the version that builds each operator's packed form
PACKED_VERSION = {"gemm": "v6", "batch_matmul": "v4", "dense": "v8", "conv2d": "v5"}


@pytest.mark.parametrize("op, version", VERSIONS)
def test_registered_selectable_and_not_a_default(op, version):
    template = get_template(f"{op}-cpu-{version}")
    assert template is TEMPLATES[f"{op}-cpu-{version}"]
    assert (template.name, template.version, template.target_kind, template.ops) == (
        f"{op}-cpu-{version}", f"{op}-cpu-{version}", "llvm", (op,))
    # v1 stays the default and keeps its version, so its records stay valid
    assert DEFAULTS[(op, "llvm")] == f"{op}-cpu" and template_for(op, "llvm").version == f"{op}-cpu-v1"
    # v5 builds conv2d's packed form (its weight packed once), v8 dense's (its weight packed once, its column blocks
    # outer, its next sliver prefetched), v6 GEMM's and v4 batch matmul's (what "auto" picks for them); the others
    # stay for their records
    assert PACKED[op] == f"{op}-cpu-{PACKED_VERSION[op]}"


def test_conv2d_has_no_v4_only_dense_and_conv2d_a_v5_only_gemm_a_v6_and_only_dense_a_v7_and_v8():
    """v4 changes how the matmul templates treat A, which conv2d's template does not pack: no conv2d-cpu-v4; v5 takes
    a layer's constant weight packed, which GEMM's and batch matmul's operands are not; v6's order is GEMM's; v7 is
    dense's v5 with its column blocks outer, v8 v7 with its weight's next sliver prefetched."""
    assert "conv2d-cpu-v4" not in TEMPLATES and "gemm-cpu-v5" not in TEMPLATES and "batch_matmul-cpu-v5" not in TEMPLATES
    assert not {"dense-cpu-v6", "batch_matmul-cpu-v6", "conv2d-cpu-v6"} & set(TEMPLATES)
    assert not {"gemm-cpu-v7", "batch_matmul-cpu-v7", "conv2d-cpu-v7"} & set(TEMPLATES)
    assert not {"gemm-cpu-v8", "batch_matmul-cpu-v8", "conv2d-cpu-v8"} & set(TEMPLATES)
    from schedule_gym.templates.packed_conv2d import check_task as check_conv2d

    with pytest.raises(ValueError, match="the packed conv2d template has versions 2, 3, 5, not 4"):
        check_conv2d(packed_task(conv2d(1, 8, 8, 4, 8, 3, 1, 1)), 4)
    with pytest.raises(ValueError, match="the packed gemm template has versions 2, 3, 4, 6, not 5"):
        check_task(gemm_task(64, 32, 48), 5)
    with pytest.raises(ValueError, match="the packed gemm template has versions 2, 3, 4, 6, not 7"):
        check_task(gemm_task(64, 32, 48), 7)
    with pytest.raises(ValueError, match="the packed gemm template has versions 2, 3, 4, 6, not 8"):
        check_task(gemm_task(64, 32, 48), 8)
    with pytest.raises(ValueError, match="the packed dense template has versions 2, 3, 4, 5, 7, 8, not 6"):
        check_task(packed_task(dense(8, 8, 8)), 6)
    with pytest.raises(ValueError, match="the packed batch_matmul template has versions 2, 3, 4, not 6"):
        check_task(packed_task(batch_matmul(2, 8, 8, 8)), 6)


def test_auto_builds_packed_forms_with_v6_and_every_version_checks_them():
    task = gemm_task(64, 32, 48)
    assert template_of(task, "llvm").name == "gemm-cpu-v6" and template_of(gemm(64, 32, 48), "llvm").name == "gemm-cpu"
    for version in ("v2", "v3", "v4", "v6"):
        get_template(f"gemm-cpu-{version}").check(task, "llvm")
        with pytest.raises(ValueError, match=rf"template 'gemm-cpu-{version}' needs splits 3/2/3"):
            get_template(f"gemm-cpu-{version}").check(gemm(64, 64, 64), "llvm")


@pytest.mark.parametrize("nr, dtype, version, width", [
    (48, "float32", 3, 16), (96, "float32", 3, 16), (24, "float32", 3, 8), (16, "float32", 3, 16),
    (130, "float32", 3, 2), (13, "float32", 3, 1), (64, "float64", 3, 8), (64, "float16", 3, 32),
    (48, "float32", 2, 48), (13, "float32", 2, 13), (96, "bfloat16", 3, 32), (128, "float8_e4m3fn", 3, 64),
    (48, "float32", 4, 16), (130, "float32", 4, 2), (64, "float64", 4, 8), (24, "float32", 6, 8), (24, "float32", 7, 8),
    (24, "float32", 8, 8),
])
def test_vector_width_is_the_largest_power_of_two_dividing_nr_within_512_bits(nr, dtype, version, width):
    assert vector_width(nr, dtype, version) == width


def test_vector_width_refuses_bad_input():
    with pytest.raises(ValueError, match="the packed templates have versions 2, 3, 4, 5, 6, 7, 8, not 9"):
        vector_width(16, "float32", 9)
    with pytest.raises(ValueError, match="a micro-tile's columns must be a positive integer, got 0"):
        vector_width(0, "float32", 3)
    with pytest.raises(ValueError, match="cannot tell the width of dtype 'bool'"):
        vector_width(16, "bool", 3)


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
    # a grouped convolution has a packed form where its groups have four output channels or more, and a depthwise one
    # (one input and one output channel a group), which v5 alone builds
    grouped = packed_task(conv2d(1, 8, 8, 8, 16, 3, 1, 1, groups=2))
    assert grouped.name == "conv2d-1x8x8x8-16-k3-s1-p1-g2-packed" and grouped.param("groups") == 2
    depthwise = packed_task(conv2d(1, 8, 8, 4, 4, 3, 1, 1, groups=4))
    assert depthwise.name == "conv2d-1x8x8x4-4-k3-s1-p1-g4-packed" and is_depthwise(depthwise)
    assert not is_depthwise(grouped) and not is_depthwise(conv)
    assert get_template("conv2d-cpu-v5").check(depthwise, "llvm") is None
    with pytest.raises(ValueError, match=r"template 'conv2d-cpu-v3' builds no depthwise convolution "
                                         r"\(conv2d-1x8x8x4-4-k3-s1-p1-g4-packed\); conv2d-cpu-v5 does"):
        get_template("conv2d-cpu-v3").check(depthwise, "llvm")
    with pytest.raises(ValueError, match=r"builds NHWC convolutions whose groups have at least 4 output channels, or "
                                         r"depthwise ones \(v5\); 'conv2d-1x8x8x8-8-k3-s1-p1-g4' has layout NHWC and 2 "
                                         r"output channel\(s\) and 2 input channel\(s\) in each of 4 group\(s\)"):
        packed_task(conv2d(1, 8, 8, 8, 8, 3, 1, 1, groups=4))
    multiplier = conv2d(1, 8, 8, 4, 8, 3, 1, 1, groups=4)  # two output channels of each input channel: not depthwise
    with pytest.raises(ValueError, match=r"2 output channel\(s\) and 1 input channel\(s\) in each of 4 group\(s\)"):
        packed_task(multiplier)
    assert not is_depthwise(multiplier)
    with pytest.raises(ValueError, match=r"has layout NCHW and 8 output channel\(s\) and 4 input channel\(s\) in each "
                                         r"of 1 group\(s\) \(tune it with "
                                         r"conv2d-cpu\)"):
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


#: sha256 of v2's TVMScript for one config of each kind of kernel, as before v3 existed: v2's records name these
V2_SCRIPT_SHA256 = {
    "gemm-64x32x48-packed": "d5747419942a81d5c1d0d265f72fbf02025671e2935f788ff56248ed5b2028cb",
    "dense-128x768x768+bias+gelu-packed": "ac3b7408d61c41d410c9fa574007fbcbd6ed2479d2f41224d1d85f5781fc0c8d",
    "bmmNT-2x64x32x48-packed": "a026c2ac3d847db07825de894fb0204b3a4c74f4ebb7c420e4f88a1fd05f876c",
    "conv2d-1x14x14x32-48-k3-s1-p1+bias+relu-packed": "8bbe6cf2bf94bb47cc6149daac6eb35581c65b053126ea05f79ab1c1f1147fda",
}
SCRIPT_CASES = (
    (packed_task(gemm(64, 32, 48)), ((2, 8, 4), (2, 16), (1, 3, 16))),
    (packed_task(dense(128, 768, 768, bias=True, activation="gelu")), ((1, 32, 4), (16, 48), (16, 1, 48))),
    (packed_task(batch_matmul(2, 64, 32, 48, transpose_b=True)), ((2,), (2, 8, 4), (2, 16), (1, 3, 16))),
    (packed_task(conv2d(1, 14, 14, 32, 48, 3, 1, 1, bias=True, activation="relu")),
     ((1,), (2, 7), (1, 7, 2), (1, 1, 48), (3,), (3,), (2, 16))),
)


@pytest.mark.tvm
@pytest.mark.parametrize("task, config", SCRIPT_CASES, ids=[t.name for t, _ in SCRIPT_CASES])
def test_v2_scripts_are_unchanged_and_v3_differs_only_where_nr_is_not_one_vector(task, config):
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    v2 = schedule_script(task, config, f"{task.op}-cpu-v2")
    assert hashlib.sha256(v2.encode()).hexdigest() == V2_SCRIPT_SHA256[task.name]
    v3 = schedule_script(task, config, f"{task.op}-cpu-v3")
    nr = config[task.dim_names.index("co" if task.op == "conv2d" else "n")][-1]
    if nr == 16:  # one whole vector: v3 builds what v2 builds
        assert v3 == v2
    else:  # 48 columns: three unrolled vectors of 16 where v2 has one of 48
        assert "T.vectorized(48)" in v2 and "T.vectorized(48)" not in v3
        assert "T.unroll(3)" in v3 and "T.vectorized(16)" in v3


@pytest.mark.tvm
@pytest.mark.parametrize("task, config", SCRIPT_CASES[:3], ids=[t.name for t, _ in SCRIPT_CASES[:3]])
def test_v4_is_v3_without_the_packing_of_a(task, config):
    """v4 packs B as v3 does and reads A (X for dense) in place: v3's copy of A is the only difference."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    v3 = schedule_script(task, config, f"{task.op}-cpu-v3")
    v4 = schedule_script(task, config, f"{task.op}-cpu-v4")
    a, b = ("X", "W") if task.op == "dense" else ("A", "B")
    assert f"{a}_global = T.sblock_alloc_buffer(" in v3 and f"{a}_global" not in v4
    assert f"{b}_global = T.sblock_alloc_buffer(" in v3 and f"{b}_global = T.sblock_alloc_buffer(" in v4
    without_a = [line for line in v3.splitlines() if f"{a}_global" not in line]
    assert len(v4.splitlines()) < len(without_a)  # the copy's loops and block are gone too


@pytest.mark.tvm
def test_v6_packs_each_panel_of_b_once_for_every_row_block():
    """v6 (GotoBLAS's order): the columns' block loop, then the reduction's, then the copy of B's panel (parallel over
    its slivers), then the parallel row blocks, each copying its block of A; v4 has B's copy inside the parallel
    loop over (row, column) blocks and no copy of A. Same config, same tile sizes in both."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task, config = gemm_task(256, 128, 192), ((4, 16, 4), (2, 64), (2, 6, 16))
    v6, v4 = schedule_script(task, config, "gemm-cpu-v6"), schedule_script(task, config, "gemm-cpu-v4")
    lines = v6.splitlines()

    def first(text: str, after: int = 0) -> int:
        return next(i for i, line in enumerate(lines) if i >= after and text in line)

    columns, reduction = first("for j_0 in range(2)"), first("for k_0 in range(2)")
    copy_b, rows = first("for ax1_0 in T.parallel(6)", reduction), first("for i_0 in T.parallel(4)", reduction)
    copy_a, update = first('T.sblock("A_global")', rows), first('T.sblock("C_update")', rows)
    assert columns < reduction < copy_b < first('T.sblock("B_global")', copy_b) < rows < copy_a < update
    assert first("for i_0_init in T.parallel(4)") < reduction  # each column block of C zeroed by the row blocks
    assert "B_global = T.sblock_alloc_buffer((12, 128, 16))" in v6
    assert "A_global = T.sblock_alloc_buffer((64, 128, 4))" in v6
    assert "T.parallel(8)" in v4 and "A_global" not in v4  # v4: (row, column) blocks fused in parallel, A in place
    # one row block: its micro-tile columns run in parallel (BLIS's jr loop), the zeroing's too
    one = schedule_script(task, ((1, 64, 4), (2, 64), (2, 6, 16)), "gemm-cpu-v6")
    assert "for i_0 in range(1)" in one
    assert "for j_1 in T.parallel(6)" in one and "for j_1_init in T.parallel(6)" in one


@pytest.fixture(scope="module", params=["v2", "v3", "v4", "v6"])
def packed_backend(request):
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    backend = TVMBackend(template=f"gemm-cpu-{request.param}",
                         protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    yield backend
    backend.close()


@pytest.mark.tvm
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_kernels_are_correct_on_odd_shapes(packed_backend, shape):
    """Random configs and degenerate corners (all factors outer; one whole row of ``C`` as the micro-tile)
    build, run and pass the workload's check against the float64 reference. (The all-inner corner, a
    ``M``-times unrolled ``N``-wide vector, is correct too but takes a minute to build at 100 x 130.)"""
    task = gemm_task(*shape)
    space = TileSpace(task)
    rng = np.random.default_rng(1)
    m, k, n = shape
    corners = [((m, 1, 1), (k, 1), (n, 1, 1)), ((1, m, 1), (1, k), (1, 1, n)), ((1, m, 1), (k, 1), (1, 1, n))]
    configs = corners + [space.sample(rng) for _ in range(4)]
    results = packed_backend.measure(task, configs)
    for config, result in zip(configs, results):
        assert result.ok, (config, result.error)


@pytest.mark.tvm
def test_packed_templates_through_the_environment(packed_backend):
    """gemm-cpu-v2, -v3, -v4 and -v6 are usable from the environment with their task; a v1-split task is refused up
    front."""
    env = TilingEnv(gemm_task(48, 40, 64), backend=packed_backend)
    obs, info = env.reset(seed=0)
    action = int(np.flatnonzero(env.action_masks())[0])
    obs, reward, terminated, truncated, info = env.step(action)
    assert np.isfinite(reward) and info["latency_s"] > 0
    env.close()
    with pytest.raises(ValueError, match="needs splits 3/2/3"):
        TilingEnv(gemm(48, 40, 64), backend=packed_backend)


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


DENSE_AND_BMM = [
    packed_task(dense(100, 75, 130, activation="gelu")),
    packed_task(dense(97, 89, 101, bias=False, activation="relu")),
    packed_task(dense(50, 64, 72, activation="silu")),
    *(packed_task(batch_matmul(3, 20, 12, 28, ta, tb)) for ta in (False, True) for tb in (False, True)),
]


@pytest.mark.tvm
@pytest.mark.parametrize("task, version", [(t, v) for v in ("v2", "v3", "v4", "v5", "v7", "v8") for t in DENSE_AND_BMM
                                           if v not in ("v5", "v7", "v8") or t.op == "dense"],
                         ids=lambda p: getattr(p, "name", p))
def test_dense_and_batch_matmul_kernels_are_correct(task, version):
    """Odd shapes, epilogues and every transposition: random configs and the all-outer corner pass the
    workload's check against the float64 reference (a wrong packing index or epilogue placement fails it)."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    space = TileSpace(task)
    rng = np.random.default_rng(2)
    outer = tuple((d.extent,) + (1,) * (d.splits - 1) for d in task.dims)
    configs = [outer] + [space.sample(rng) for _ in range(3)]
    backend = TVMBackend(template=f"{task.op}-cpu-{version}",
                         protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
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
@pytest.mark.parametrize("version", ["v2", "v3", "v5"])
def test_conv2d_kernels_are_correct(version):
    """Padding, strides, dilation, rectangular windows, batch 2, 1x1, groups and every epilogue: the all-outer corner
    and random configs pass the workload's check against the float64 reference."""
    pytest.importorskip("tvm")
    tasks = [
        packed_task(conv2d(1, 14, 14, 16, 32, 3, padding=1)),
        packed_task(conv2d(1, 15, 13, 6, 10, 3, stride=2, padding=1, bias=True, activation="relu6")),
        packed_task(conv2d(2, 7, 7, 12, 20, 1)),
        packed_task(conv2d(1, 9, 11, 5, 7, (3, 1), padding=(1, 0), dilation=2, bias=True, activation="gelu")),
        packed_task(conv2d(1, 8, 8, 12, 24, 1, bias=True, activation="silu")),
        packed_task(conv2d(1, 7, 9, 16, 24, 1, bias=True, activation="relu", residual=True)),
        packed_task(conv2d(1, 10, 10, 8, 16, 3, stride=2, padding=1, residual=True)),
        # grouped (ResNeXt's form): tiles within one group (below) and across groups, each lane reading its own channel
        packed_task(conv2d(1, 10, 9, 16, 24, 3, padding=1, groups=4, bias=True, activation="relu")),
        packed_task(conv2d(1, 8, 8, 32, 32, 3, stride=2, padding=1, groups=8, residual=True)),
    ]
    grouped = {  # per grouped task: NR dividing a group's output channels (6, 4), and NR spanning groups (8, 16)
        tasks[-2].name: [((1,), (2, 5), (1, 3, 3), (2, 2, 6), (3,), (3,), (2, 2)),
                         ((1,), (1, 10), (3, 1, 3), (1, 3, 8), (3,), (3,), (1, 4))],
        tasks[-1].name: [((1,), (2, 2), (1, 1, 4), (2, 4, 4), (3,), (3,), (1, 4)),
                         ((1,), (1, 4), (1, 2, 2), (1, 2, 16), (3,), (3,), (2, 2))],
    }
    _check_conv2d_kernels(f"conv2d-cpu-{version}", tasks, grouped, np.random.default_rng(3))


def _check_conv2d_kernels(template: str, tasks: list, extra: dict, rng: np.random.Generator) -> None:
    """Each task's all-outer corner, three random configs and ``extra[task name]`` measured with ``template``: each
    passes the workload's check against the float64 reference."""
    from schedule_gym.backends.tvm.backend import TVMBackend

    backend = TVMBackend(template=template, protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    try:
        for task in tasks:
            space = TileSpace(task)
            outer = tuple((d.extent,) + (1,) * (d.splits - 1) for d in task.dims)
            configs = [outer] + [space.sample(rng) for _ in range(3)] + extra.get(task.name, [])
            for config, result in zip(configs, backend.measure(task, configs)):
                assert result.ok, (task.name, config, result.error)
    finally:
        backend.close()


def test_v5_depthwise_schedule_keeps_each_tile_whole_and_pads_per_channel_sliver():
    """A depthwise convolution's reduction is its window alone: each micro-tile is zeroed, reduced over the unrolled
    window and finished (bias, activation) before the next, so its accumulators never leave the registers; the
    padded input is copied per ``NR``-channel sliver (``co1``), inside the parallel block loop."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(conv2d(1, 14, 14, 16, 16, 3, padding=1, groups=16, bias=True, activation="relu6"))
    script = schedule_script(task, ((1,), (7, 2), (1, 7, 2), (2, 1, 8), (3,), (3,), (1, 1)), "conv2d-cpu-v5")
    assert "W: T.Buffer((2, 3, 3, 1, 8)" in script and "W_global" not in script  # taken packed, [CO/NR][KH][KW][1][NR]
    markers = ("T.parallel(14)", "for co_1 in range(1)", 'T.sblock("pad")', "for y_1, x_1 in T.grid(2, 7)",
               'T.sblock("C_init")', "for rh in T.unroll(3)", "for rw in T.unroll(3)", 'T.sblock("C_update")',
               'T.sblock("O")')
    order = [script.index(marker) for marker in markers]
    assert order == sorted(order)
    # the epilogue reads the tile it follows: MR unrolled rows of NR lanes, inside the same (y_1, x_1) iteration
    epilogue = script[script.index('T.sblock("C_update")'):script.index('T.sblock("O")')]
    assert "for ax2 in T.unroll(2)" in epilogue and "for ax3 in T.vectorized(8)" in epilogue


@pytest.mark.tvm
def test_depthwise_kernels_are_correct():
    """v5's depthwise convolutions: strides, a 5x5 window, dilation, odd maps, batch 2, with no epilogue and with
    each kind (bias, activation, residual); the all-outer corner, random configs and tiles of several vectors pass
    the workload's check against the float64 reference."""
    pytest.importorskip("tvm")
    tasks = [
        packed_task(conv2d(1, 14, 14, 32, 32, 3, padding=1, groups=32, bias=True, activation="relu6")),
        packed_task(conv2d(1, 9, 7, 24, 24, 5, stride=2, padding=2, groups=24)),
        packed_task(conv2d(1, 9, 11, 12, 12, 3, padding=2, dilation=2, groups=12, bias=True, activation="silu",
                           residual=True)),
        packed_task(conv2d(2, 13, 13, 40, 40, 3, stride=2, padding=1, groups=40, bias=True)),
    ]
    vectors = {  # tiles of two and three vectors of 8 lanes, and one across the whole row
        tasks[0].name: [((1,), (7, 2), (1, 7, 2), (1, 2, 16), (3,), (3,), (1, 1)),
                        ((1,), (2, 7), (2, 1, 7), (2, 1, 16), (3,), (3,), (1, 1))],
        tasks[1].name: [((1,), (5, 1), (1, 1, 4), (1, 1, 24), (5,), (5,), (1, 1))],
    }
    assert all(is_depthwise(task) for task in tasks)
    _check_conv2d_kernels("conv2d-cpu-v5", tasks, vectors, np.random.default_rng(5))


@pytest.mark.tvm
@pytest.mark.parametrize("version", ["v3", "v4", "v5"])
def test_kernels_are_correct_on_tiles_of_three_and_six_vectors(version):
    """The tiles v2 keeps out of the registers (48 and 96 columns, 24 and 40 of an odd extent) with a bias and
    activation, a transposed batch matmul and a convolution (conv2d has no v4, batch matmul no v5): each written out
    as whole vectors packs, computes and applies its epilogue right (the workload's check against the float64
    reference)."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend

    cases = [
        (packed_task(dense(8, 40, 192, bias=True, activation="gelu")),
         [((1, 2, 4), (1, 40), (2, 1, 96)), ((2, 1, 4), (2, 20), (1, 4, 48))]),
        (packed_task(dense(7, 33, 120, bias=True)),
         [((1, 1, 7), (3, 11), (1, 5, 24)), ((7, 1, 1), (1, 33), (3, 1, 40))]),
        (packed_task(batch_matmul(2, 8, 16, 96, transpose_a=True, transpose_b=True)),
         [((2,), (1, 2, 4), (1, 16), (1, 1, 96))]),
        (packed_task(conv2d(1, 6, 6, 8, 96, 3, padding=1, bias=True, activation="relu")),
         [((1,), (2, 3), (1, 2, 3), (1, 1, 96), (3,), (3,), (2, 4)),
          ((1,), (1, 6), (2, 1, 3), (2, 1, 48), (3,), (3,), (1, 8))]),
    ]
    protocol = {"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1}
    for task, configs in cases:
        if f"{task.op}-cpu-{version}" not in TEMPLATES:
            continue
        backend = TVMBackend(template=f"{task.op}-cpu-{version}", protocol=protocol)
        try:
            for config, result in zip(configs, backend.measure(task, [TileSpace(task).validate(c) for c in configs])):
                assert result.ok, (task.name, config, result.error)
        finally:
            backend.close()
