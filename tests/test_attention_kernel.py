"""The attention kernel (schedule_gym.models.fixed.attention): its exp against float64, the kernel against the
float64 definition (causal or not, every tail of its tiles), its fold into models defined here and into the zoo's
transformers, each checked against PyTorch, and the chains the fold must leave alone."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tvm = pytest.importorskip("tvm")

from torch import nn  # noqa: E402

from schedule_gym.backends.tvm.targets import host_llvm_target  # noqa: E402
from schedule_gym.models.build import compile_model, run_model, schedule_kernels  # noqa: E402
from schedule_gym.models.fixed import FIXED_ATTR, LANES, attention_kernel  # noqa: E402
from schedule_gym.models.fixed.attention import MASKED, NARROW_TILE, WIDE_TILE, fast_exp, register_tile  # noqa: E402
from schedule_gym.models.importer import import_model  # noqa: E402
from schedule_gym.models.mapping import map_model  # noqa: E402
from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs  # noqa: E402

pytestmark = pytest.mark.tvm

FOLDS = ("concat", "attention")


def _compiled(func):
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=host_llvm_target(2))


def test_fast_exp_is_within_two_ulps_of_exp_and_zero_far_below() -> None:
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    n = 4096
    with IRBuilder() as ib:
        with T.prim_func():
            x = T.arg("x", T.buffer((n,), "float32"))
            y = T.arg("y", T.buffer((n,), "float32"))
            with T.vectorized(0, n) as i:
                T.buffer_store(y, fast_exp(x[i]), [i])
    values = np.concatenate([np.linspace(-87.0, 88.0, n - 6), [0.0, -1e-8, 1e-8, -100.0, MASKED, -1e30]])
    x = values.astype(np.float32)
    y = tvm.runtime.empty((n,), "float32", tvm.cpu())
    _compiled(ib.get())["main"](tvm.runtime.tensor(x), y)
    got, exact = y.numpy().astype(np.float64), np.exp(x.astype(np.float64))
    normal = x > -87.0  # results above float32's smallest normal
    ulp = np.spacing(exact[normal].astype(np.float32)).astype(np.float64)
    assert np.abs(got[normal] - exact[normal]).max() <= 2 * ulp.max() and np.all(np.abs(got - exact)[normal] <= 2 * ulp)
    assert got[n - 6] == 1.0 and np.all(got[-3:] == 0.0)


def _attention(q, kt, v, alpha, causal):
    s = (q.astype(np.float64) @ kt.astype(np.float64)) * alpha
    if causal:
        s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _shapes(tile):
    """Rows below, at and past a block (the tile's rows), keys and value columns with and without a tail of a tile
    (its columns) and of a vector piece (LANES), one row, a causal sequence long enough for tiles after the block:
    ``(tile, heads, rows, keys, depth, value_depth, causal)``."""
    rows_tile, key_tile = tile
    shapes = [(2, 1, 1, 4, 4, False), (3, rows_tile - 1, key_tile + 3, 8, 5, False),
              (2, rows_tile + 1, 2 * key_tile, 16, key_tile, False), (4, 37, LANES + 7, 64, 64, False),
              (2, 37, 37, 16, key_tile + 3, True), (3, rows_tile, rows_tile, 8, 8, True), (1, 1, 1, 3, 2, True),
              (2, 3 * key_tile + 1, 3 * key_tile + 1, 32, 16, True)]
    return [(tile, *shape) for shape in shapes]


#: both register tiles, whichever this CPU builds with
SHAPES = _shapes(NARROW_TILE) + _shapes(WIDE_TILE)
SHAPE_ARGS = "tile,heads,rows,keys,depth,value_depth,causal"


def test_the_register_tile_is_the_wide_one_on_512_bit_fma_units_only() -> None:
    assert register_tile("emeraldrapids") == register_tile("sapphirerapids") == WIDE_TILE == (12, 2 * LANES)
    assert register_tile("znver4") == register_tile("znver3") == register_tile("unknown") == NARROW_TILE
    assert register_tile("icelake-client") == NARROW_TILE  # AVX-512 on one 512-bit FMA unit


@pytest.mark.parametrize(SHAPE_ARGS, SHAPES)
def test_kernel_equals_the_float64_definition(tile, heads, rows, keys, depth, value_depth, causal) -> None:
    rng = np.random.default_rng(heads * 1000 + rows + keys)
    q = rng.standard_normal((heads, rows, depth), dtype=np.float32)
    kt = rng.standard_normal((heads, depth, keys), dtype=np.float32)
    v = rng.standard_normal((heads, keys, value_depth), dtype=np.float32)
    alpha = 1 / math.sqrt(depth)
    func = attention_kernel(heads, rows, keys, depth, value_depth, alpha, causal, tile=tile)
    assert func.attrs[FIXED_ATTR] == "attention" and "T.parallel" in func.script()
    out = tvm.runtime.empty((heads, rows, value_depth), "float32", tvm.cpu())
    _compiled(func)["main"](*[tvm.runtime.tensor(a) for a in (q, kt, v)], out)
    expected = _attention(q, kt, v, alpha, causal)
    tolerance = 1e-5 * np.abs(expected).max()
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=tolerance)
    # the tolerance tells a wrong answer: the other masking, or the scores unscaled, are far outside it (with one
    # key the output is that key's value, whatever the scores)
    if rows > 1:
        assert np.abs(_attention(q, kt, v, alpha, not causal) - expected).max() > 100 * tolerance
        assert np.abs(_attention(q, kt, v, 1.0, causal) - expected).max() > 100 * tolerance


def _token_rows(heads, tokens, depth, width, offset, rng):
    """A projection's result as a model holds it, ``[tokens, width]`` (``width >= offset + heads * depth``: the
    heads of one of ``Q``, ``K``, ``V`` from ``offset``), and its ``[heads, tokens, depth]`` part."""
    rows = rng.standard_normal((tokens, width), dtype=np.float32)
    return rows, rows[:, offset:offset + heads * depth].reshape(tokens, heads, depth).transpose(1, 0, 2)


@pytest.mark.parametrize(SHAPE_ARGS, [shape for tile in (NARROW_TILE, WIDE_TILE)
                                      for shape in (_shapes(tile)[i] for i in (1, 3, 4, 7))])
@pytest.mark.parametrize("per_head", [False, True])
def test_kernel_reads_and_writes_the_heads_in_place(tile, heads, rows, keys, depth, value_depth, causal,
                                                    per_head) -> None:
    """Q read from a ``[tokens, 3 * heads * depth + 5]`` projection (GPT-2's and ViT's, split after it), K and V
    from projections a token a row (each head copied by the kernel) or stored per head (``[depth, keys]``,
    ``[keys, value_depth]``: no copy); the result written a token a row, the heads joined, beside columns the
    kernel must not touch."""
    from schedule_gym.models.fixed.views import Strided

    rng = np.random.default_rng(rows * 100 + keys)
    width = 3 * heads * depth + 5
    qkv, q = _token_rows(heads, rows, depth, width, 0, rng)
    k_rows, k = _token_rows(heads, keys, depth, width, heads * depth, rng)  # keys != rows in some shapes
    v_rows, v = _token_rows(heads, keys, value_depth, heads * value_depth + 3, 3, rng)
    if per_head:
        kt_base, v_base = np.ascontiguousarray(k.transpose(0, 2, 1)), np.ascontiguousarray(v)
        kt_view = Strided(kt_base.size, 0, (depth * keys, keys, 1))
        v_view = Strided(v_base.size, 0, (keys * value_depth, value_depth, 1))
    else:
        kt_base, kt_view = k_rows, Strided(k_rows.size, heads * depth, (depth, 1, width))
        v_base, v_view = v_rows, Strided(v_rows.size, 3, (value_depth, heads * value_depth + 3, 1))
    out_width = heads * value_depth + 4
    views = (Strided(qkv.size, 0, (depth, width, 1)), kt_view, v_view,
             Strided(rows * out_width, 0, (value_depth, out_width, 1)))
    alpha = 1 / math.sqrt(depth)
    func = attention_kernel(heads, rows, keys, depth, value_depth, alpha, causal, views=views, tile=tile)
    script = func.script()  # a head's copies of K^T and V: where they are not stored per head
    copies = (f"T.alloc_local(({depth}, {keys}))" in script, f"T.alloc_local(({keys}, {value_depth}))" in script)
    assert copies == ((False, False) if per_head else (True, True))
    out = tvm.runtime.tensor(np.full(rows * out_width, 7.0, dtype=np.float32))
    _compiled(func)["main"](*[tvm.runtime.tensor(a.ravel()) for a in (qkv, kt_base, v_base)], out)
    got = out.numpy().reshape(rows, out_width)
    expected = _attention(q, k.transpose(0, 2, 1), v, alpha, causal)
    tolerance = 1e-5 * np.abs(expected).max()
    np.testing.assert_allclose(got[:, :heads * value_depth].reshape(rows, heads, value_depth).transpose(1, 0, 2),
                               expected, rtol=0, atol=tolerance)
    assert np.all(got[:, heads * value_depth:] == 7.0)
    # the heads read in another order are far outside the tolerance
    wrong = _attention(q[::-1], k.transpose(0, 2, 1), v, alpha, causal)
    assert np.abs(wrong - expected).max() > 100 * tolerance


@pytest.mark.parametrize("views,message", [
    ([(24, 0, (8, 8, 1))] * 3, "four views (q, kt, v, o), got 3"),
    ([(96, 0, (8, 32, 1))] * 4, "q view Strided(size=96, offset=0, strides=(8, 32, 1)) reaches outside its 96"),
    ([(96, 0, (32, 8, 1)), (96, 0, (32, 4, 1)), (96, 0, (32, 1, 4)), (96, 0, (32, 8, 1))],
     "v view needs a contiguous last axis (stride 1), got (32, 1, 4)")])
def test_kernel_refuses_views_that_cannot_hold_its_operands(views, message) -> None:
    from schedule_gym.models.fixed.views import Strided

    with pytest.raises(ValueError, match=re.escape(message)):
        attention_kernel(3, 4, 4, 8, 8, 0.5, views=[Strided(*v) for v in views])


@pytest.mark.parametrize("args,message", [
    ((0, 4, 4, 8, 8, 0.5), "heads >= 1, got 0"), ((1, 4, 4, 8, -1, 0.5), "value_depth >= 1, got -1"),
    ((1, 4, 4, 8, 8, math.inf), "alpha=inf"), ((1, 4, 5, 8, 8, 0.5, True), "rows == keys, got rows=4, keys=5"),
    ((1, 4, 4, 8, 8, 0.5, False, None, (0, 16)), "tile of two sizes >= 1, got tile=(0, 16)"),
    ((1, 4, 4, 8, 8, 0.5, False, None, (6,)), "tile of two sizes >= 1, got tile=(6,)")])
def test_kernel_refuses_bad_shapes_naming_them(args, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        attention_kernel(*args)


class Attentions(nn.Module):
    """BERT's attention (separate projections, the scores divided), a causal one (GPT-2's ``where`` with the lower
    triangle and ``finfo.min``) with the scores multiplied, and chains the fold must leave alone: a mask that is not
    causal, a softmax over another axis, scores that are also an output, a softmax over each head's scores as one
    row (a reshape before it)."""

    def __init__(self, hidden: int = 24, heads: int = 3, tokens: int = 11) -> None:
        super().__init__()
        self.heads, self.depth = heads, hidden // heads
        self.q, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        # a key projection for each chain: identical scores would be one value, read by every chain
        self.k = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(6))
        self.register_buffer("causal", torch.ones(tokens, tokens, dtype=torch.bool).tril().view(1, 1, tokens, tokens))
        self.register_buffer("band", torch.ones(tokens, tokens, dtype=torch.bool).triu(-2).tril(2))

    def split(self, y):
        b, t, _ = y.shape
        return y.view(b, t, self.heads, self.depth).permute(0, 2, 1, 3)

    def forward(self, x):
        q, v = self.split(self.q(x)), self.split(self.v(x))
        k = [self.split(key(x)).transpose(-1, -2) for key in self.k]
        low = torch.finfo(torch.float32).min
        plain = torch.softmax(q @ k[0] / math.sqrt(self.depth), dim=-1) @ v
        causal = torch.softmax(torch.where(self.causal, 0.25 * (q @ k[1]), low), -1) @ v
        band = torch.softmax(torch.where(self.band, q @ k[2] * 0.25, low), -1) @ v
        other_axis = torch.softmax(q @ k[3] * 0.5, dim=-2) @ v
        shown = q @ k[4] * 0.3
        scores = q @ k[5] * 0.5
        one_row = torch.softmax(scores.reshape(1, self.heads, -1), -1).reshape(scores.shape) @ v
        return plain, causal, band, other_axis, torch.softmax(shown, -1) @ v, shown, one_row


@pytest.fixture(scope="module")
def attentions():
    torch.manual_seed(0)
    model = Attentions().eval()
    x = torch.randn(1, 11, 24)
    with torch.no_grad():
        reference = [t.numpy() for t in model(x)]
    return import_model(model, (x,)), x, reference


def test_attention_folds_where_it_is_attentions_and_the_model_equals_pytorch(attentions) -> None:
    mod, x, reference = attentions
    assert not map_model(mod).report.fixed  # not a default fold
    mapped = map_model(mod, fixed_kernels=FOLDS)
    assert dict(mapped.report.fixed) == {"attention": 1, "causal attention": 1}
    # the four chains left: their softmaxes stay with TVM, their matmuls with the mapping
    assert mapped.report.left["relax.nn.softmax"] == 4
    assert sum(n for name, n in mapped.report.matched.items() if "matmul" in name) == 8
    mod_scheduled = schedule_kernels(mapped.packed(), {}, "s0")
    kinds = sorted(f.attrs[FIXED_ATTR] for f in mod_scheduled.functions.values()
                   if f.attrs is not None and FIXED_ATTR in f.attrs)
    assert kinds == ["attention", "attention"]
    for fast_math in (False, True):
        outputs = run_model(compile_model(mod_scheduled, host_llvm_target(2), fast_math=fast_math), [x])
        assert check_outputs(outputs, reference) is None


def test_a_batch_of_two_keeps_the_head_copies_and_equals_pytorch() -> None:
    """Two samples: the heads of a batch are not one stride apart in the projections (``batch x heads``), so the
    kernel takes them copied, as before the views; the model still equals PyTorch."""
    torch.manual_seed(0)
    model = Attentions().eval()
    x = torch.randn(2, 11, 24)
    with torch.no_grad():
        reference = [t.numpy() for t in model(x)]
    mapped = map_model(import_model(model, (x,)), fixed_kernels=FOLDS)
    assert dict(mapped.report.fixed) == {"attention": 1, "causal attention": 1}
    executable = compile_model(schedule_kernels(mapped.packed(), {}, "s0"), host_llvm_target(2))
    assert check_outputs(run_model(executable, [x]), reference) is None


def test_the_model_check_catches_an_attention_kernel_that_drops_the_mask(attentions) -> None:
    from schedule_gym.models.fixed.views import Strided

    mod, x, reference = attentions
    mapped = map_model(mod, fixed_kernels=FOLDS)
    scheduled = schedule_kernels(mapped, {}, "s0")
    for gv, func in list(scheduled.functions.items()):
        if func.attrs is not None and "causal_attention" in gv.name_hint:
            # Attentions(): 3 heads of 8, 11 tokens; Q, K and V read from the [11, 24] projections, the result
            # (an output of the model, the heads not joined) written [3, 11, 8]
            heads = Strided(264, 0, (8, 24, 1))
            views = (heads, Strided(264, 0, (8, 1, 24)), heads, Strided(264, 0, (88, 8, 1)))
            wrong = attention_kernel(3, 11, 11, 8, 8, 0.25, causal=False, views=views)
            scheduled.update_func(gv, wrong.with_attr("global_symbol", gv.name_hint))
    outputs = run_model(compile_model(scheduled, host_llvm_target(2)), [x])
    assert check_outputs(outputs, reference) is not None


@pytest.mark.parametrize("name", ["tiny-bert", "bert-tiny"])
def test_zoo_berts_fold_every_attention_and_equal_pytorch(name) -> None:
    loaded = load_model(name)
    mapped = map_model(loaded.canonical, fixed_kernels=FOLDS)
    assert mapped.report.fixed["attention"] >= 1 and "relax.nn.softmax" not in mapped.report.left
    assert not any(t.task.op.startswith("batch_matmul") for t in mapped.tasks)
    assert "relax.permute_dims" not in mapped.report.left  # the heads read and written in place
    executable = compile_model(schedule_kernels(mapped.packed(), {}, "s0"), host_llvm_target(2))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None


def test_gpt2_and_vit_of_the_zoo_fold_their_attention_and_equal_pytorch() -> None:
    from schedule_gym.models.zoo.gpts import gpt2
    from schedule_gym.models.zoo.vits import vit

    for spec, form in ((gpt2(vocab=100, positions=32, layers=2, hidden=64, heads=4, tokens=19), "causal attention"),
                       (vit(image=32, patch=8, layers=1, hidden=64, heads=4, mlp=128, num_classes=10), "attention")):
        mod = import_model(spec.module, spec.inputs)
        mapped = map_model(mod, fixed_kernels=FOLDS)
        assert set(mapped.report.fixed) == {form} and "relax.nn.softmax" not in mapped.report.left
        # Q, K and V read from the split of their one projection, the heads joined in place: the permutations left
        # are ViT's patches' (NCHW -> NHWC and back, and the patches to tokens), none of GPT-2's
        assert mapped.report.left["relax.permute_dims"] == (3 if form == "attention" else 0)
        executable = compile_model(schedule_kernels(mapped.packed(), {}, "s0"), host_llvm_target(2))
        assert check_outputs(run_model(executable, spec.inputs), torch_outputs(spec)) is None


def test_attention_with_the_heads_copied_still_equals_pytorch() -> None:
    """``heads_in_place=False`` (the form before, which the fixed-kernel benchmark weighs the other against): the
    kernel takes each operand copied to ``[heads, ., .]``, the permutations left to TVM."""
    from schedule_gym.models.fixed import fold_attention
    from schedule_gym.models.zoo.gpts import gpt2

    spec = gpt2(vocab=100, positions=32, layers=2, hidden=64, heads=4, tokens=19)
    mod, counts = fold_attention(import_model(spec.module, spec.inputs), heads_in_place=False)
    assert dict(counts) == {"causal attention": 2}
    mapped = map_model(mod, fixed_kernels=("concat",))
    assert mapped.report.left["relax.permute_dims"] == 2 * 5  # per layer: Q's, K's two, V's, the output's
    executable = compile_model(schedule_kernels(mapped.packed(), {}, "s0"), host_llvm_target(2))
    assert check_outputs(run_model(executable, spec.inputs), torch_outputs(spec)) is None


def test_compile_torch_takes_attention_and_its_model_equals_pytorch(attentions) -> None:
    from schedule_gym.models.compiled import compile_torch

    _, x, reference = attentions
    torch.manual_seed(0)
    model = Attentions().eval()
    compiled = compile_torch(model, x, budget=0, backend="mock", packed=True, attention=True, name="attentions")
    assert dict(compiled.mapped.report.fixed) == {"attention": 1, "causal attention": 1}
    outputs = compiled(x)
    assert check_outputs([t.numpy() for t in outputs], reference) is None


def test_tune_model_command_takes_attention(tmp_path, capsys) -> None:
    from schedule_gym.cli import main

    out = tmp_path / "r.json"
    code = main(["tune-model", "--model", "tiny-bert", "--attention", "--packed", "--budget", "4", "--agent", "random",
                 "--backend", "mock", "--threads", "1", "--repeat", "2", "--result", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "1 x attention: one vectorised kernel" in text and "outputs equal PyTorch's" in text
    # the attention build folds the layer norms as well, each with the residual sum before it (tiny-bert: post-LN)
    assert re.search(r"\b\d+ x add\+layer_norm: one vectorised kernel", text)
    assert "relax.nn.layer_norm" not in text
    assert not any(t["task"].startswith("bmm") for t in json.loads(out.read_text())["tasks"])
