"""Winograd's F(m x m, 3 x 3) (schedule_gym.models.fixed.winograd): the transforms against a float64 convolution on
odd image sizes, the fold on a module (which convolutions it takes, the model against PyTorch), bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from schedule_gym import conv2d
from schedule_gym.models.fixed.winograd import (MIN_TILES, fold_winograd, foldable_task, input_transform, matrices,
                                                output_transform, weight_transform)

pytest.importorskip("tvm")


def conv3x3(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, relu: bool) -> np.ndarray:
    """float64 NHWC/HWIO 3x3 convolution, padding 1, of one image ``[h, w, c]``."""
    xt = torch.from_numpy(x.astype(np.float64)).permute(2, 0, 1)[None]
    wt = torch.from_numpy(weights.astype(np.float64)).permute(3, 2, 0, 1)
    y = nn.functional.conv2d(xt, wt, torch.from_numpy(bias.astype(np.float64)), padding=1)[0].permute(1, 2, 0)
    return (y.relu() if relu else y).numpy()


def run_winograd(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, m: int, relu: bool,
                 output_kernel=None) -> np.ndarray:
    import tvm

    h, w, c = x.shape
    k = weights.shape[3]
    alpha, tiles = m + 2, -(-h // m) * -(-w // m)
    dev = tvm.cpu()
    transform_in = tvm.compile(tvm.IRModule({"main": input_transform(h, w, c, m).with_attr("global_symbol", "main")}), target="llvm")["main"]
    transform_out = tvm.compile(tvm.IRModule({"main": (output_kernel or output_transform(h, w, k, m, relu)).with_attr("global_symbol", "main")}),
                                target="llvm")["main"]
    v = tvm.runtime.tensor(np.zeros((alpha * alpha, tiles, c), np.float32), dev)
    transform_in(tvm.runtime.tensor(x, dev), v)
    product = np.matmul(v.numpy(), weight_transform(weights, m))  # the GEMM the fold leaves to a batch_matmul task
    y = tvm.runtime.tensor(np.zeros((h, w, k), np.float32), dev)
    transform_out(tvm.runtime.tensor(product.astype(np.float32), dev), tvm.runtime.tensor(bias, dev), y)
    return y.numpy()


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("h, w, relu", [(13, 10, True), (8, 8, False), (1, 5, True)])
def test_the_three_steps_equal_a_float64_convolution(m, h, w, relu):
    rng = np.random.default_rng(m * 100 + h)
    c, k = 16, 32
    x = rng.uniform(-1, 1, (h, w, c)).astype(np.float32)
    weights = (rng.uniform(-1, 1, (3, 3, c, k)) / 12).astype(np.float32)
    bias = rng.uniform(-1, 1, k).astype(np.float32)
    exact = conv3x3(x, weights, bias, relu)
    error = np.abs(run_winograd(x, weights, bias, m, relu) - exact).max()
    assert error <= 1e-5 * np.abs(exact).max(), error  # the models' check allows 1e-4
    if relu:  # the same transforms without the ReLU are far outside: the check rejects a wrong epilogue
        wrong = run_winograd(x, weights, bias, m, relu, output_kernel=output_transform(h, w, k, m, relu=False))
        assert np.abs(wrong - exact).max() > 1e-2 * np.abs(exact).max()


def test_the_matrices_are_tvms_and_compute_a_correlation():
    a, b, g = matrices(4)
    assert a.shape == (6, 4) and b.shape == (6, 6) and g.shape == (6, 3)
    rng = np.random.default_rng(0)
    d, f = rng.normal(size=6), rng.normal(size=3)
    y = a.T @ ((g @ f) * (b.T @ d))
    assert np.allclose(y, [d[i:i + 3] @ f for i in range(4)])


class Net(nn.Module):
    """3x3 convolutions the fold takes (with a folded batch norm and ReLU, without a bias, with a residual sum)
    and ones it leaves (a stride of 2, 1x1, groups, 8 channels, no padding)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.b = nn.Conv2d(32, 32, 3, padding=1, bias=False)
        self.c = nn.Conv2d(32, 16, 3, padding=1)
        self.strided = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.pointwise = nn.Conv2d(16, 16, 1)
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=2)
        self.narrow = nn.Conv2d(16, 8, 3, padding=1)
        self.unpadded = nn.Conv2d(8, 16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.a(x)))
        y = self.b(y) + y
        y = self.c(torch.relu(y))
        y = self.grouped(self.pointwise(self.strided(y)))
        return self.unpadded(self.narrow(y))


