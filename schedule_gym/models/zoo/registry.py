"""The zoo's names: :data:`MODELS` and :func:`build_model`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schedule_gym.models.zoo.base import ModelSpec
from schedule_gym.models.zoo.berts import bert
from schedule_gym.models.zoo.densenets import densenet
from schedule_gym.models.zoo.efficientnets import efficientnet
from schedule_gym.models.zoo.gpts import gpt2
from schedule_gym.models.zoo.inceptions import inception_v3
from schedule_gym.models.zoo.mlps import mlp
from schedule_gym.models.zoo.mobilenets import mobilenet_v2
from schedule_gym.models.zoo.recurrent import lstm_lm
from schedule_gym.models.zoo.resnets import resnet, resnext
from schedule_gym.models.zoo.vggs import vgg
from schedule_gym.models.zoo.vits import vit

__all__ = ["MODELS", "NETWORKS", "TENSET_TEST_NETWORKS", "ModelSpec", "build_model"]

_TINY_CNN = {"layers": (1,), "widths": (16,), "strides": (2,), "stem_channels": 8, "stem_kernel": 3,
             "stem_stride": 1, "maxpool": False, "num_classes": 10}
# block 1: no expansion, depthwise stride 1, residual (8 -> 8); block 2: expansion 4, stride 2 (8 -> 16)
_TINY_MOBILENET = {"setting": ((1, 8, 1, 1), (4, 16, 1, 2)), "stem_channels": 8, "last_channel": None,
                   "num_classes": 10}
# stage 1: no expansion, residual (8 -> 8); stage 2: expansion 6, 5x5 depthwise, stride 2, then a residual block
_TINY_EFFICIENTNET = {"setting": ((1, 3, 1, 8, 8, 1), (6, 5, 2, 8, 16, 2)), "last_channel": 32, "num_classes": 10}

#: name -> (builder, its keyword arguments, one-line description)
_REGISTRY: dict[str, tuple[Callable[..., ModelSpec], dict[str, Any], str]] = {
    "resnet18": (resnet, {"depth": 18}, "ResNet-18 (torchvision's architecture), 1x3x224x224"),
    "resnet50": (resnet, {"depth": 50}, "ResNet-50 v1.5 (torchvision's architecture), 1x3x224x224"),
    "mobilenetv2": (mobilenet_v2, {}, "MobileNet-V2 1.0 (torchvision's architecture), 1x3x224x224"),
    "bert-base": (bert, {}, "BERT-base encoder (12 layers, hidden 768, 12 heads), hidden states 1x128x768"),
    "lstm-ptb": (lstm_lm, {}, "PTB small LSTM LM (2 layers, hidden 200, vocab 10000), native cells, 20x20 tokens"),
    "vgg16": (vgg, {"depth": 16}, "VGG-16 without batch norm (torchvision's vgg16), 1x3x224x224"),
    "inceptionv3": (inception_v3, {}, "Inception-v3 (torchvision's; auxiliary classifier not run in eval), 1x3x299x299"),
    "densenet121": (densenet, {"depth": 121}, "DenseNet-121 (torchvision's architecture), 1x3x224x224"),
    "efficientnet-b0": (efficientnet, {}, "EfficientNet-B0 (torchvision's architecture: MBConv, SE, SiLU), 1x3x224x224"),
    "vit-b16": (vit, {}, "ViT-B/16 (torchvision's vit_b_16: 12 layers, hidden 768, 12 heads), 1x3x224x224"),
    "gpt2": (gpt2, {}, "GPT-2 small (12 causal layers, hidden 768, 12 heads, tanh GELU, tied LM head), 1x128 tokens"),
    "resnext50": (resnext, {"depth": 50}, "ResNeXt-50 32x4d (torchvision's architecture), 1x3x224x224"),
    "bert-tiny": (bert, {"layers": 2, "hidden": 128, "heads": 2, "ffn": 512},
                  "BERT-tiny encoder (2 layers, hidden 128, 2 heads, FFN 512), hidden states 1x128x128"),
    "tiny-cnn": (resnet, {"depth": 18, "image": 32, **_TINY_CNN},
                 "conv-bn-relu stem, one BasicBlock with a strided downsample, Linear; 1x3x32x32"),
    "tiny-mobilenet": (mobilenet_v2, {"image": 32, **_TINY_MOBILENET},
                       "stem conv, two inverted-residual blocks (one with a residual), Linear; 1x3x32x32"),
    "tiny-bert": (bert, {"layers": 1, "hidden": 64, "heads": 4, "ffn": 128, "tokens": 16},
                  "one BERT layer, hidden 64, 4 heads, FFN 128; hidden states 1x16x64"),
    "tiny-lstm": (lstm_lm, {"vocab": 50, "hidden": 16, "num_layers": 2, "steps": 4, "batch": 3},
                  "the PTB LSTM LM at vocab 50, hidden 16, 2 layers, 4 steps, batch 3"),
    "tiny-mlp": (mlp, {}, "Linear 32->64, ReLU, Linear 64->10; 4x32"),
    "tiny-vgg": (vgg, {"depth": 16, "image": 32, "config": (8, "M", 16, "M"), "classifier_width": 32,
                       "num_classes": 10},
                 "VGG's structure: two conv-relu + max pool stages (8, 16 channels), three Linears; 1x3x32x32"),
    "tiny-inception": (inception_v3, {"image": 75, "width_divisor": 16, "num_classes": 10},
                       "Inception-v3's whole graph with every channel count divided by 16; 1x3x75x75"),
    "tiny-densenet": (densenet, {"depth": 121, "image": 32, "growth": 4, "blocks": (2, 2), "init_features": 8,
                                 "bn_size": 2, "num_classes": 10},
                      "DenseNet's structure: two dense blocks of 2 layers (growth 4) and a transition; 1x3x32x32"),
    "tiny-efficientnet": (efficientnet, {"image": 32, **_TINY_EFFICIENTNET},
                          "EfficientNet's structure: three MBConv blocks (3x3 and 5x5 depthwise, SE), 1x3x32x32"),
    "tiny-vit": (vit, {"image": 32, "patch": 8, "layers": 2, "hidden": 32, "heads": 2, "mlp": 64, "num_classes": 10},
                 "ViT's structure: 8x8 patches, 2 layers, hidden 32, 2 heads, MLP 64; 1x3x32x32"),
    "tiny-gpt2": (gpt2, {"vocab": 64, "positions": 16, "layers": 2, "hidden": 32, "heads": 2, "tokens": 8},
                  "GPT-2's structure: vocabulary 64, 2 causal layers, hidden 32, 2 heads, tied LM head; 1x8 tokens"),
    "tiny-resnext": (resnext, {"depth": 50, "image": 32, **_TINY_CNN, "groups": 4, "width_per_group": 16},
                     "one ResNeXt Bottleneck (3x3 conv in 4 groups of 4 channels) with a strided downsample; 1x3x32x32"),
}

#: name -> one-line description of every model :func:`build_model` knows
MODELS: dict[str, str] = {name: description for name, (_, _, description) in _REGISTRY.items()}

#: the published networks at full size (every model but the ``tiny-`` test variants)
NETWORKS: tuple[str, ...] = tuple(name for name in _REGISTRY if not name.startswith("tiny-"))

#: TenSet's held-out test networks (Zheng et al. 2021), by their zoo names; the other full-size networks
#: are the training side of a TenSet-compatible split
TENSET_TEST_NETWORKS: tuple[str, ...] = ("resnet50", "mobilenetv2", "resnext50", "bert-base", "bert-tiny")


def build_model(name: str, seed: int = 0, **sizes: Any) -> ModelSpec:
    """The zoo model ``name`` (see :data:`MODELS`) with weights and inputs from ``seed``.

    ``sizes`` override the builder's keyword arguments, e.g. ``build_model("bert-base", layers=1)``.

    >>> spec = build_model("tiny-mlp")
    >>> spec.module(*spec.inputs).shape
    torch.Size([4, 10])
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    builder, kwargs, description = _REGISTRY[name]
    spec = builder(**{**kwargs, **sizes}, seed=seed, name=name)
    if not sizes:
        spec.description = description
    return spec
