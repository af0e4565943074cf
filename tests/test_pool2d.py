"""2-D pooling, the operator added as one module (schedule_gym/operators/pool2d.py) and one registry line: its
tasks and names, its reference against PyTorch, a check that is exact for max and provably tight for average
pooling, the mock, the environment, the suites, real kernels (CPU and CUDA builds) and the model mapping."""

from __future__ import annotations

import math
import shutil

import gymnasium
import numpy as np
import pytest

from schedule_gym.agents import make_agent
from schedule_gym.backends import MockBackend
from schedule_gym.loopnest import LoopNest
from schedule_gym.operators import get_operator, get_workload
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import V0_OPERATORS, get_suite, get_task, pool2d

POOL = get_operator("pool2d")
#: max and average, both layouts, padding, strides other than the kernel, a rectangular window, a global pool
TASKS = [
    pool2d(1, 9, 11, 8, 3, stride=2, padding=1),
    pool2d(1, 9, 11, 8, 3, stride=2, padding=1, kind="avg"),
    pool2d(2, 8, 7, 5, (3, 2), stride=1, padding=(1, 1), kind="avg", layout="NCHW"),
    pool2d(2, 8, 7, 5, (2, 3), stride=(2, 1), padding=(0, 1), layout="NCHW"),
    pool2d(1, 7, 7, 16, 7, kind="avg"),
]


def test_a_pool_is_a_task_of_one_operation_per_point():
    t = pool2d(1, 112, 112, 64, 3, stride=2, padding=1)
    assert t.dim_names == ("n", "h", "w", "c", "rh", "rw") and t.splits == (4, 4, 4, 4, 2, 2)
    assert t.extents == (1, 56, 56, 64, 3, 3) and [d.reduction for d in t.dims] == [False] * 4 + [True] * 2
    assert t.flops == 56 * 56 * 64 * 9 and t.ops_per_point == 1 == POOL.ops_per_point
    assert LoopNest.cpu(t).describe().endswith("w3(unroll) c3(vector)")  # channels innermost, vectorised
    nchw = pool2d(1, 8, 8, 4, 2, layout="NCHW")
    assert nchw.dim_names == ("n", "c", "h", "w", "rh", "rw") and nchw.loop_order[-1] == ("w", 3)
    assert [o.describe() for o in nchw.operands] == ["I[n, c, h*2 + rh, w*2 + rw]", "O[n, c, h, w]"]
    glob = pool2d(1, 7, 7, 2048, 7, kind="avg")  # global average pooling: stride defaults to the kernel
    assert glob.name == "pool2d-avg-1x7x7x2048-k7-s7-p0" and glob.extents == (1, 1, 1, 2048, 7, 7)
    # records name the operations per point of a pool (and only of operators not counting two)
    assert t.to_dict()["ops_per_point"] == 1 and type(t).from_dict(t.to_dict()) == t


@pytest.mark.parametrize("task", TASKS + [pool2d(1, 6, 6, 3, (3, 1), stride=(1, 2), padding=(1, 0))], ids=lambda t: t.name)
def test_every_pool_name_resolves_to_its_task(task):
    assert get_task(task.name) == task and POOL.parse_name(task.name) is not None


