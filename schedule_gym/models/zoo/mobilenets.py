"""MobileNet-V2 (torchvision's, width 1.0), and torchvision's Conv2dNormActivation, which EfficientNet shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, image_spec

__all__ = ["MOBILENET_V2_SETTING", "InvertedResidual", "MobileNetV2", "conv_norm_activation", "mobilenet_v2"]


def conv_norm_activation(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                         activation: Callable[[], nn.Module] | None = nn.ReLU6, eps: float = 1e-5) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: a bias-free conv with "same" padding, BatchNorm and
    ``activation`` (None: none), with its module names 0, 1, 2."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout, eps=eps)]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """1x1 expansion (when ``expand_ratio`` != 1), 3x3 depthwise with the stride, 1x1 linear projection;
    a residual when the stride is 1 and the channels stay the same."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(conv_norm_activation(inp, hidden, kernel=1))
        layers += [conv_norm_activation(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


#: torchvision's MobileNet-V2 blocks: (expand ratio t, channels c, repeats n, first stride s)
MOBILENET_V2_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 (``features``, ``classifier``) with its sizes as arguments.

    ``setting`` as :data:`MOBILENET_V2_SETTING`; ``last_channel`` None leaves out the final 1x1
    conv. The classifier's Dropout is a no-op in eval mode and is left out (an ``nn.Identity`` keeps
    torchvision's ``classifier.1`` name for the Linear).
    """

    def __init__(self, setting: Sequence[tuple[int, int, int, int]] = MOBILENET_V2_SETTING,
                 stem_channels: int = 32, last_channel: int | None = 1280, num_classes: int = 1000) -> None:
        super().__init__()
        features: list[nn.Module] = [conv_norm_activation(3, stem_channels, stride=2)]
        cin = stem_channels
        for t, c, n, s in setting:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        if last_channel is not None:
            features.append(conv_norm_activation(cin, last_channel, kernel=1))
            cin = last_channel
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Identity(), nn.Linear(cin, num_classes))

    def init_classifier(self) -> None:
        """torchvision's: the classifier ~ N(0, 0.01), bias 0."""
        with torch.no_grad():
            nn.init.normal_(self.classifier[1].weight, 0.0, 0.01)
            nn.init.zeros_(self.classifier[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def mobilenet_v2(*, seed: int = 0, batch: int = 1, image: int = 224, name: str = "mobilenetv2",
                 **sizes: Any) -> ModelSpec:
    """MobileNet-V2 on ``[batch, 3, image, image]``; ``sizes`` override :class:`MobileNetV2`'s arguments."""
    return image_spec(name, lambda: MobileNetV2(**sizes), seed, batch, image,
                      "MobileNet-V2 (torchvision's architecture, random weights)")
