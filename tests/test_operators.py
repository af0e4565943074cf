"""Operators beyond GEMM: builders, exact space counts, footprints, suites, references, checks, agents."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from schedule_gym.errors import TaskError
from schedule_gym.agents import make_agent
from schedule_gym.backends import MockBackend
from schedule_gym.envs import TilingEnv
from schedule_gym.loopnest import LoopNest, axis_extent
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import SUITES, batch_matmul, conv2d, dense, gemm, get_suite, get_task
from schedule_gym.operators import dot_tolerance, get_workload

SMALL_TASKS = [
    conv2d(1, 6, 6, 4, 6, 3, padding=1, splits=(1, 2, 2, 2, 1, 1, 2)),
    conv2d(2, 7, 5, 4, 4, (3, 1), stride=2, padding=(1, 0), dilation=(2, 1), groups=2, layout="NCHW",
           splits=(2, 2, 2, 2, 2, 1, 1)),
    batch_matmul(3, 6, 4, 10, transpose_b=True, splits=(2, 2, 2, 2)),
    dense(6, 9, 4, activation="gelu", splits=(2, 2, 3)),
    conv2d(1, 5, 6, 4, 8, 3, padding=1, bias=True, activation="relu", residual=True, splits=(1, 1, 2, 2, 1, 1, 2)),
]


def divisor_tuples(extent: int, parts: int) -> list[tuple[int, ...]]:
    divs = [d for d in range(1, extent + 1) if extent % d == 0]
    return [t for t in itertools.product(divs, repeat=parts) if math.prod(t) == extent]


@pytest.mark.parametrize("task", SMALL_TASKS, ids=lambda t: t.name)
def test_space_counts_equal_brute_force(task) -> None:
    space = TileSpace(task)
    brute = list(itertools.product(*(divisor_tuples(d.extent, d.splits) for d in task.dims)))
    assert space.size == len(brute) == sum(1 for _ in space)
    assert {space.config(i) for i in range(space.size)} == set(brute)


def test_conv2d_dims_operands_and_default_splits_follow_ssrsrs() -> None:
    t = conv2d(1, 56, 56, 64, 64, 3, padding=1)
    assert t.dim_names == ("n", "h", "w", "co", "rh", "rw", "rc") and t.splits == (4, 4, 4, 4, 2, 2, 2)
    assert [d.extent for d in t.dims] == [1, 56, 56, 64, 3, 3, 64]
    assert t.flops == 2 * 56 * 56 * 64 * 3 * 3 * 64
    nest = LoopNest.cpu(t)
    # MetaSchedule's "SSRSRS": S0 S1 R0 S2 R1 S3, the innermost co vectorised, w unrolled
    assert nest.describe().startswith("n0 h0 w0 co0 n1 h1 w1 co1 | rh0 rw0 rc0 n2 h2 w2 co2 rh1 rw1 rc1 n3 h3")
    assert nest.describe().endswith("w3(unroll) co3(vector)")
    nchw = conv2d(1, 56, 56, 64, 64, 3, padding=1, layout="NCHW")
    assert nchw.dim_names == ("n", "co", "h", "w", "rc", "rh", "rw") and nchw.loop_order[-1] == ("w", 3)
    assert [o.describe() for o in nchw.operands] == ["I[n, rc, h + rh, w + rw]", "W[co, rc, rh, rw]", "O[n, co, h, w]"]
    grouped = conv2d(1, 8, 8, 8, 12, 3, stride=2, dilation=2, padding=2, groups=4)
    assert grouped.operands[0].describe() == "I[n, h*2 + rh*2, w*2 + rw*2, (co//3)*2 + rc]"
    assert grouped.dim("rc").extent == 2


def test_input_footprint_formula_counts_the_elements_a_tile_reads() -> None:
    """The shared footprint formula against brute force: the input rows/channels a tile really reads."""
    rng = np.random.default_rng(0)
    for stride, dil, cpg_in, cpg_out in [(1, 1, 4, 8), (2, 1, 1, 1), (2, 3, 2, 3), (3, 2, 4, 2)]:
        row = (("h", stride), ("rh", dil))
        for _ in range(20):
            th, trh = int(rng.integers(1, 6)), int(rng.integers(1, 4))
            touched = {h * stride + r * dil for h in range(th) for r in range(trh)}
            from schedule_gym.tasks import Term

            box, distinct = axis_extent(tuple(Term(d, s) for d, s in row), {"h": th, "rh": trh}, np.ceil, np.minimum)
            assert distinct == len(touched) or (distinct >= len(touched) and box == max(touched) + 1)
            assert box == max(touched) + 1
        channel = (Term("co", cpg_in, cpg_out), Term("rc"))
        for tco in range(1, 3 * cpg_out + 1):
            touched = {(c // cpg_out) * cpg_in + r for c in range(tco) for r in range(cpg_in)}
            box, distinct = axis_extent(channel, {"co": tco, "rc": cpg_in}, np.ceil, np.minimum)
            assert distinct == len(touched) and box == max(touched) + 1


@pytest.mark.parametrize(
    "build, text",
    [
        (lambda: conv2d(1, 4, 4, 8, 8, 7), r"the 7x7 kernel \(dilation 1x1\) is larger than the 4x4 input padded by 0x0: the output would be -2x-2"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, stride=0), r"stride must be positive integers, got 0"),
        (lambda: conv2d(1, 8, 8, 6, 8, 3, groups=4), "groups=4 must divide both input channels ci=6 and output channels co=8"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, padding=-1), "padding must be non-negative integers, got -1"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, layout="NWHC"), "layout must be one of"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, dilation=(1, 2, 3)), r"dilation must be an int or a pair of ints"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, splits=(4, 4)), r"conv2d splits \(n h w co rh rw rc\) must be 7 positive"),
        (lambda: conv2d(1, 8, 8, 8, 8, 3, dtype="int8"), "dtype must be one of"),
        (lambda: batch_matmul(2, 4, 4, 4, transpose_b="yes"), "transpose_b must be a bool, got 'yes'"),
        (lambda: dense(4, 4, 4, activation="swish"), "activation must be one of"),
        (lambda: get_task("resnet51/conv1"), "unknown suite 'resnet51' in task name 'resnet51/conv1'"),
        (lambda: get_task("resnet50/conv99"), "unknown layer 'resnet50/conv99' of suite 'resnet50'; its layers: conv0"),
        (lambda: get_suite("vgg16"), "unknown suite 'vgg16'; known suites: resnet50"),
    ],
)
def test_bad_operator_input_is_precise(build, text) -> None:
    with pytest.raises((ValueError, TypeError), match=text):
        build()


def test_suites_hold_the_networks_layers_with_their_weights() -> None:
    r50 = get_suite("resnet50")
    convs = [t for t in r50 if t.task.op == "conv2d"]
    assert len(convs) == 20 and sum(t.weight for t in convs) == 53  # ResNet-50 v1: 53 convolutions
    assert [t.task.dim("rh").extent for t in convs].count(3) == 4  # one 3x3 shape per stage
    assert len(get_suite("resnet18")) == 14 and sum(t.weight for t in get_suite("resnet18")) == 23  # 2 pools
    mobilenet = get_suite("mobilenetv2")
    depthwise = [t for t in mobilenet if t.task.op == "conv2d" and t.task.param("groups") > 1]
    assert depthwise and all(t.task.dim("rc").extent == 1 for t in depthwise)
    assert sum(t.weight for t in depthwise) == 17  # one depthwise conv per inverted residual block
    bert = {t.name: t for t in get_suite("bert-base")}
    assert bert["bert-base/attn-qk"].task.param("transpose_b") and bert["bert-base/ffn-up"].task.param("activation") == "gelu"
    names = [t.name for t in get_suite("metaschedule")]
    assert {n.split("/")[1].split("-")[0] for n in names} == {"C2D", "GMM", "DEP", "GRP", "DIL"}
    for suite in SUITES:
        for entry in get_suite(suite):
            assert get_task(entry.name) == entry.task and entry.weight >= 1


def test_every_builder_name_resolves_to_its_task() -> None:
    tasks = [conv2d(1, 14, 14, 16, 32, 3, padding=1), batch_matmul(4, 16, 32, 24, transpose_b=True),
             conv2d(2, 15, 13, 6, 8, (7, 5), stride=2, padding=(3, 2), dilation=(1, 2), groups=2, layout="NCHW"),
             dense(7, 33, 10, bias=False, activation="relu"), dense(8, 8, 8), gemm(3, 5, 7),
             conv2d(1, 8, 8, 4, 8, 3, padding=1, layout="NCHW", bias=True, activation="relu6"),
             conv2d(1, 8, 8, 4, 8, 1, activation="relu"), dense(4, 4, 4, activation="relu6"),
             conv2d(1, 8, 8, 4, 8, 1, bias=True, residual=True, activation="relu"),
             conv2d(1, 8, 8, 4, 8, 3, padding=1, residual=True, layout="NCHW")]
    for task in tasks:
        assert get_task(task.name) == task


def test_conv2d_reference_equals_torch() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    for task in [conv2d(2, 9, 7, 6, 4, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
                 conv2d(1, 8, 8, 6, 6, 3, padding=1, groups=6, layout="NCHW"), conv2d(1, 5, 5, 3, 5, 1)]:
        workload = get_workload(task.op)
        inp, wgt = [x.astype(np.float64) for x in workload.inputs(task)]
        ours = workload.compute(task, [inp, wgt])
        nchw = task.param("layout") == "NCHW"
        ti = torch.from_numpy(inp if nchw else inp.transpose(0, 3, 1, 2).copy())
        tw = torch.from_numpy(wgt if nchw else wgt.transpose(3, 2, 0, 1).copy())
        ref = F.conv2d(ti, tw, stride=task.param("stride"), padding=task.param("padding"),
                       dilation=task.param("dilation"), groups=task.param("groups")).numpy()
        np.testing.assert_allclose(ours, ref if nchw else ref.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_residual_epilogue_adds_a_tensor_of_the_outputs_shape_before_the_activation(layout) -> None:
    """``relu(conv2d(I, W) + bias + R)``, a residual block's end: equal to PyTorch's, and the check rejects the
    same kernel without the residual."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    task = conv2d(1, 7, 6, 4, 8, 3, padding=1, layout=layout, bias=True, activation="relu", residual=True)
    assert task.name.endswith("+bias+res+relu") and [o.name for o in task.operands] == ["I", "W", "bias", "R", "O"]
    workload = get_workload(task.op)
    inputs = workload.inputs(task)
    assert [x.shape for x in inputs][3] == workload.output_shape(task)
    inp, wgt, bias, res = [torch.from_numpy(x.astype(np.float64)) for x in inputs]
    nhwc = layout == "NHWC"
    y = F.conv2d(inp.permute(0, 3, 1, 2) if nhwc else inp, wgt.permute(3, 2, 0, 1) if nhwc else wgt, bias, padding=1)
    ref = torch.relu(y.permute(0, 2, 3, 1) + res if nhwc else y + res).numpy()
    np.testing.assert_allclose(workload.compute(task, [x.astype(np.float64) for x in inputs]), ref, rtol=1e-12,
                               atol=1e-12)
    expected, tol = workload.reference(task, inputs)
    assert workload.check(task, ref.astype(np.float32), expected, tol) is None
    without = dataclasses.replace(task, params=tuple(p for p in task.params if p[0] != "residual"))
    forgot = workload.compute(without, [x.astype(np.float64) for x in inputs[:3]])
    assert workload.check(task, forgot.astype(np.float32), expected, tol) is not None
    with pytest.raises(TypeError, match="residual must be a bool"):
        conv2d(1, 7, 6, 4, 8, 3, residual="yes")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("task", [gemm(32, 256, 24), gemm(16, 24, 8), *SMALL_TASKS, get_task("bert-base/attn-qk")],
                         ids=lambda t: t.name)