@pytest.mark.parametrize(
    "build, text",
    [
        (lambda: pool2d(1, 8, 8, 4, 3, padding=2), r"padding 2x2 is more than half the 3x3 kernel \(PyTorch's limit\)"),
        (lambda: pool2d(1, 4, 4, 4, 5), "the 5x5 kernel is larger than the 4x4 input padded by 0x0"),
        (lambda: pool2d(1, 8, 8, 4, 3, kind="min"), r"kind must be one of \('max', 'avg'\), got 'min'"),
        (lambda: pool2d(1, 8, 8, 4, 3, layout="NWHC"), "layout must be one of"),
        (lambda: pool2d(1, 8, 8, 4, 3, stride=0), "stride must be positive integers, got 0"),
        (lambda: pool2d(1, 8, 8, 0, 3), "c must be a positive integer, got 0"),
        (lambda: pool2d(1, 8, 8, 4, 3, splits=(4, 4)), r"pool2d splits \(n h w c rh rw\) must be 6 positive"),
        (lambda: get_task("pool2d-max-1x8x8x4-k3-s2-p1-packed"), "operator 'pool2d' .* has no packed form"),
    ],
)
def test_bad_pool_input_is_precise(build, text):
    with pytest.raises((ValueError, TypeError), match=text):
        build()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_the_reference_is_pytorchs_pooling(task):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    inputs = get_workload("pool2d").inputs(task)
    expected, _ = get_workload("pool2d").reference(task, inputs)
    x = torch.from_numpy(inputs[0].astype(np.float64))
    nchw = x.permute(0, 3, 1, 2) if task.param("layout") == "NHWC" else x
    kernel = (task.dim("rh").extent, task.dim("rw").extent)
    args = dict(kernel_size=kernel, stride=task.param("stride"), padding=task.param("padding"))
    want = F.max_pool2d(nchw, **args) if task.param("kind") == "max" else F.avg_pool2d(nchw, **args)  # count_include_pad
    want = want.permute(0, 2, 3, 1) if task.param("layout") == "NHWC" else want
    np.testing.assert_allclose(expected, want.numpy(), rtol=1e-12, atol=1e-12)
    # the operator's own torch kernel (what reference timings run) computes the same
    out = POOL.torch_kernel(task, [torch.from_numpy(inputs[0])])().numpy()
    out = out.transpose(0, 2, 3, 1) if task.param("layout") == "NHWC" else out
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6)
    if kernel == (task.param("in_hw")[0], task.param("in_hw")[1]) and task.param("kind") == "avg":
        np.testing.assert_allclose(expected.reshape(-1), torch.nn.AdaptiveAvgPool2d(1)(nchw).numpy().reshape(-1))


def _windows(task, x):
    """Every window of ``x`` as ``(n, ho, wo, kh * kw, c)`` (NHWC, zeros in the padding) and, per window, which of
    its elements are inside the input ``(ho, wo, kh * kw)``."""
    (sh, sw), (ph, pw) = task.param("stride"), task.param("padding")
    kh, kw = task.dim("rh").extent, task.dim("rw").extent
    x = x if task.param("layout") == "NHWC" else x.transpose(0, 2, 3, 1)
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    inside = np.pad(np.ones(x.shape[1:3], dtype=bool), ((ph, ph), (pw, pw)))
    ho, wo = task.dim("h").extent, task.dim("w").extent
    win = np.stack([np.stack([padded[:, i * sh : i * sh + kh, j * sw : j * sw + kw, :].reshape(x.shape[0], kh * kw, -1)
                              for j in range(wo)], axis=1) for i in range(ho)], axis=1)
    mask = np.stack([np.stack([inside[i * sh : i * sh + kh, j * sw : j * sw + kw].reshape(-1) for j in range(wo)])
                     for i in range(ho)])
    return win, mask


