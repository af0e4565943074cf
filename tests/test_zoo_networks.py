"""The zoo's TenSet-compatible networks: VGG-16, Inception-v3, DenseNet-121, EfficientNet-B0, ViT-B/16, GPT-2
small, ResNeXt-50 32x4d, BERT-tiny (schedule_gym.models.zoo), their tiny variants and their suite files."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from schedule_gym.models.zoo import (  # noqa: E402
    MODELS,
    NETWORKS,
    TENSET_TEST_NETWORKS,
    build_model,
    inception_v3,
    vgg,
)
from schedule_gym.tasks import conv2d, dense  # noqa: E402
from schedule_gym.tasks import get_suite, get_task  # noqa: E402
from schedule_gym.tasks.suite_files import (  # noqa: E402
    load_shipped_suite,
    load_suite_file,
    shipped_suite_files,
    write_suite_file,
)

NEW_NETWORKS = ["vgg16", "inceptionv3", "densenet121", "efficientnet-b0", "vit-b16", "gpt2", "resnext50", "bert-tiny"]
NEW_TINY = ["tiny-vgg", "tiny-inception", "tiny-densenet", "tiny-efficientnet", "tiny-vit", "tiny-gpt2", "tiny-resnext"]

# A pre-norm transformer layer of hidden 768, FFN 3072 (ViT-B/16's and GPT-2 small's; BERT-base's layer has the
# same parameters): fused Q, K, V 768 x 2304 + 2304 = 1,771,776; output 768 x 768 + 768 = 590,592; FFN up
# 768 x 3072 + 3072 = 2,362,368; FFN down 3072 x 768 + 768 = 2,360,064; two LayerNorms 2 x 1,536 = 3,072;
# sum 7,087,872 (tests/test_model_zoo.py checks BERT-base's layer against the same figure).
LAYER_768 = 1_771_776 + 590_592 + 2_362_368 + 2_360_064 + 3_072
assert LAYER_768 == 7_087_872

# name -> published parameter count.
PARAMETERS = {
    # torchvision's documented counts (the weights' "num_params" in torchvision.models):
    # vgg16 (no BN): 13 convs 14,714,688 + classifier 25,088 x 4,096 + 4,096, 4,096 x 4,096 + 4,096, 4,096 x 1,000 +
    # 1,000 = 123,642,856 -> 138,357,544
    "vgg16": 138_357_544,
    "inceptionv3": 27_161_264,  # with the auxiliary classifier (23,834,568 without: see the test below)
    "densenet121": 7_978_856,
    "efficientnet-b0": 5_288_548,
    # vit_b_16: patch conv 3 x 16 x 16 x 768 + 768 = 590,592; class token 768; positions 197 x 768 = 151,296;
    # 12 layers x 7,087,872 = 85,054,464; final LayerNorm 1,536; head 768 x 1,000 + 1,000 = 769,000
    "vit-b16": 590_592 + 768 + 151_296 + 12 * LAYER_768 + 1_536 + 769_000,  # = 86,567,656
    "resnext50": 25_028_904,
    # GPT-2 small (Radford et al. 2019; Hugging Face's "gpt2", 124,439,808 with the LM head tied to the token
    # embedding): tokens 50,257 x 768 = 38,597,376; positions 1,024 x 768 = 786,432; 12 x 7,087,872 =
    # 85,054,464; final LayerNorm 1,536
    "gpt2": 38_597_376 + 786_432 + 12 * LAYER_768 + 1_536,  # = 124,439,808
    # BERT-tiny (google-research/bert's uncased_L-2_H-128_A-2: 2 layers, hidden 128, 2 heads, FFN 4 x 128): per
    # layer Q, K, V, output 4 x (128 x 128 + 128) = 66,048; FFN 128 x 512 + 512 = 66,048 and 512 x 128 + 128 =
    # 65,664; two LayerNorms 512: 198,272; the encoder 2 x 198,272 = 396,544. (With the embeddings 30,522 x 128
    # + 512 x 128 + 2 x 128 + LayerNorm 256 = 3,972,864 and the pooler 128 x 128 + 128 = 16,512 the published
    # model has 4,385,920; the zoo's BERT encoders start from hidden states, as bert-base.)
    "bert-tiny": 2 * (4 * (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128) + 2 * 256),
}
assert PARAMETERS["vit-b16"] == 86_567_656 and PARAMETERS["gpt2"] == 124_439_808
assert PARAMETERS["bert-tiny"] == 396_544

#: name -> output shape of the full-size network
OUTPUT = {"vgg16": (1, 1000), "inceptionv3": (1, 1000), "densenet121": (1, 1000), "efficientnet-b0": (1, 1000),
          "vit-b16": (1, 1000), "gpt2": (1, 128, 50257), "resnext50": (1, 1000), "bert-tiny": (1, 128, 128)}


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _call_targets(spec) -> Counter:
    graph = torch.export.export(spec.module, spec.inputs).graph
    return Counter(str(node.target) for node in graph.nodes if node.op == "call_function")


def test_registry_lists_the_networks_and_tensets_test_split():
    assert set(NEW_NETWORKS) <= set(NETWORKS) and set(NEW_TINY) <= set(MODELS)
    assert not any(name.startswith("tiny-") for name in NETWORKS)
    assert set(NETWORKS) | {n for n in MODELS if n.startswith("tiny-")} == set(MODELS)
    assert set(TENSET_TEST_NETWORKS) == {"resnet50", "mobilenetv2", "resnext50", "bert-base", "bert-tiny"}


@pytest.mark.parametrize("name", NEW_NETWORKS)
def test_full_size_network_has_the_published_parameters_and_exports(name):
    """Build, count, export (tracing only: the forward pass of the full sizes runs in the slow tests)."""
    spec = build_model(name)
    assert _params(spec.module) == PARAMETERS[name]
    assert spec.name == name and not spec.module.training
    targets = _call_targets(spec)
    assert not any("attention" in t or "transformer" in t for t in targets)
    if name == "inceptionv3":  # 94 convolutions run in eval mode; the auxiliary classifier's 2 do not
        assert targets["aten.conv2d.default"] == 94
        assert spec.inputs[0].shape == (1, 3, 299, 299)
    if name in ("vit-b16", "gpt2", "bert-tiny"):  # attention written out: softmax and batch matmuls
        assert targets["aten.softmax.int"] == {"vit-b16": 12, "gpt2": 12, "bert-tiny": 2}[name]
        assert targets["aten.matmul.default"] >= 2 * targets["aten.softmax.int"]


def test_vgg16_with_batch_norm_and_inception_without_aux_have_torchvisions_counts():
    # vgg16_bn adds a BatchNorm (weight, bias) to each of the 13 convs: 2 x (2 x 64 + 2 x 128 + 3 x 256 + 6 x 512)
    # = 8,448 -> 138,365,992
    assert _params(vgg(16, batch_norm=True).module) == 138_357_544 + 8_448 == 138_365_992
    # the auxiliary classifier: conv0 768 x 128 + BN 256, conv1 128 x 768 x 25 + BN 1,536, fc 768 x 1,000 + 1,000
    aux = 768 * 128 + 256 + 128 * 768 * 25 + 1_536 + 768 * 1_000 + 1_000
    assert _params(inception_v3(aux_logits=False).module) == 27_161_264 - aux == 23_834_568


def test_gpt2_blocks_and_tied_head():
    module = build_model("gpt2", layers=1, tokens=4).module
    assert _params(module.h) == LAYER_768
    assert module.lm_head.weight is module.wte.weight
    spec = build_model("tiny-gpt2")
    graph = torch.export.export(spec.module, spec.inputs).graph
    gelus = [node for node in graph.nodes if str(node.target) == "aten.gelu.default"]
    assert len(gelus) == 2 and all(node.kwargs.get("approximate") == "tanh" for node in gelus)  # GPT-2's gelu_new


def test_resnext_and_efficientnet_have_grouped_and_depthwise_convolutions():
    resnext = build_model("resnext50").module
    block = resnext.layer1[0]
    assert (block.conv2.groups, block.conv2.in_channels, block.conv3.out_channels) == (32, 128, 256)
    assert all(b.conv2.groups == 32 for stage in (resnext.layer1, resnext.layer4) for b in stage)
    effnet = build_model("efficientnet-b0").module
    mbconvs = [m for m in effnet.modules() if type(m).__name__ == "MBConv"]
    assert len(mbconvs) == 16
    depthwise = [m for m in effnet.modules() if isinstance(m, torch.nn.Conv2d) and m.groups > 1]
    assert len(depthwise) == 16 and all(m.groups == m.in_channels == m.out_channels for m in depthwise)
    assert sorted({m.kernel_size for m in depthwise}) == [(3, 3), (5, 5)]
    assert sum(isinstance(m, torch.nn.SiLU) for m in effnet.modules()) == 1 + 15 + 16 + 16 + 1  # stem, expand, dw, SE, head


@pytest.mark.parametrize("name", NEW_TINY + ["bert-tiny"])
def test_tiny_variant_forward_export_and_seeding(name):
    a, b, other = build_model(name), build_model(name), build_model(name, seed=1)
    with torch.no_grad():
        out = a.module(*a.inputs)
        assert torch.isfinite(out).all()
        assert torch.equal(out, b.module(*b.inputs))
        assert not torch.allclose(out, other.module(*other.inputs))
        program = torch.export.export(a.module, a.inputs)
        assert torch.allclose(program.module()(*a.inputs), out, atol=1e-5, rtol=1e-5)


def test_gpt2_attention_is_causal_and_vit_attention_is_not():
    spec = build_model("tiny-gpt2")
    (tokens,) = spec.inputs
    changed = tokens.clone()
    changed[0, 5] = (tokens[0, 5] + 1) % 64
    with torch.no_grad():
        before, after = spec.module(tokens), spec.module(changed)
    assert torch.equal(before[:, :5], after[:, :5])  # earlier positions do not see a later token
    assert not torch.allclose(before[:, 5:], after[:, 5:])
    vit = build_model("tiny-vit")
    (image,) = vit.inputs
    late = image.clone()
    late[..., 24:, 24:] += 1.0  # the last patch: the class token attends to it
    with torch.no_grad():
        assert not torch.allclose(vit.module(image), vit.module(late))


# ----------------------------------------------------------------------------------- suite files
def test_suite_file_round_trips(tmp_path):
    tasks = [(conv2d(1, 14, 14, 32, 64, 3, padding=1, groups=4, bias=True, activation="relu"), 3),
             (dense(128, 768, 3072, bias=True, activation="gelu"), 12)]
    path = write_suite_file(tmp_path / "net.json", "net", tasks, description="two layers")
    loaded = load_suite_file(path)
    assert [(s.name, s.weight) for s in loaded] == [(f"net/{t.name}", w) for t, w in tasks]
    assert all(s.task.name == s.name for s in loaded)
    assert [s.task for s in loaded] == [dataclasses.replace(t, name=f"net/{t.name}") for t, _ in tasks]
    assert [s.task.key for s in loaded] == [t.key for t, _ in tasks]
    assert json.loads(path.read_text())["description"] == "two layers"
    assert len(path.read_text().splitlines()) == 1 + len(tasks)  # one task per line


def test_bad_suite_files_are_named(tmp_path):
    task = dense(4, 8, 8)
    with pytest.raises(ValueError, match="weight must be a positive int, got 0"):
        write_suite_file(tmp_path / "x.json", "x", [(task, 0)])
    with pytest.raises(ValueError, match="appears twice"):
        write_suite_file(tmp_path / "x.json", "x", [(task, 1), (task, 2)])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        load_suite_file(bad)
    bad.write_text(json.dumps({"format": 9, "model": "x", "tasks": []}))
    with pytest.raises(ValueError, match="format 9, expected 1"):
        load_suite_file(bad)
    good = json.loads(write_suite_file(tmp_path / "good.json", "x", [(task, 2)]).read_text())
    good["tasks"][0]["weight"] = -1
    bad.write_text(json.dumps(good))
    with pytest.raises(ValueError, match="task 0 has weight -1"):
        load_suite_file(bad)
    with pytest.raises(ValueError, match="no suite file for 'nope'"):
        load_shipped_suite("nope")


def test_every_network_ships_a_suite_file_that_loads():
    files = shipped_suite_files()
    assert set(files) == {f"zoo-{name}" for name in NETWORKS}
    for name in NETWORKS:
        suite = load_shipped_suite(f"zoo-{name}")
        assert all(s.name.startswith(f"zoo-{name}/") and s.weight >= 1 for s in suite)
        assert len({s.task.key for s in suite}) == len(suite)  # distinct tasks
        assert [s.name for s in get_suite(f"zoo-{name}")] == [s.name for s in suite]  # a suite like the others
        assert get_task(suite[0].name) == suite[0].task