def test_the_check_rejects_wrong_outputs_and_accepts_rounding_or_refuses_the_dtype(task, dtype) -> None:
    """Every tolerance either rejects zero, negated, scaled, shifted, transposed and NaN outputs while
    accepting a differently rounded right one, or the task is refused up front (TaskError)."""
    task = dataclasses.replace(task, dtype=dtype)
    workload = get_workload(task.op)
    try:
        workload.check_is_sound(task)
    except TaskError as exc:
        assert dtype == "float16" and "cannot be checked soundly" in str(exc)
        return
    inputs = workload.inputs(task)
    expected, tol = workload.reference(task, inputs)
    # another rounding: computed in the task's dtype, then one ulp off
    computed = workload.compute(task, [x.astype(dtype) for x in inputs]).astype(dtype)
    computed = np.nextafter(computed, np.array(np.inf, dtype=dtype))
    assert workload.check(task, computed, expected, tol) is None
    scale = 2.0 if dtype == "float16" else 1.01  # float16's bound is a large fraction of the output
    wrong = {
        "zero": np.zeros_like(expected), "negated": -expected, "scaled": scale * expected,
        "shifted": np.roll(expected, 1, axis=-1), "transposed": np.swapaxes(expected, -1, -2) if expected.shape[-1] == expected.shape[-2] else expected + 1,
        "nan": np.where(np.arange(expected.size).reshape(expected.shape) == 0, np.nan, expected),
    }
    for what, out in wrong.items():
        assert workload.check(task, out.astype(dtype), expected, tol) is not None, what