def _in_layout(task, y):
    """An NHWC ``(n, ho, wo, c)`` result in the task's layout."""
    return y if task.param("layout") == "NHWC" else y.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_max_is_checked_exactly_and_average_within_a_bound_that_rejects_every_wrong_pool(task, dtype):
    """Max pooling returns one of its inputs, so the check asks for equality (one ulp off fails). Average
    pooling's bound (gamma_{K+2} * mean |x|, from the sum's and the scale's roundings) accepts the pool computed
    in the task's dtype in any order, and in float32 and float64 rejects every output a wrong pool gets wrong:
    another divisor, a window missing a term, PyTorch's count_include_pad=False, a shifted window (float16's
    bound is looser than some of those errors, but not than a zero or negated output)."""
    import dataclasses

    task = dataclasses.replace(task, dtype=dtype)
    workload = get_workload("pool2d")
    workload.check_is_sound(task)
    inputs = workload.inputs(task)
    expected, tol = workload.reference(task, inputs)
    if task.param("kind") == "max":
        exact = workload.compute(task, [inputs[0]]).astype(dtype)  # one of the inputs
        assert not tol.any() and workload.check(task, exact, expected, tol) is None
        assert workload.check(task, np.nextafter(exact, np.array(np.inf, dtype=dtype)), expected, tol) is not None
        return
    win, inside = _windows(task, inputs[0].astype(np.float64))
    k = win.shape[3]
    scale = np.array(1.0 / k, dtype=dtype)
    for order in (range(k), reversed(range(k))):  # the sum in the task's dtype, in two orders, then the scale
        acc = np.zeros(win[:, :, :, 0, :].shape, dtype=dtype)
        for t in order:
            acc = (acc + win[:, :, :, t, :].astype(dtype)).astype(dtype)
        assert workload.check(task, _in_layout(task, (acc * scale).astype(dtype)), expected, tol) is None
    total = win.sum(axis=3)
    wrongs = {  # (the wrong pool, the outputs it gets wrong)
        "divisor k - 1": (total / (k - 1), np.ones(inside.shape[:2], dtype=bool)),
        "a term missing": ((total - win[:, :, :, -1, :]) / k, inside[:, :, -1]),
        "count_include_pad=False": (total / inside.sum(axis=2)[None, :, :, None], inside.sum(axis=2) < k),
        "shifted": (np.roll(total / k, 1, axis=2), np.full(inside.shape[:2], inside.shape[1] > 1)),
    }
    for what, (wrong, wrong_at) in wrongs.items():
        if not wrong_at.any():
            continue
        wrong = _in_layout(task, wrong).astype(dtype)
        assert workload.check(task, np.zeros_like(wrong), expected, tol) is not None
        assert workload.check(task, -wrong, expected, tol) is not None
        if dtype != "float16":
            assert workload.check(task, wrong, expected, tol) is not None, what
            wrong_outputs = _in_layout(task, np.broadcast_to(wrong_at[None, :, :, None], total.shape))
            assert (np.abs(wrong - expected) > tol)[wrong_outputs].all(), what


def test_the_mock_scores_pools_and_agents_tune_them():
    backend = MockBackend()
    for task in (TASKS[0], TASKS[2], get_task("resnet50/avgpool")):
        latencies = [r.latency_s for r in backend.measure(task, [TileSpace(task).config(i) for i in range(20)])]
        assert all(math.isfinite(s) and s > 0 for s in latencies) and len(set(latencies)) > 1
    env = gymnasium.make("schedule_gym/Pool2d-v0", h=28, w=28, c=32)
    result = make_agent("gbfs", seed=0).run(env.unwrapped, 30)
    assert result.num_measurements == 30 and result.best_latency_s < result.s0_latency_s


def test_pool2d_v0_is_resnets_max_pool_and_vectorises():
    env = gymnasium.make("schedule_gym/Pool2d-v0")
    assert env.unwrapped.task == pool2d(1, 112, 112, 64, 3, 2, 1) and env.unwrapped.task.key == get_task("resnet50/maxpool").key
    envs = gymnasium.make_vec("schedule_gym/Pool2d-v0", num_envs=2, h=14, w=14, c=8, kind="avg")
    single = gymnasium.make("schedule_gym/Pool2d-v0", h=14, w=14, c=8, kind="avg")
    np.testing.assert_array_equal(envs.reset(seed=0)[0][0], single.reset(seed=0)[0])
    envs.close()


def test_the_suites_hold_the_networks_pools_and_v0_leaves_them_out():
    pools = {s: [(t.name, t.weight) for t in get_suite(s, "pool2d")] for s in ("resnet18", "resnet50", "mobilenetv2")}
    assert pools == {"resnet18": [("resnet18/maxpool", 1), ("resnet18/avgpool", 1)],
                     "resnet50": [("resnet50/maxpool", 1), ("resnet50/avgpool", 1)],
                     "mobilenetv2": [("mobilenetv2/avgpool", 1)]}
    assert get_task("resnet50/maxpool").extents == (1, 56, 56, 64, 3, 3)  # after the 7x7 stride-2 stem
    assert get_task("resnet50/avgpool") == pool2d(1, 7, 7, 2048, 7, kind="avg", name="resnet50/avgpool")
    assert get_task("resnet18/avgpool").dim("c").extent == 512
    assert get_task("mobilenetv2/avgpool") == pool2d(1, 7, 7, 1280, 7, kind="avg", name="mobilenetv2/avgpool")
    for suite in ("resnet18", "resnet50", "mobilenetv2"):
        assert [t.name for t in get_suite(suite, V0_OPERATORS)] == [t.name for t in get_suite(suite) if t.task.op != "pool2d"]


