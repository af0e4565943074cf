"""Import, optimization mapping and the rebuilt model (schedule_gym.models: importer, mapping, build)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from torch import nn  # noqa: E402

from schedule_gym.models.build import compile_model, run_model, schedule_kernels  # noqa: E402
from schedule_gym.models.importer import ModelImportError, import_model  # noqa: E402
from schedule_gym.models.mapping import Pattern, PatternError, map_model  # noqa: E402
from schedule_gym.models.pipeline import check_outputs  # noqa: E402
from schedule_gym.spaces import TileSpace  # noqa: E402

pytestmark = pytest.mark.tvm


class ConvNet(nn.Module):
    """conv-bn-relu, a residual conv, a depthwise conv with ReLU6, mean pool, Linear + GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 10)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.relu(self.conv2(y) + y)
        y = nn.functional.relu6(self.dw(y))
        return nn.functional.gelu(self.fc(y.mean((2, 3))))


class Attention(nn.Module):
    """One attention block on [1, 8, 16]: Linear layers on 3-D input, q @ k^T, softmax, @ v."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.up = nn.Linear(d, 32)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads

        def split(y):
            return y.view(b, t, self.heads, hd).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v
        return nn.functional.gelu(self.up(a.permute(0, 2, 1, 3).reshape(b, t, d)))


class GeluTanhMLP(nn.Module):
    """GPT-2's MLP on [1, 8, 16]: Linear layers on 3-D input, the tanh form of GELU between them."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class SiLUNet(nn.Module):
    """EfficientNet's pieces on [1, 3, 10, 10]: convolutions and a Linear followed by SiLU (the frontend's
    ``x * sigmoid(x)``), and a squeeze-and-excitation gate, ``x * sigmoid(s)`` with ``s`` another value."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.squeeze = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 12)

    def forward(self, x):
        y = nn.functional.silu(self.conv(x))
        y = nn.functional.silu(self.dw(y))
        y = y * torch.sigmoid(self.squeeze(y.mean((2, 3), keepdim=True)))
        return nn.functional.silu(self.fc(y.mean((2, 3))))


class GateNet(nn.Module):
    """Gates before convolutions: a squeeze-and-excitation gate (one value per channel) before a 1x1 and before a
    3x3 convolution, which the importer folds into their weights at batch 1, and a gate per pixel, which stays."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.reduce, self.expand = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.proj = nn.Conv2d(8, 6, 1)
        self.conv3 = nn.Conv2d(6, 6, 3, padding=1)
        self.pixel, self.out = nn.Conv2d(6, 6, 1), nn.Conv2d(6, 4, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = self.proj(y * torch.sigmoid(self.expand(torch.relu(self.reduce(y.mean((2, 3), keepdim=True))))))
        z = self.conv3(torch.sigmoid(y.mean((2, 3), keepdim=True)) * y)
        return self.out(z * torch.sigmoid(self.pixel(z)))


def _products(mod) -> list[tuple[tuple[int, ...], bool]]:
    """(output shape, first operand a constant) of every ``multiply`` in ``mod``'s main function."""
    import tvm
    from tvm import relax

    return [(tuple(int(v) for v in b.value.ty.shape.values), isinstance(b.value.args[0], tvm.ir.expr.Constant))
            for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.multiply"]


def _seeded(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for p in module.parameters():
        nn.init.uniform_(p, -0.5, 0.5)
    return module.eval()


@pytest.fixture(scope="module")
def conv_net():
    torch.manual_seed(0)
    model = _seeded(ConvNet())
    x = torch.randn(1, 3, 12, 12)
    return model, x, map_model(import_model(model, (x,)))


@pytest.fixture(scope="module")
def attention():
    model = _seeded(Attention())
    x = torch.randn(1, 8, 16)
    return model, x, map_model(import_model(model, (x,)))


@pytest.fixture(scope="module")
def gelu_tanh_mlp():
    model = _seeded(GeluTanhMLP())
    x = torch.randn(1, 8, 16)
    return model, x, map_model(import_model(model, (x,)))


def test_the_tanh_form_of_gelu_is_an_epilogue_of_its_own(gelu_tanh_mlp) -> None:
    _, _, mapped = gelu_tanh_mlp
    # moved before the frontend's reshape, it is the up projection's epilogue, not the erf form's
    assert mapped.task_weights() == {"dense-8x16x32+bias+gelu_tanh": 1, "dense-8x32x16+bias": 1}
    assert dict(mapped.report.matched) == {"dense+bias+gelu_tanh": 1, "dense+bias": 1}
    assert not mapped.report.left["relax.nn.gelu_tanh"]


@pytest.fixture(scope="module")
def silu_net():
    model = _seeded(SiLUNet())
    x = torch.randn(1, 3, 10, 10)
    assert "conv2d+bias+silu" not in map_model(import_model(model, (x,), fuse_silu=False)).report.matched
    return model, x, map_model(import_model(model, (x,)))


def test_silu_is_fused_as_an_epilogue_and_a_gate_of_another_value_is_not(silu_net) -> None:
    _, _, mapped = silu_net
    assert set(mapped.task_weights()) == {
        "conv2d-1x10x10x3-8-k3-s1-p1+bias+silu",
        "conv2d-1x10x10x8-8-k3-s1-p1-g8+bias+silu",
        "conv2d-1x1x1x8-8-k1-s1-p0+bias",  # the gate's sigmoid multiplies y, not the convolution's output
        "dense-1x8x12+bias+silu",
    } | {t for t in mapped.task_weights() if t.startswith("pool2d")}
    assert mapped.report.matched["conv2d+bias+silu"] == 2 and mapped.report.matched["dense+bias+silu"] == 1
    assert mapped.report.left["relax.sigmoid"] == 1 and mapped.report.left["relax.multiply"] == 1


def test_conv_net_maps_each_sub_graph_to_its_task(conv_net) -> None:
    _, _, mapped = conv_net
    names = {t.task.name: t for t in mapped.tasks}
    # batch norm folded into the first conv; the second conv takes the residual add and its ReLU as its epilogue
    assert set(names) == {
        "conv2d-1x12x12x3-8-k3-s1-p1+bias+relu",
        "conv2d-1x12x12x8-8-k3-s1-p1+bias+res+relu",
        "conv2d-1x12x12x8-8-k3-s1-p1-g8+bias+relu6",
        "dense-1x8x10+bias+gelu",
        "pool2d-avg-1x12x12x8-k12-s12-p0-nchw",  # the mean over the spatial axes (after the layout transform back)
    }
    assert dict(mapped.report.matched) == {"conv2d+bias+relu": 1, "conv2d+bias+res+relu": 1, "conv2d+bias+relu6": 1,
                                           "dense+bias+gelu": 1, "pool2d-global-mean": 1}
    # what is left to TVM: the two layout transforms into and out of NHWC (the convolutions run NHWC between
    # them); no batch norm, no conv, no residual add, no matmul, no mean
    assert dict(mapped.report.left) == {"relax.permute_dims": 2}


def test_attention_maps_dense_layers_and_both_batch_matmuls(attention) -> None:
    _, _, mapped = attention
    weights = mapped.task_weights()
    # q, k, v share one task (weight 3); the FFN layer keeps its GELU (moved before the frontend's reshape)
    assert weights == {"dense-8x16x16+bias": 3, "dense-8x16x32+bias+gelu": 1, "bmmNT-2x8x8x8": 1, "bmmNN-2x8x8x8": 1}
    # q @ k^T reads k untransposed: the transpose of k's last two axes is folded into transpose_b
    assert mapped.report.matched["batch_matmul-nt-flat"] == 1
    # a multiply and an add per product: q, k, v (8 x 16 x 16), the FFN (8 x 16 x 32), q @ k^T and p @ v (2 heads
    # of 8 x 8 x 8)
    assert mapped.flops == 2 * (3 * 8 * 16 * 16 + 8 * 16 * 32 + 2 * 2 * 8 * 8 * 8)


@pytest.fixture(scope="module")
def gate_net():
    model = _seeded(GateNet())
    x = torch.randn(1, 3, 10, 10)
    return model, x, map_model(import_model(model, (x,)))


def test_channel_gates_fold_into_the_next_convolutions_weight_and_a_pixel_gate_does_not(gate_net) -> None:
    model, x, mapped = gate_net
    # the two channel gates scale the weights (multiplies of weight shape, a constant first); the pixel gate stays
    assert sorted(_products(import_model(model, (x,)))) == [((1, 1, 8, 6), True), ((1, 10, 10, 6), False),
                                                            ((3, 3, 6, 6), True)]
    assert sorted(shape for shape, _ in _products(import_model(model, (x,), fuse_gates=False))) == [
        (1, 10, 10, 6), (1, 10, 10, 6), (1, 10, 10, 8)]
    # a gate per sample cannot move into a weight shared by the batch: at batch 2 every gate stays
    assert len(_products(import_model(model, (torch.randn(2, 3, 10, 10),)))) == 3
    # nor does one where the weight is larger than the gated activations (at 2x2: 1x1x8x6 against 2x2x8, and
    # 3x3x6x6 against 2x2x6)
    assert sorted(_products(import_model(model, (torch.randn(1, 3, 2, 2),)))) == [
        ((1, 2, 2, 6), False), ((1, 2, 2, 6), False), ((1, 2, 2, 8), False)]
    # both gated convolutions are mapped to kernels, their weights passed in as computed
    assert {"conv2d-1x10x10x8-6-k1-s1-p0+bias", "conv2d-1x10x10x6-6-k3-s1-p1+bias"} <= set(mapped.task_weights())
    assert mapped.report.left["relax.nn.conv2d"] == 0


@pytest.mark.parametrize("which", ["conv_net", "attention", "gelu_tanh_mlp", "silu_net", "gate_net"])
def test_rebuilt_model_equals_pytorch_with_s0_mock_picked_and_random_configs(which, request) -> None:
    model, x, mapped = request.getfixturevalue(which)
    from schedule_gym.backends.tvm.targets import host_llvm_target

    reference = [model(x).detach().numpy()]
    rng = np.random.default_rng(0)
    random_configs = {t.task.name: TileSpace(t.task).sample(rng) for t in mapped.tasks}
    for configs, untuned in (({}, "s0"), ({}, "mock"), (random_configs, "s0")):
        executable = compile_model(schedule_kernels(mapped, configs, untuned), host_llvm_target(1))
        outputs = run_model(executable, (x,))
        assert check_outputs(outputs, reference) is None
        # the check rejects a wrong answer: a perturbed output fails it
        wrong = [outputs[0] + 1e-2 * np.abs(reference[0]).max()]
        assert check_outputs(wrong, reference) is not None


def test_unscheduled_default_build_also_runs(conv_net) -> None:
    model, x, _ = conv_net
    from schedule_gym.backends.tvm.targets import host_llvm_target

    executable = compile_model(import_model(model, (x,)), host_llvm_target(1), schedule_rest=False)
    assert check_outputs(run_model(executable, (x,)), [model(x).detach().numpy()]) is None


def test_configs_of_unknown_tasks_are_refused(conv_net) -> None:
    _, _, mapped = conv_net
    with pytest.raises(ValueError, match="gemm-64x64x64"):
        schedule_kernels(mapped, {"gemm-64x64x64": None})


# ------------------------------------------------------------------------------- near misses
class NearMisses(nn.Module):
    """Sub-graphs that look like mapped ones but are not: clip to 5 (not ReLU6), a bias that is computed
    (not a constant), a conv whose pre-activation value is also read elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8, bias=False)
        self.conv = nn.Conv2d(2, 4, 1)

    def forward(self, x, img):
        a = torch.clamp(self.fc(x), 0.0, 5.0)
        b = self.fc2(x) + a  # the added value is computed: dense without bias, the add left
        c = self.conv(img)
        d = torch.relu(c) + c  # c is read twice: conv2d+bias+relu must not swallow it
        return a, b, d


def test_near_misses_do_not_match() -> None:
    model = _seeded(NearMisses())
    x, img = torch.randn(4, 8), torch.randn(1, 2, 5, 5)
    mapped = map_model(import_model(model, (x, img)))
    report = mapped.report
    assert report.refused[("dense+bias+relu6", "clip to [0.0, 5.0] is not ReLU6")] == 1
    assert report.refused[("conv2d+bias+relu", "an inner value is used outside the match")] == 1
    assert set(mapped.task_weights()) == {"dense-4x8x8+bias", "dense-4x8x8", "conv2d-1x5x5x2-4-k1-s1-p0+bias"}
    assert report.left["relax.clip"] == 1 and report.left["relax.nn.relu"] == 1
    from schedule_gym.backends.tvm.targets import host_llvm_target

    reference = [t.detach().numpy() for t in model(x, img)]
    outputs = run_model(compile_model(schedule_kernels(mapped), host_llvm_target(1)), (x, img))
    assert check_outputs(outputs, reference) is None


# ------------------------------------------------------------------------------- patterns as data
def test_user_pattern_from_data_maps_and_unknown_ops_are_named() -> None:
    pattern = Pattern.from_dict({
        "name": "my-conv-relu", "op_type": {"type": "conv2d", "activation": "relu", "bias": False},
        "cell": [{"name": "main", "op": "nn.conv2d", "inputs": ["*", "const"]},
                 {"name": "act", "op": "nn.relu", "inputs": ["main"]}],
    })
    model = _seeded(nn.Sequential(nn.Conv2d(2, 4, 3, bias=False), nn.ReLU()))
    mapped = map_model(import_model(model, (torch.randn(1, 2, 6, 6),)), [pattern])
    assert mapped.task_weights() == {"conv2d-1x6x6x2-4-k3-s1-p0+relu": 1}
    with pytest.raises(PatternError, match="unknown operator 'nn.conv9d'"):
        Pattern.from_dict({"name": "bad", "op_type": "conv2d",
                           "cell": [{"name": "main", "op": "nn.conv9d", "inputs": ["*", "const"]}]})
    with pytest.raises(PatternError, match="reads 'nope'"):
        Pattern.from_dict({"name": "bad", "op_type": "conv2d",
                           "cell": [{"name": "main", "op": "nn.conv2d", "inputs": ["nope", "const"]}]})
    with pytest.raises(PatternError, match="unknown op_type 'fft'"):
        map_model(mapped.mod, [Pattern.from_dict({"name": "f", "op_type": "fft",
                                                  "cell": [{"name": "main", "op": "add", "inputs": ["*", "*"]}]})])


# ------------------------------------------------------------------------------- bad models
class DataDependent(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)


def test_models_that_cannot_be_imported_are_named() -> None:
    with pytest.raises(ModelImportError, match="'DataDependent': torch.export cannot capture it"):
        import_model(DataDependent(), (torch.randn(3),))
    with pytest.raises(ModelImportError, match="does not support: special_bessel_j0"):
        import_model(Unsupported(), (torch.randn(3),), name="Unsupported")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        import_model(lambda x: x, (torch.randn(3),))
