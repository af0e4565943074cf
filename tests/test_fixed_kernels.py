"""The fixed kernels (schedule_gym.models.fixed): concatenations with the affine map and ReLU after them, layer norms
with the residual sum before them; each against NumPy, folded into small models and checked against PyTorch."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tvm = pytest.importorskip("tvm")

from torch import nn  # noqa: E402

from schedule_gym.backends.tvm.targets import host_llvm_target  # noqa: E402
from schedule_gym.models.build import compile_model, run_model, schedule_kernels  # noqa: E402
from schedule_gym.models.fixed import FIXED_ATTR, LANES, SYMBOL_PREFIX, concat_kernel, layer_norm_kernel  # noqa: E402
from schedule_gym.models.importer import import_model  # noqa: E402
from schedule_gym.models.mapping import map_model  # noqa: E402
from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs  # noqa: E402

pytestmark = pytest.mark.tvm


def _run_kernel(func, arrays, out_shape):
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=host_llvm_target(2))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays] + [tvm.runtime.empty(out_shape, "float32", dev)]
    lib["main"](*args)
    return args[-1].numpy()


# widths below, at and above the vector pieces, and with a tail: every copy loop the kernel writes
@pytest.mark.parametrize("affine,relu", [(False, False), (True, False), (True, True), (False, True)])
def test_kernel_writes_each_input_to_its_columns_with_the_affine_map_and_relu(affine, relu) -> None:
    rng = np.random.default_rng(0)
    rows, widths = 7, [1, 3, LANES, LANES + 5, 2 * LANES]
    xs = [rng.standard_normal((rows, w), dtype=np.float32) for w in widths]
    scale = rng.standard_normal(sum(widths), dtype=np.float32)
    shift = rng.standard_normal(sum(widths), dtype=np.float32)
    expected = np.concatenate(xs, axis=1)
    if affine:
        expected = expected * scale + shift
    if relu:
        expected = np.maximum(expected, 0)
    func = concat_kernel(rows, widths, affine, relu)
    assert func.attrs[FIXED_ATTR] == "concat" and "T.parallel" in func.script() and "T.vectorized" in func.script()
    got = _run_kernel(func, xs + ([scale, shift] if affine else []), (rows, sum(widths)))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows,widths", [(0, [4]), (3, []), (3, [4, 0])])
def test_kernel_refuses_empty_shapes_naming_them(rows, widths) -> None:
    with pytest.raises(ValueError, match=re.escape(f"rows={rows!r}, widths={widths!r}")):
        concat_kernel(rows, widths)


class DenseBlock(nn.Module):
    """DenseNet's pre-activation pattern: ``conv(relu(bn(cat(...))))``, and cases the fold must not take: a
    concatenation read twice, a product with a non-constant, a constant divided by the concatenation, and a
    concatenation on PyTorch's channel axis of an input the layout conversion leaves in NCHW. Each concatenation
    has other inputs (identical ones would be one value)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 21, 1)
        self.bn, self.c = nn.BatchNorm2d(32), nn.Conv2d(32, 6, 1)
        self.bn2 = nn.BatchNorm2d(29)
        with torch.no_grad():
            for bn in (self.bn, self.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(-1, 1)
                bn.bias.uniform_(-1, 1)

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        main = self.c(torch.relu(self.bn(torch.cat([a, b, x], 1))))
        twice = torch.cat([a, b], 1)
        shared = self.bn2(twice) + twice  # read twice: a plain concatenation, its batch norm left to TVM
        gated = torch.cat([b, a], 1) * torch.sigmoid(b.sum(1, keepdim=True))  # a product with a computed value
        inverse = 1.0 / (torch.cat([a, b, b], 1) + 2.0)  # + 2 is taken, 1 / (...) is not affine
        return main, shared, gated, inverse, torch.cat([x, x], 1)


@pytest.fixture(scope="module")
def dense_block():
    torch.manual_seed(0)
    model = DenseBlock().eval()
    x = torch.randn(1, 3, 8, 8)
    mod = import_model(model, (x,))
    with torch.no_grad():
        reference = [t.numpy() for t in model(x)]
    return mod, x, reference


def test_concatenations_fold_with_their_affine_chains_and_the_model_equals_pytorch(dense_block) -> None:
    mod, x, reference = dense_block
    mapped = map_model(mod)
    assert dict(mapped.report.fixed) == {"concat+affine+relu": 1, "concat": 2, "concat+affine": 1}
    # the NCHW concatenation (axis 1 of 4) stays with TVM; so do the chains' ends the fold did not take
    assert mapped.report.left["relax.concat"] == 1
    assert {"relax.sigmoid", "relax.divide", "relax.multiply"} <= set(mapped.report.left)
    assert any(line.startswith("fixed") and "concat+affine+relu" in line for line in mapped.report.lines())
    mod = schedule_kernels(mapped, {}, "s0")
    fixed = [gv.name_hint for gv, f in mod.functions.items() if f.attrs is not None and FIXED_ATTR in f.attrs]
    assert len(fixed) == 4 and all(name.startswith(SYMBOL_PREFIX + "concat") for name in fixed)
    outputs = run_model(compile_model(mod, host_llvm_target(2)), [x])
    assert check_outputs(outputs, reference) is None


def test_fixed_kernels_off_leaves_every_concatenation_to_tvm(dense_block) -> None:
    mod, x, reference = dense_block
    mapped = map_model(mod, fixed_kernels=False)
    assert not mapped.report.fixed and mapped.report.left["relax.concat"] == 5
    assert check_outputs(run_model(compile_model(schedule_kernels(mapped, {}, "s0"), host_llvm_target(2)), [x]),
                         reference) is None


def test_a_wrong_shift_is_caught_by_the_model_check(dense_block) -> None:
    """The check the model tests rely on rejects a kernel whose affine map is off by one batch-norm shift."""
    mod, x, reference = dense_block
    mapped = map_model(mod)
    main = mapped.mod["main"]
    from tvm import relax

    consts = []

    @relax.expr_functor.mutator
    class Shifted(relax.PyExprMutator):  # adds 0.01 to the first fixed kernel's shift
        def visit_call_(self, call):
            call = super().visit_call_(call)
            kernel = call.args[0] if getattr(call.op, "name", None) == "relax.call_tir" else None
            if kernel is not None and "concat_affine_relu" in kernel.name_hint and not consts:
                args = list(call.args[1].fields)
                consts.append(args[-1])
                args[-1] = relax.const(args[-1].value.numpy() + np.float32(0.01))
                return relax.call_tir(call.args[0], args, call.ty)
            return call

    mapped.mod["main"] = Shifted().visit_expr(main)
    assert consts
    outputs = run_model(compile_model(schedule_kernels(mapped, {}, "s0"), host_llvm_target(2)), [x])
    assert check_outputs(outputs, reference) is not None


def test_tiny_densenet_folds_every_concatenation_and_equals_pytorch() -> None:
    loaded = load_model("tiny-densenet")
    assert sum(loaded.mapped.report.fixed.values()) >= 5 and "relax.concat" not in loaded.mapped.report.left
    executable = compile_model(schedule_kernels(loaded.mapped, {}, "s0"), host_llvm_target(2))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None


@pytest.mark.parametrize("rows,n,residual",
                         [(3, 5, False), (4, LANES, True), (2, 2 * LANES + 5, True), (3, 768, False)])
def test_layer_norm_kernel_equals_the_two_pass_definition_in_float64(rows, n, residual) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, n), dtype=np.float32) * 3 + 100  # a large mean: a one-pass variance loses it
    r = rng.standard_normal((rows, n), dtype=np.float32)
    gamma, beta = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    v = (x + r if residual else x).astype(np.float64)
    expected = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + 1e-5) * gamma + beta
    func = layer_norm_kernel(rows, n, 1e-5, residual)
    assert func.attrs[FIXED_ATTR] == "layer_norm" and "T.parallel" in func.script()
    got = _run_kernel(func, [x] + ([r] if residual else []) + [gamma, beta], (rows, n))
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * np.abs(expected).max())