def test_float16_long_reductions_are_refused_not_checked_loosely() -> None:
    with pytest.raises(ValueError, match="a float16 kernel summing 4096 products cannot be checked soundly"):
        dot_tolerance(4096, "float16", np.ones(3))
    assert dot_tolerance(16, "float16", np.ones(1))[0] < 0.01


@pytest.mark.parametrize("agent", ["random", "gbfs", "na2c", "felix", "nn", "xgb"])
@pytest.mark.parametrize(
    "task", [get_task("resnet50/conv2"), get_task("bert-base/attn-qk"), get_task("bert-base/ffn-up"),
             conv2d(1, 28, 28, 32, 32, 3, padding=1, groups=32, layout="NCHW")], ids=lambda t: t.name)
def test_agents_tune_every_operator_on_the_mock(agent, task) -> None:
    params = {"felix": {"n_steps": 10, "n_seeds": 4}}.get(agent, {})
    env = TilingEnv(task)
    result = make_agent(agent, seed=0, **params).run(env, 24)
    assert result.num_measurements == 24 and result.best_latency_s is not None
    assert result.best_latency_s <= result.s0_latency_s


def test_mock_scores_a_resnet_layer_sensibly() -> None:
    """On a 3x3 ResNet layer the mock's best configs vectorise the output channels and use both cores."""
    task = get_task("resnet50/conv16")  # 7x7x512, 3x3: 1.6 M configs
    backend = MockBackend()
    space = backend.space(task)
    rng = np.random.default_rng(0)
    idx = space.sample_indices(rng, 20000)
    lat = backend.model_latency_s(task, idx)
    best = space.config(int(idx[np.argmin(lat)]))
    co_inner = best[task.dim_names.index("co")][-1]
    assert co_inner % 8 == 0  # whole vectors
    gflops = task.flops / lat * 1e-9
    assert 5 * np.median(gflops) < gflops.max() < backend.profile.peak_gflops


