"""The zoo's TenSet-compatible networks through import and optimization mapping (schedule_gym.models.pipeline).

The tiny variants run the whole path (import, mapping, build, run against PyTorch) in the TVM suite; every
full-size network's import and mapping (every convolution, matmul and pool a task, with the architecture's call
counts as weights), and its shipped suite file, are checked in the slow suite (a minute or more each: each
network is loaded once, and a tiny variant once per module).
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs  # noqa: E402
from schedule_gym.models.zoo import NETWORKS  # noqa: E402
from schedule_gym.tasks.suite_files import load_shipped_suite  # noqa: E402

pytestmark = pytest.mark.tvm

#: tiny variant -> kernel calls per run by operator, from the architectures: tiny-vgg 2 convs + 3 Linears;
#: tiny-inception Inception-v3's 94 eval-mode convs + fc; tiny-densenet stem + 2 blocks x 2 layers x 2 convs +
#: a transition + classifier; tiny-efficientnet stem + 3 MBConvs (dw, SE's 2, projection; the last two with an
#: expansion) + head + classifier; tiny-vit the patch conv, 2 layers x (QKV, output, 2 MLP) Linears + head and
#: 2 x 2 attention matmuls; tiny-gpt2 the same Linears + the tied LM head; tiny-resnext stem + a Bottleneck's 3
#: convs + the downsample + fc; BERT-tiny 2 layers x (Q, K, V, output, 2 FFN) and 2 x 2 attention matmuls
TINY_CALLS = {
    "tiny-vgg": {"conv2d": 2, "dense": 3},
    "tiny-inception": {"conv2d": 94, "dense": 1},
    "tiny-densenet": {"conv2d": 10, "dense": 1},
    "tiny-efficientnet": {"conv2d": 16, "dense": 1},
    "tiny-vit": {"conv2d": 1, "dense": 9, "batch_matmul": 4},
    "tiny-gpt2": {"dense": 9, "batch_matmul": 4},
    "tiny-resnext": {"conv2d": 5, "dense": 1},
    "bert-tiny": {"dense": 12, "batch_matmul": 4},
}

#: a tiny variant loaded once for the tests of this module (a loaded model is not changed by building it)
_load_tiny = functools.cache(load_model)

#: full-size network -> kernel calls per run: ResNet-18 17 convs + 3 downsample convs + fc, ResNet-50 49 + 4 +
#: fc, MobileNet-V2 52 convs + classifier, BERT-base 12 layers x (Q, K, V, O, FFN up, FFN down dense + 2 batch
#: matmuls), the PTB LSTM 2 merged input projections, 38 recurrent steps' matmuls (step 0 of each layer has
#: none: its state is zero) and the decoder; VGG-16 13 convs + 3 Linears; Inception-v3 94 convs + fc;
#: DenseNet-121 stem + 58 dense layers x 2 + 3 transitions, classifier; EfficientNet-B0 stem + 16 MBConvs x
#: (dw, SE's 2, projection) + 15 expansions + head = 81, classifier; ViT-B/16 patch conv, 12 x 4 Linears +
#: head, 12 x 2 attention matmuls; GPT-2 12 x 4 Linears + LM head, 12 x 2 matmuls; ResNeXt-50 as ResNet-50
FULL_CALLS = {
    "resnet18": {"conv2d": 20, "dense": 1},
    "resnet50": {"conv2d": 53, "dense": 1},
    "mobilenetv2": {"conv2d": 52, "dense": 1},
    "bert-base": {"dense": 72, "batch_matmul": 24},
    "lstm-ptb": {"dense": 41},
    "vgg16": {"conv2d": 13, "dense": 3},
    "inceptionv3": {"conv2d": 94, "dense": 1},
    "densenet121": {"conv2d": 120, "dense": 1},
    "efficientnet-b0": {"conv2d": 81, "dense": 1},
    "vit-b16": {"conv2d": 1, "dense": 49, "batch_matmul": 24},
    "gpt2": {"dense": 49, "batch_matmul": 24},
    "resnext50": {"conv2d": 53, "dense": 1},
    "bert-tiny": {"dense": 12, "batch_matmul": 4},
}

assert set(FULL_CALLS) == set(NETWORKS), "every zoo network has its call counts here"

#: networks whose every task is counted: the calls of their other operators (the max pool after a ResNet stem,
#: the global average pools) and none besides
FULL_OTHER_CALLS = {"resnet18": {"pool2d": 2}, "resnet50": {"pool2d": 2}, "mobilenetv2": {"pool2d": 1},
                    "bert-base": {}, "lstm-ptb": {}}

#: the operators whose every layer the mapping must find (pooling and the rest may be mapped or left to TVM)
LAYER_OPS = ("conv2d", "dense", "batch_matmul")


def _calls(loaded, ops: tuple[str, ...] | None = LAYER_OPS) -> dict[str, int]:
    """Kernel calls per run by operator, of ``ops`` (None: every operator)."""
    calls: Counter = Counter()
    for t in loaded.mapped.tasks:
        if ops is None or t.task.op in ops:
            calls[t.task.op] += t.weight
    return dict(calls)


def _check_mapping(name: str, loaded, expected: dict[str, int]) -> None:
    assert _calls(loaded) == expected
    left = loaded.mapped.report.left
    assert not any(op in left for op in ("relax.nn.conv2d", "relax.matmul")), left
    tasks = [t.task for t in loaded.mapped.tasks]
    convs = [t for t in tasks if t.op == "conv2d"]
    if "resnext" in name:  # grouped, not depthwise: 32 (4) groups of 4 channels or more
        grouped = [t for t in convs if 1 < t.param("groups") < t.extent_of["co"]]
        assert grouped and all(t.extent_of["rc"] >= 4 for t in grouped)
    if "efficientnet" in name:  # depthwise: one input channel per group, 3x3 and 5x5
        depthwise = [t for t in convs if t.param("groups") == t.extent_of["co"] and t.extent_of["rc"] == 1]
        assert {t.extent_of["rh"] for t in depthwise} == {3, 5}
    if any(k in name for k in ("vit", "gpt2", "bert")):  # Q @ K^T (transpose folded) and P @ V
        bmm = {t.param("transpose_b") for t in tasks if t.op == "batch_matmul"}
        assert bmm == {True, False}


@pytest.mark.parametrize("name", list(TINY_CALLS))
def test_tiny_variant_maps_to_the_expected_tasks(name):
    _check_mapping(name, _load_tiny(name), TINY_CALLS[name])


#: the operators the other zoo models lack: GPT-2's embedding take, causal where and tanh GELU; Inception's
#: average pools that count padding and its 1x7 / 7x1 convolutions; EfficientNet's SE and 5x5 depthwise
@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-inception", "tiny-efficientnet"])
def test_tiny_variant_built_from_its_mapping_runs_as_pytorch(name):
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels

    loaded = _load_tiny(name)
    executable = compile_model(schedule_kernels(loaded.mapped, {}, "s0"), host_llvm_target(1))
    reference = torch_outputs(loaded.spec)
    assert all(np.isfinite(r).all() for r in reference)
    assert check_outputs(run_model(executable, loaded.spec.inputs), reference) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_full_size_network_maps_and_its_shipped_suite_is_its_mapping(name):
    """The network's conv2d/dense/batch matmul layers (and, where counted, every other task) become tasks with
    the call counts of the architecture, and its suite file in schedule_gym/data/suites lists exactly the mapped
    tasks with their weights (else rerun examples/make_zoo_suites.py)."""
    loaded = load_model(name)
    _check_mapping(name, loaded, FULL_CALLS[name])
    if name in FULL_OTHER_CALLS:
        assert _calls(loaded, None) == {**FULL_CALLS[name], **FULL_OTHER_CALLS[name]}
        assert "relax.nn.max_pool2d" not in loaded.mapped.report.left
    if name == "lstm-ptb":
        assert loaded.lstm is not None and loaded.lstm.layers == 2 and loaded.lstm.steps == 20
    shipped = [(s.name, s.task.key, s.weight) for s in load_shipped_suite(f"zoo-{name}")]
    assert shipped == [(f"zoo-{name}/{t.task.name}", t.task.key, t.weight) for t in loaded.mapped.tasks]
    assert all(np.isfinite(r).all() for r in torch_outputs(loaded.spec))
