"""The model zoo (schedule_gym.models.zoo): architectures, seeding, torch.export."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from schedule_gym.models.zoo import (  # noqa: E402
    MODELS,
    ModelSpec,
    bert,
    build_model,
    lstm_weights_as_torch,
)

TINY = ["tiny-cnn", "tiny-mobilenet", "tiny-bert", "tiny-lstm", "tiny-mlp"]

# name -> (build_model keyword arguments, output shape)
FORWARD = {
    "tiny-cnn": ({}, (1, 10)),
    "tiny-mobilenet": ({}, (1, 10)),
    "tiny-bert": ({}, (1, 16, 64)),
    "tiny-lstm": ({}, (3, 4, 50)),
    "tiny-mlp": ({}, (4, 10)),
    "bert-base": ({"layers": 1}, (1, 128, 768)),
    "lstm-ptb": ({}, (20, 20, 10000)),
}


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _run(spec: ModelSpec) -> torch.Tensor:
    with torch.no_grad():
        return spec.module(*spec.inputs)


def test_models_lists_every_model_with_a_description():
    new = {"vgg16", "inceptionv3", "densenet121", "efficientnet-b0", "vit-b16", "gpt2", "resnext50", "bert-tiny",
           "tiny-vgg", "tiny-inception", "tiny-densenet", "tiny-efficientnet", "tiny-vit", "tiny-gpt2", "tiny-resnext"}
    assert set(MODELS) == {"resnet18", "resnet50", "mobilenetv2", "bert-base", "lstm-ptb", *TINY, *new}
    assert all(isinstance(d, str) and d and "\n" not in d for d in MODELS.values())


@pytest.mark.parametrize("name, count", [("resnet18", 11_689_512), ("resnet50", 25_557_032),
                                         ("mobilenetv2", 3_504_872)])
def test_cnn_parameter_counts_equal_torchvision(name, count):
    spec = build_model(name)
    assert _params(spec.module) == count
    assert not spec.module.training
    assert spec.inputs[0].shape == (1, 3, 224, 224)


def test_bert_base_layer_size():
    """A BERT-base layer: 4 x (768 x 768 + 768) + FFN 768 x 3072 x 2 + biases + 2 LayerNorms."""
    assert _params(build_model("bert-base", layers=1).module) == 7_087_872


def test_lstm_ptb_is_the_small_configuration():
    spec = build_model("lstm-ptb")
    (tokens,) = spec.inputs
    assert tokens.dtype == torch.int64 and tokens.shape == (20, 20)
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 10000
    m = spec.module
    assert (m.vocab, m.hidden, m.num_layers) == (10000, 200, 2)
    # four input Linears with bias and four hidden Linears without, per cell (the paper's Figure 2a)
    for cell in m.cells:
        assert [tuple(l.weight.shape) for l in cell.input_linears()] == [(200, 200)] * 4
        assert all(l.bias is not None for l in cell.input_linears())
        assert all(l.bias is None for l in cell.hidden_linears())


@pytest.mark.parametrize("name", list(FORWARD))
def test_forward_shape_and_seeding(name):
    kwargs, shape = FORWARD[name]
    a, b, other = build_model(name, 0, **kwargs), build_model(name, 0, **kwargs), build_model(name, 1, **kwargs)
    assert a.name == name and not a.module.training
    out = _run(a)
    assert tuple(out.shape) == shape
    assert torch.isfinite(out).all()
    assert torch.equal(out, _run(b))
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))
    assert not torch.allclose(out, _run(other))


def test_batch_norm_statistics_are_not_trivial():
    spec = build_model("tiny-cnn")
    bns = [m for m in spec.module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 4  # stem, two in the block, one on the downsample path
    for bn in bns:
        assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert float(bn.running_var.min()) >= 0.5 and float(bn.running_var.max()) <= 1.5


def test_tiny_mobilenet_has_a_residual_block_and_a_strided_one():
    blocks = list(build_model("tiny-mobilenet").module.features)[1:]
    assert [b.use_res_connect for b in blocks] == [True, False]


@pytest.mark.parametrize("name", [*TINY, "lstm-ptb"])
def test_torch_export(name):
    spec = build_model(name)
    program = torch.export.export(spec.module, spec.inputs)
    assert torch.allclose(program.module()(*spec.inputs), _run(spec), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenetv2", "bert-base"])
def test_torch_export_full_size(name):
    """A few seconds each: not marked slow."""
    spec = build_model(name)
    program = torch.export.export(spec.module, spec.inputs)
    assert torch.allclose(program.module()(*spec.inputs), _run(spec), atol=1e-4, rtol=1e-4)


def test_bert_export_has_no_fused_attention():
    spec = bert(layers=1, hidden=32, heads=2, ffn=64, tokens=8)
    graph = torch.export.export(spec.module, spec.inputs).graph
    targets = {str(node.target) for node in graph.nodes if node.op == "call_function"}
    assert "aten.softmax.int" in targets and "aten.gelu.default" in targets
    assert not any("attention" in t or "transformer" in t for t in targets)


@pytest.mark.parametrize("name", ["tiny-lstm", "lstm-ptb"])
def test_native_lstm_equals_nn_lstm(name):
    spec = build_model(name)
    module, (tokens,) = spec.module, spec.inputs
    lstm = lstm_weights_as_torch(module)
    assert isinstance(lstm, torch.nn.LSTM) and lstm.num_layers == 2 and lstm.batch_first
    with torch.no_grad():
        native = module.hidden_states(tokens)
        reference, _ = lstm(module.embedding(tokens))
        assert torch.allclose(native, reference, atol=1e-5, rtol=0)
        assert torch.allclose(module(tokens), module.decoder(reference), atol=1e-5, rtol=0)


def test_unknown_name_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="resnet-19") as info:
        build_model("resnet-19")
    assert all(name in str(info.value) for name in MODELS)


def test_build_model_leaves_the_global_rng_alone():
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    build_model("tiny-cnn", seed=7)
    build_model("tiny-lstm", seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)