# -------------------------------------------------------------------------------- real kernels
REAL_TASKS = [
    conv2d(1, 13, 11, 8, 12, 3, padding=1),  # odd sizes
    conv2d(2, 15, 13, 6, 8, 7, stride=2, padding=3),  # 7x7 stride 2, batch 2
    conv2d(1, 9, 9, 8, 16, 1),  # 1x1
    conv2d(1, 12, 12, 8, 8, 3, dilation=2, padding=2),
    conv2d(1, 10, 10, 12, 12, 3, stride=2, padding=1, groups=12),  # depthwise
    conv2d(1, 9, 9, 8, 12, (3, 5), padding=(1, 2), groups=4, layout="NCHW"),  # grouped, NCHW, 3x5
    # epilogues, as a model's graph has them once batch norm is folded (MobileNet's ReLU6, depthwise)
    conv2d(1, 10, 10, 8, 8, 3, padding=1, groups=8, layout="NCHW", bias=True, activation="relu6"),
    conv2d(1, 7, 7, 6, 10, 1, bias=True, activation="gelu"),
    conv2d(1, 9, 9, 8, 8, 5, stride=2, padding=2, groups=8, bias=True, activation="silu"),  # EfficientNet's
    conv2d(1, 9, 7, 8, 12, 1, bias=True, activation="relu", residual=True),  # a ResNet bottleneck's end
    conv2d(1, 8, 8, 8, 8, 3, padding=1, layout="NCHW", residual=True),
    batch_matmul(3, 20, 24, 12, transpose_a=True),
    batch_matmul(4, 16, 32, 24, transpose_b=True),
    dense(12, 40, 24, activation="gelu"),
    dense(9, 40, 24, activation="gelu_tanh"),  # GPT-2's
    dense(7, 33, 10, bias=False, activation="relu"),
]