# --------------------------------------------------------------------------------------------- TVM
@pytest.mark.tvm
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_the_cpu_template_builds_pools_and_the_backend_checks_their_outputs(task, tvm_backend):
    space = TileSpace(task)
    rng = np.random.default_rng(2)
    configs = [space.initial_config()] + [space.config(int(i)) for i in space.sample_indices(rng, 3)]
    for result in tvm_backend.measure(task, configs):
        assert result.ok, (result.config, result.error)
    assert tvm_backend.record_context(task)[1] == "pool2d-cpu-v1"


@pytest.mark.tvm
def test_a_wrong_average_kernel_fails_the_check():
    """PyTorch's count_include_pad=False average (dividing each window by its in-bounds elements), compiled with
    TVM and run: the check names the border outputs it gets wrong."""
    import tvm
    from tvm import te, tirx

    task = TASKS[1]
    workload = get_workload("pool2d")
    inp = te.placeholder(workload.input_shapes(task)[0], name="I", dtype="float32")
    (sh, sw), (ph, pw) = task.param("stride"), task.param("padding")
    h, w = task.param("in_hw")
    rh, rw = te.reduce_axis((0, 3), name="rh"), te.reduce_axis((0, 3), name="rw")

    def inside(y, x):
        return tirx.all(y >= 0, y < h, x >= 0, x < w)

    def at(n, y, x, c):
        return tirx.if_then_else(inside(y, x), inp[n, y, x, c], te.const(0.0, "float32"))

    total = te.compute(workload.output_shape(task), lambda n, i, j, c: te.sum(
        at(n, i * sh + rh - ph, j * sw + rw - pw, c), axis=[rh, rw]), name="S")
    count = te.compute(workload.output_shape(task), lambda n, i, j, c: te.sum(
        tirx.if_then_else(inside(i * sh + rh - ph, j * sw + rw - pw), te.const(1.0, "float32"), te.const(0.0, "float32")),
        axis=[rh, rw]), name="N")
    out = te.compute(workload.output_shape(task), lambda *idx: total(*idx) / count(*idx), name="O")
    kernel = tvm.compile(tvm.IRModule({"main": te.create_prim_func([inp, out])}), target={"kind": "llvm"})
    inputs = workload.inputs(task)
    dev = tvm.cpu()
    result = tvm.runtime.empty(workload.output_shape(task), "float32", dev)
    kernel["main"](tvm.runtime.tensor(inputs[0], dev), result)
    expected, tol = workload.reference(task, inputs)
    problem = workload.check(task, result.numpy(), expected, tol)
    border = (2 * (task.dim("h").extent + task.dim("w").extent) - 4) * task.dim("c").extent  # windows over the padding
    assert problem is not None and problem.startswith("wrong result: ")
    assert 0.95 * border <= int(problem.split()[2]) <= border  # the border outputs, and only they


@pytest.mark.tvm
def test_max_pools_build_for_cuda_and_average_pools_are_refused_there():
    tvm = pytest.importorskip("tvm")
    from schedule_gym.templates import template_for

    sm90 = {"kind": "cuda", "arch": "sm_90"}
    template = template_for("pool2d", "cuda")
    for task in (pool2d(1, 14, 14, 32, 3, 2, 1), pool2d(1, 14, 14, 32, 3, 2, 1, layout="NCHW")):
        config = ((1, 1, 1, 1), (1, 7, 1, 1), (1, 7, 1, 1), (1, 2, 16, 1), (3, 1), (1, 3))
        config = config if task.param("layout") == "NHWC" else (config[0], config[3], config[1], config[2], *config[4:])
        executable = tvm.compile(template.schedule(task, config), target=sm90)
        source = executable.mod.imports[0].inspect_source("")
        assert "__global__" in source and "pad_shared" in source
        if shutil.which("nvcc"):
            from schedule_gym.backends.tvm.builder import compile_cuda_source

            with tvm.target.Target(sm90):
                assert len(compile_cuda_source(executable, sm90)) > 0
    with pytest.raises(ValueError, match=r"the CUDA template builds no epilogue: pool2d-avg-1x14x14x32-k3-s2-p1 has one \(O\)"):
        template.check(pool2d(1, 14, 14, 32, 3, 2, 1, kind="avg"), "cuda")


