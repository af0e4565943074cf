"""EfficientNet (Tan and Le 2019), torchvision's ``efficientnet_b0`` architecture and module names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, image_spec
from schedule_gym.models.zoo.mobilenets import conv_norm_activation

__all__ = ["EFFICIENTNET_B0_SETTING", "EfficientNet", "MBConv", "SqueezeExcitation", "efficientnet"]

#: torchvision's B0 stages: (expand ratio, kernel, first stride, input channels, output channels, layers)
EFFICIENTNET_B0_SETTING: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's: ``v`` rounded to the nearest multiple of ``divisor``, never below 90% of ``v``."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class SqueezeExcitation(nn.Module):
    """Mean over the spatial dimensions, 1x1 conv to ``squeeze`` channels, SiLU, 1x1 conv back,
    sigmoid: the per-channel scale of the input."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.activation(self.fc1(x.mean((2, 3), keepdim=True))))
        return self.scale_activation(scale) * x


class MBConv(nn.Module):
    """1x1 expansion with SiLU (when the ratio is not 1), ``kernel`` x ``kernel`` depthwise with SiLU and the
    stride, squeeze-excitation (to a quarter of the input channels), 1x1 linear projection; a residual
    when the stride is 1 and the channels stay the same (stochastic depth is the identity in eval mode)."""

    def __init__(self, cin: int, cout: int, expand_ratio: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = _make_divisible(cin * expand_ratio)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_norm_activation(cin, expanded, 1, activation=nn.SiLU))
        layers += [conv_norm_activation(expanded, expanded, kernel, stride, groups=expanded, activation=nn.SiLU),
                   SqueezeExcitation(expanded, max(1, cin // 4)),
                   conv_norm_activation(expanded, cout, 1, activation=None)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res_connect else self.block(x)


class EfficientNet(nn.Module):
    """torchvision's EfficientNet (``features``, ``classifier``) with its sizes as arguments: a 3x3/2 stem
    conv with SiLU, the :class:`MBConv` stages of ``setting`` (as :data:`EFFICIENTNET_B0_SETTING`), a 1x1
    conv to ``last_channel`` (None: 4 x the last stage's channels) with SiLU, mean pool, Linear. The
    classifier's Dropout is a no-op in eval mode and left out (``nn.Identity`` keeps ``classifier.1``)."""

    def __init__(self, setting: Sequence[tuple[int, int, int, int, int, int]] = EFFICIENTNET_B0_SETTING,
                 last_channel: int | None = None, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_norm_activation(3, setting[0][3], 3, 2, activation=nn.SiLU)]
        for expand, kernel, stride, cin, cout, n in setting:
            layers.append(nn.Sequential(*(MBConv(cin if i == 0 else cout, cout, expand, kernel, stride if i == 0 else 1)
                                          for i in range(n))))
        last = last_channel or 4 * setting[-1][4]
        layers.append(conv_norm_activation(setting[-1][4], last, 1, activation=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Identity(), nn.Linear(last, num_classes))

    def init_classifier(self) -> None:
        """torchvision's: the classifier ~ U(-1/sqrt(classes), 1/sqrt(classes)), bias 0."""
        linear = self.classifier[1]
        bound = 1.0 / math.sqrt(linear.out_features)
        with torch.no_grad():
            nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def efficientnet(*, seed: int = 0, batch: int = 1, image: int = 224, name: str = "efficientnet-b0",
                 **sizes: Any) -> ModelSpec:
    """EfficientNet-B0 on ``[batch, 3, image, image]``; ``sizes`` override :class:`EfficientNet`'s arguments."""
    return image_spec(name, lambda: EfficientNet(**sizes), seed, batch, image,
                      "EfficientNet-B0 (torchvision's architecture, random weights)")
