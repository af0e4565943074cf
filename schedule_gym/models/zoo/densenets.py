"""DenseNet (Huang et al. 2017), torchvision's ``densenet121`` architecture and module names."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, image_spec

__all__ = ["DenseLayer", "DenseNet", "densenet"]


class DenseLayer(nn.Module):
    """BN, ReLU, 1x1 conv to ``bn_size * growth`` channels, BN, ReLU, 3x3 conv to ``growth`` channels,
    on the concatenation of every earlier feature map of the block."""

    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        bottleneck = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    """``denselayer1`` ... ``denselayerN``; the output concatenates the input and every layer's output."""

    def __init__(self, layers: int, cin: int, growth: int, bn_size: int) -> None:
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth, bn_size) for i in range(layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    """torchvision's DenseNet with its sizes as arguments (the defaults are DenseNet-121's): a 7x7/2 stem
    conv, BN, ReLU, 3x3/2 max pool; dense blocks of ``blocks`` layers each, joined by transitions (BN,
    ReLU, 1x1 conv halving the channels, 2x2 average pool); BN, ReLU, mean pool, Linear."""

    def __init__(self, growth: int = 32, blocks: Sequence[int] = (6, 12, 24, 16), init_features: int = 64,
                 bn_size: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        features = nn.Sequential()
        features.add_module("conv0", nn.Conv2d(3, init_features, 7, stride=2, padding=3, bias=False))
        features.add_module("norm0", nn.BatchNorm2d(init_features))
        features.add_module("relu0", nn.ReLU())
        features.add_module("pool0", nn.MaxPool2d(3, stride=2, padding=1))
        channels = init_features
        for i, layers in enumerate(blocks):
            features.add_module(f"denseblock{i + 1}", DenseBlock(layers, channels, growth, bn_size))
            channels += layers * growth
            if i != len(blocks) - 1:
                features.add_module(f"transition{i + 1}", nn.Sequential(OrderedDict(
                    norm=nn.BatchNorm2d(channels), relu=nn.ReLU(), conv=nn.Conv2d(channels, channels // 2, 1, bias=False),
                    pool=nn.AvgPool2d(2, stride=2))))
                channels //= 2
        features.add_module("norm5", nn.BatchNorm2d(channels))
        self.features = features
        self.classifier = nn.Linear(channels, num_classes)

    def init_classifier(self) -> None:
        """torchvision's: the classifier's bias 0."""
        with torch.no_grad():
            nn.init.zeros_(self.classifier.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.relu(self.features(x)).mean((2, 3)))


def densenet(depth: int = 121, *, seed: int = 0, batch: int = 1, image: int = 224, name: str | None = None,
             **sizes: Any) -> ModelSpec:
    """DenseNet-``depth`` (121: blocks (6, 12, 24, 16), growth 32; 169: (6, 12, 32, 32); 201: (6, 12, 48,
    32)) on ``[batch, 3, image, image]``; ``sizes`` override :class:`DenseNet`'s arguments."""
    configs = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32), 201: (6, 12, 48, 32)}
    if depth not in configs:
        raise ValueError(f"DenseNet depth {depth}: known depths are {', '.join(map(str, configs))}")
    kwargs = {"blocks": configs[depth], **sizes}
    return image_spec(name or f"densenet{depth}", lambda: DenseNet(**kwargs), seed, batch, image,
                      f"DenseNet-{depth} (torchvision's architecture, random weights)", init_mode="fan_in")