# ------------------------------------------------------------------------------------------ model mapping
def _pooling_model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tvm")
    from torch import nn

    class Pools(nn.Module):
        """Every pool PyTorch models use, and three the pool2d task does not take (left to TVM)."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.max = nn.MaxPool2d(3, stride=2, padding=1)
            self.avg = nn.AvgPool2d(3, stride=1, padding=1)  # count_include_pad=True, PyTorch's default
            self.adaptive = nn.AdaptiveAvgPool2d((2, 2))
            self.fc = nn.Linear(8, 4)
            self.ceil = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            self.exclude_pad = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
            self.uneven = nn.AdaptiveAvgPool2d(3)

        def forward(self, x):
            y = self.max(torch.relu(self.conv(x)))
            head = self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.avg(y), 1), 1))
            return head, self.adaptive(y), y.mean((2, 3)), self.ceil(y), self.exclude_pad(y), self.uneven(y)

    torch.manual_seed(0)
    return Pools().eval(), torch.randn(1, 3, 16, 16)


@pytest.mark.tvm
def test_pytorchs_pools_map_to_pool2d_tasks_and_the_rebuilt_model_equals_pytorch():
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import check_outputs

    model, x = _pooling_model()
    mapped = map_model(import_model(model, (x,)))
    pools = {t.task.name: t.weight for t in mapped.tasks if t.task.op == "pool2d"}
    assert pools == {"pool2d-max-1x16x16x8-k3-s2-p1": 1, "pool2d-avg-1x8x8x8-k3-s1-p1": 1,
                     "pool2d-avg-1x8x8x8-k8-s8-p0": 2,  # adaptive_avg_pool2d(1) and the mean: one kernel, twice
                     "pool2d-avg-1x8x8x8-k4-s4-p0": 1}
    report = mapped.report
    assert report.matched["pool2d-global-mean"] == 2 and report.matched["pool2d-adaptive-avg"] == 1
    refused = {why for (pattern, why) in report.refused if pattern.startswith("pool2d")}
    assert refused == {"ceil_mode: pool2d rounds its output size down, as PyTorch does by default",
                       "average pooling with count_include_pad=False: pool2d divides by the kernel's size",
                       "adaptive pooling of 8x8 to 3x3: windows of unequal sizes"}
    assert {op for op in report.left if "pool" in op} == {"relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                                                          "relax.nn.adaptive_avg_pool2d"}
    reference = [t.detach().numpy() for t in model(x)]
    rng = np.random.default_rng(0)
    random_configs = {t.task.name: TileSpace(t.task).sample(rng) for t in mapped.tasks}
    for configs, untuned in (({}, "s0"), ({}, "mock"), (random_configs, "s0")):
        outputs = run_model(compile_model(schedule_kernels(mapped, configs, untuned), host_llvm_target(1)), (x,))
        assert check_outputs(outputs, reference) is None


@pytest.mark.tvm
def test_a_tiny_zoo_resnet_with_its_max_pool_is_tuned_rebuilt_and_equals_pytorch():
    """tiny-cnn with the stem's 3x3 stride-2 max pool (and its global average pool, a mean): both pools are
    tasks, tuned on real kernels with the rest, and the rebuilt model computes what PyTorch does."""
    pytest.importorskip("torch")
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import check_outputs, torch_outputs
    from schedule_gym.models.tuning import tune_model
    from schedule_gym.models.zoo import build_model

    spec = build_model("tiny-cnn", maxpool=True)
    mapped = map_model(import_model(spec.module, spec.inputs))
    pools = sorted(t.task.name for t in mapped.tasks if t.task.op == "pool2d")
    assert pools == ["pool2d-avg-1x8x8x16-k8-s8-p0", "pool2d-max-1x32x32x8-k3-s2-p1"]
    options = {"num_threads": 1, "protocol": {"min_repeat_ms": 2, "repeat": 1}}
    result = tune_model(mapped, 4 * len(mapped.tasks), agent="random", backend="tvm", backend_options=options,
                        round_measurements=4)
    assert {t.name for t in result.tasks if t.measurements > 0} >= set(pools)
    outputs = run_model(compile_model(schedule_kernels(mapped, result.configs), host_llvm_target(1)), spec.inputs)
    assert check_outputs(outputs, torch_outputs(spec)) is None