@pytest.mark.tvm
@pytest.mark.parametrize("task", REAL_TASKS, ids=lambda t: t.name)
def test_random_real_configs_of_every_operator_are_correct(task, tvm_backend) -> None:
    """Every kernel is checked against the float64 reference in the runner: an error result would say why."""
    space = TileSpace(task)
    rng = np.random.default_rng(1)
    configs = [space.initial_config()] + [space.config(int(i)) for i in space.sample_indices(rng, 3)]
    for result in tvm_backend.measure(task, configs):
        assert result.ok, (result.config, result.error)
    assert tvm_backend.record_context(task)[1] == f"{task.op}-cpu-v1"


@pytest.mark.tvm
@pytest.mark.parametrize("agent", ["random", "gbfs", "xgb"])
def test_agents_tune_a_real_conv2d(agent, tvm_backend) -> None:
    env = TilingEnv(conv2d(1, 14, 14, 16, 16, 3, padding=1), backend=tvm_backend)
    result = make_agent(agent, seed=0).run(env, 8)
    assert result.num_measurements == 8 and all(r.error_kind is None for r in result.history)
    assert result.best_latency_s < result.s0_latency_s


@pytest.mark.tvm
def test_gelu_uses_a_vectorisable_erf_within_the_checks_tolerance():
    """GELU's erf is a rational polynomial (TVM's topi.fast_erf coefficients): within 5e-7 of the exact erf,
    and the compiled dense + GELU kernel calls no scalar ``erff``."""
    pytest.importorskip("tvm")
    import math

    import tvm
    from tvm import te

    from schedule_gym.templates import template_of
    from schedule_gym.operators.epilogue import fast_erf_expr

    x = te.placeholder((24001,), "float32", name="x")
    y = te.compute(x.shape, lambda i: fast_erf_expr(x[i], "float32"), name="y")
    lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([x, y])}), target="llvm")
    xs = np.linspace(-6, 6, 24001).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib["main"](tvm.runtime.tensor(xs), out)
    exact = np.array([math.erf(float(v)) for v in xs])
    assert np.abs(out.numpy() - exact).max() < 5e-7
    task = dense(16, 8, 32, activation="gelu")
    mod = template_of(task, "llvm").schedule(task, TileSpace(task).initial_config())
    kernel = tvm.compile(mod, target="llvm")
    source = kernel.mod.inspect_source("ll") if not kernel.mod.imports else kernel.mod.imports[0].inspect_source("ll")
    assert "@erff" not in source