@pytest.mark.parametrize("rows,n,epsilon", [(0, 4, 1e-5), (2, 0, 1e-5), (2, 4, -1.0)])
def test_layer_norm_kernel_refuses_bad_shapes_naming_them(rows, n, epsilon) -> None:
    with pytest.raises(ValueError, match=re.escape(f"rows={rows!r}, n={n!r}, epsilon={epsilon!r}")):
        layer_norm_kernel(rows, n, epsilon)


class Norms(nn.Module):
    """A post-LN sum (BERT: ``norm(x + f(x))``, the sum read once), a pre-LN one (GPT-2: the sum read by the norm and
    the next residual), a norm without affine parameters (the frontend gives it a scale of ones and a shift of zeros:
    folded too) and one over the last two axes (left to TVM)."""

    def __init__(self, d: int = 40) -> None:
        super().__init__()
        self.f, self.g = nn.Linear(d, d), nn.Linear(d, d)
        self.post, self.pre = nn.LayerNorm(d), nn.LayerNorm(d, eps=1e-6)
        self.plain, self.wide = nn.LayerNorm(d, elementwise_affine=False), nn.LayerNorm([6, d])
        with torch.no_grad():
            for norm in (self.post, self.pre, self.wide):
                norm.weight.uniform_(-1, 1)
                norm.bias.uniform_(-1, 1)

    def forward(self, x):
        h = self.post(x + self.f(x))
        h = h + self.g(self.pre(h))
        return h, self.plain(h), self.wide(h)


def test_layer_norms_fold_with_a_residual_read_once_and_the_model_equals_pytorch() -> None:
    torch.manual_seed(0)
    model = Norms().eval()
    x = torch.randn(1, 6, 40) * 4 + 2
    with torch.no_grad():
        reference = [t.numpy() for t in model(x)]
    assert not map_model(import_model(model, (x,))).report.fixed  # not a default fold
    mapped = map_model(import_model(model, (x,)), fixed_kernels=("concat", "layer_norm"))
    assert dict(mapped.report.fixed) == {"add+layer_norm": 1, "layer_norm": 2}
    assert mapped.report.left["relax.nn.layer_norm"] == 1  # over two axes
    outputs = run_model(compile_model(schedule_kernels(mapped, {}, "s0"), host_llvm_target(2)), [x])
    assert check_outputs(outputs, reference) is None
    unfolded = map_model(import_model(model, (x,)), fixed_kernels=False)
    assert not unfolded.report.fixed and unfolded.report.left["relax.nn.layer_norm"] == 4


def test_bert_tiny_folds_every_layer_norm_and_equals_pytorch() -> None:
    loaded = load_model("bert-tiny")
    mapped = map_model(loaded.canonical, fixed_kernels=("layer_norm",))
    assert mapped.report.fixed["add+layer_norm"] >= 4 and "relax.nn.layer_norm" not in mapped.report.left
    executable = compile_model(schedule_kernels(mapped, {}, "s0"), host_llvm_target(2))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None


def test_unknown_folds_are_named() -> None:
    from schedule_gym.models.fixed import fold_fixed

    with pytest.raises(ValueError, match="unknown fixed-kernel folds \\['softmax'\\]; known: attention, concat, layer_norm"):
        fold_fixed(None, ("concat", "softmax"))
    with pytest.raises(ValueError, match="got the string 'layer_norm'"):
        fold_fixed(None, "layer_norm")