def test_the_fold_takes_the_eligible_convolutions_and_the_model_equals_pytorch():
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.mapping import _left_ops, map_model
    from schedule_gym.models.pipeline import check_outputs, prepare_model, torch_outputs

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2.0)
    loaded = prepare_model(net, (torch.randn(1, 16, 16, 13),))  # 4 x 4 output tiles
    folded, counts = fold_winograd(loaded.canonical)
    assert sum(counts.values()) == 3 and counts["conv2d3x3"] == 1  # b has no bias; a and c have one
    assert _left_ops(folded["main"])["relax.nn.conv2d"] == 5  # strided, pointwise, grouped, narrow, unpadded
    unfolded = map_model(loaded.canonical)  # the same convolutions as tasks: foldable_task names the folded ones
    assert sorted(foldable_task(t.task) for t in unfolded.tasks if foldable_task(t.task)) == [
        (16, 13, 16, 32), (16, 13, 32, 16), (16, 13, 32, 32)]
    assert sum(t.weight for t in unfolded.tasks if t.task.op == "conv2d" and foldable_task(t.task) is None) == 5
    mapped = map_model(loaded.canonical, winograd=True)
    assert mapped.report.winograd == counts
    assert sorted(t.task.name for t in mapped.tasks if t.task.op == "batch_matmul") == [
        "bmmNN-36x16x16x32", "bmmNN-36x16x32x16", "bmmNN-36x16x32x32"]
    assert any(line.startswith("winograd") for line in mapped.report.lines())
    executable = compile_model(schedule_kernels(mapped.packed(), {}), host_llvm_target(2))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None
    assert fold_winograd(fold_winograd(loaded.canonical)[0])[1] == {}  # nothing eligible is left


def test_maps_of_fewer_than_min_tiles_output_tiles_are_left_direct():
    """At 7 x 7 (4 tiles of 4 x 4) each transformed weight matrix serves 4 rows: ResNet-50's last 3x3 layer ran
    Winograd's steps slower than its direct kernel; 14 x 14 (16 tiles) and larger are folded. A model with both."""
    from schedule_gym.models.pipeline import prepare_model

    assert MIN_TILES == 16
    assert foldable_task(conv2d(1, 7, 7, 512, 512, 3, padding=1, layout="NHWC")) is None
    assert foldable_task(conv2d(1, 13, 13, 16, 16, 3, padding=1, layout="NHWC")) == (13, 13, 16, 16)  # 4 x 4 tiles
    assert foldable_task(conv2d(1, 12, 13, 16, 16, 3, padding=1, layout="NHWC")) is None  # 3 x 4 tiles
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1)).eval()
    loaded = prepare_model(net, (torch.randn(1, 16, 16, 16),))
    folded, counts = fold_winograd(loaded.canonical)
    assert counts == {"conv2d3x3+bias": 1}  # the 16 x 16 map's; the 8 x 8 one (4 tiles) stays a convolution


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="output tile m must be 2 to 6, got 7"):
        matrices(7)
    with pytest.raises(ValueError, match="channels a multiple of 16, got h=4, w=4, channels=10"):
        input_transform(4, 4, 10)
    with pytest.raises(ValueError, match=r"3x3 weights \[3, 3, C, K\], got \(1, 1, 16, 16\)"):
        weight_transform(np.zeros((1, 1, 16, 16), np.float32))


def test_compile_torch_takes_winograd_and_its_model_equals_pytorch():
    from schedule_gym.models.compiled import compile_torch

    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 16, 3, padding=1)).eval()
    x = torch.randn(1, 16, 13, 13)
    compiled = compile_torch(net, x, budget=0, backend="mock", packed=True, winograd=True, name="two-convs")
    assert compiled.mapped.report.winograd == {"conv2d3x3+bias+relu": 1, "conv2d3x3+bias": 1}
    assert {t.task.op for t in compiled.mapped.tasks} == {"batch_matmul"}
    with torch.no_grad():
        expected = net(x).numpy()
    assert np.abs(compiled(x).numpy() - expected).max() <= 1e-4 * np.abs(expected).max()