@pytest.mark.tvm
def test_gelu_tanh_uses_a_vectorisable_tanh_that_the_check_tells_from_the_erf_form():
    """The tanh form's tanh is a rational polynomial (TVM's topi.fast_tanh coefficients): within 3.3e-7 of the exact
    tanh and exactly 1 past float32's saturation; the compiled dense + GELU (tanh) kernel calls no scalar ``tanhf``;
    and the erf form, 1e-3 away at most, is far outside the task's tolerance."""
    import tvm
    from tvm import te

    from schedule_gym.operators.epilogue import fast_tanh_expr
    from schedule_gym.templates import template_of

    xs = np.linspace(-12, 12, 48001).astype("float32")
    x = te.placeholder(xs.shape, "float32", name="x")
    y = te.compute(x.shape, lambda i: fast_tanh_expr(x[i], "float32"), name="y")
    lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([x, y])}), target="llvm")
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib["main"](tvm.runtime.tensor(xs), out)
    got = out.numpy().astype(np.float64)
    assert np.abs(got - np.tanh(xs.astype(np.float64))).max() < 3.3e-7
    assert np.all(np.abs(got[np.abs(xs) >= 8]) == 1.0)
    task = dense(16, 8, 32, activation="gelu_tanh")
    kernel = tvm.compile(template_of(task, "llvm").schedule(task, TileSpace(task).initial_config()), target="llvm")
    source = kernel.mod.inspect_source("ll") if not kernel.mod.imports else kernel.mod.imports[0].inspect_source("ll")
    assert "@tanhf" not in source
    workload = get_workload("dense")
    inputs = workload.inputs(task)
    expected, tolerance = workload.reference(task, inputs)
    erf_form, _ = workload.reference(dense(16, 8, 32, activation="gelu"), inputs)
    assert "wrong result" in workload.check(task, erf_form.astype(np.float32), expected, tolerance)
    assert workload.check(task, expected.astype(np.float32), expected, tolerance) is None


@pytest.mark.tvm
def test_silu_uses_a_vectorisable_exp_within_the_checks_tolerance():
    """SiLU's exponential is TVM's fast_exp polynomial with a two-part ln 2: within 1.5 u of the exact exp on
    [-87, 87], SiLU within 2 |x| u on [-300, 300] (the bound the check allows for), and the compiled conv2d + SiLU
    kernel calls no scalar ``expf``."""
    pytest.importorskip("tvm")
    import tvm
    from tvm import te

    from schedule_gym.operators.epilogue import fast_exp_expr
    from schedule_gym.templates import template_of

    u = float(np.finfo(np.float32).eps) / 2
    for xs in (np.linspace(-87, 87, 20001, dtype=np.float32), np.linspace(-300, 300, 6001, dtype=np.float32)):
        x = te.placeholder(xs.shape, "float32", name="x")
        e = te.compute(x.shape, lambda i: fast_exp_expr(x[i], "float32"), name="e")
        silu = te.compute(x.shape, lambda i: x[i] / (te.const(1.0, "float32") + fast_exp_expr(-x[i], "float32")),
                          name="silu")
        lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([x, e, silu])}), target="llvm")
        out_e, out_silu = tvm.runtime.tensor(np.zeros_like(xs)), tvm.runtime.tensor(np.zeros_like(xs))
        lib["main"](tvm.runtime.tensor(xs), out_e, out_silu)
        x64 = xs.astype(np.float64)
        exact = x64 / (1.0 + np.exp(-x64))
        assert np.all(np.abs(out_silu.numpy() - exact) <= 2 * u * np.abs(x64) + 1e-30)
        if xs[0] == -87:
            assert np.all(np.abs(out_e.numpy() / np.exp(x64) - 1.0) <= 1.5 * u)
    with pytest.raises(ValueError, match="float32 only"):
        fast_exp_expr(te.placeholder((2,), "float64", name="y")[0], "float64")
    task = conv2d(1, 6, 6, 4, 8, 3, padding=1, bias=True, activation="silu")
    kernel = tvm.compile(template_of(task, "llvm").schedule(task, TileSpace(task).initial_config()), target="llvm")
    source = kernel.mod.inspect_source("ll") if not kernel.mod.imports else kernel.mod.imports[0].inspect_source("ll")
    assert "@expf" not in source
