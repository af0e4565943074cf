"""Inception-v3 (Szegedy et al. 2016), torchvision's ``inception_v3`` architecture and module names.

Every convolution is torchvision's BasicConv2d (bias-free conv, BatchNorm eps 0.001, ReLU). The
auxiliary classifier (``AuxLogits``) is built, so the parameters are torchvision's with
``aux_logits=True``, but as in torchvision it runs only in training: the eval-mode graph (what is
exported, imported and mapped) does not contain it. ``width_divisor`` divides every channel count
(all are multiples of 16), for small test variants of the same graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from schedule_gym.models.zoo.base import ModelSpec, image_spec

__all__ = ["Inception3", "inception_v3"]

Pad = int | tuple[int, int]


class BasicConv2d(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: Pad, stride: int = 1, padding: Pad = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _avg_pool(x: torch.Tensor) -> torch.Tensor:
    """The branches' 3x3 average pool, stride 1, padding 1 (zeros counted, as torchvision's)."""
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool_features: int, d: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 64 // d, 1)
        self.branch5x5_1 = BasicConv2d(cin, 48 // d, 1)
        self.branch5x5_2 = BasicConv2d(48 // d, 64 // d, 5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64 // d, 1)
        self.branch3x3dbl_2 = BasicConv2d(64 // d, 96 // d, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96 // d, 96 // d, 3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1x1(x), self.branch5x5_2(self.branch5x5_1(x)),
                          self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                          self.branch_pool(_avg_pool(x))], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int, d: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384 // d, 3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64 // d, 1)
        self.branch3x3dbl_2 = BasicConv2d(64 // d, 96 // d, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96 // d, 96 // d, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch3x3(x), self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                          F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int, d: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 192 // d, 1)
        self.branch7x7_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7_2 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192 // d, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192 // d, (1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(cin, 192 // d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        dbl = self.branch7x7dbl_1(x)
        for conv in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            dbl = conv(dbl)
        return torch.cat([self.branch1x1(x), b7, dbl, self.branch_pool(_avg_pool(x))], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int, d: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(cin, 192 // d, 1)
        self.branch3x3_2 = BasicConv2d(192 // d, 320 // d, 3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(cin, 192 // d, 1)
        self.branch7x7x3_2 = BasicConv2d(192 // d, 192 // d, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192 // d, 192 // d, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192 // d, 192 // d, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([self.branch3x3_2(self.branch3x3_1(x)), b7, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int, d: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 320 // d, 1)
        self.branch3x3_1 = BasicConv2d(cin, 384 // d, 1)
        self.branch3x3_2a = BasicConv2d(384 // d, 384 // d, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384 // d, 384 // d, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 448 // d, 1)
        self.branch3x3dbl_2 = BasicConv2d(448 // d, 384 // d, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384 // d, 384 // d, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384 // d, 384 // d, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 192 // d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_1(x)
        dbl = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        return torch.cat([self.branch1x1(x), torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1),
                          torch.cat([self.branch3x3dbl_3a(dbl), self.branch3x3dbl_3b(dbl)], 1),
                          self.branch_pool(_avg_pool(x))], 1)


class InceptionAux(nn.Module):
    """The auxiliary classifier on Mixed_6e's output (run in training only)."""

    def __init__(self, cin: int, num_classes: int, d: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(cin, 128 // d, 1)
        self.conv1 = BasicConv2d(128 // d, 768 // d, 5)
        self.fc = nn.Linear(768 // d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(x.mean((2, 3)))


class Inception3(nn.Module):
    """torchvision's Inception3 (``transform_input=False``) on a 299x299 input (75x75 at least); the
    final Dropout is a no-op in eval mode and left out. ``aux_logits`` builds :class:`InceptionAux`;
    ``width_divisor`` divides every channel count."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True, width_divisor: int = 1) -> None:
        super().__init__()
        d = width_divisor
        if d < 1 or 16 % d:
            raise ValueError(f"width_divisor must divide 16 (every channel count is a multiple of 16), got {d}")
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32 // d, 3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32 // d, 32 // d, 3)
        self.Conv2d_2b_3x3 = BasicConv2d(32 // d, 64 // d, 3, padding=1)
        self.maxpool1 = nn.MaxPool2d(3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(64 // d, 80 // d, 1)
        self.Conv2d_4a_3x3 = BasicConv2d(80 // d, 192 // d, 3)
        self.maxpool2 = nn.MaxPool2d(3, stride=2)
        self.Mixed_5b = InceptionA(192 // d, 32 // d, d)
        self.Mixed_5c = InceptionA(256 // d, 64 // d, d)
        self.Mixed_5d = InceptionA(288 // d, 64 // d, d)
        self.Mixed_6a = InceptionB(288 // d, d)
        self.Mixed_6b = InceptionC(768 // d, 128 // d, d)
        self.Mixed_6c = InceptionC(768 // d, 160 // d, d)
        self.Mixed_6d = InceptionC(768 // d, 160 // d, d)
        self.Mixed_6e = InceptionC(768 // d, 192 // d, d)
        self.AuxLogits = InceptionAux(768 // d, num_classes, d) if aux_logits else None
        self.Mixed_7a = InceptionD(768 // d, d)
        self.Mixed_7b = InceptionE(1280 // d, d)
        self.Mixed_7c = InceptionE(2048 // d, d)
        self.fc = nn.Linear(2048 // d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in (self.Conv2d_1a_3x3, self.Conv2d_2a_3x3, self.Conv2d_2b_3x3, self.maxpool1, self.Conv2d_3b_1x1,
                      self.Conv2d_4a_3x3, self.maxpool2, self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a,
                      self.Mixed_6b, self.Mixed_6c, self.Mixed_6d, self.Mixed_6e, self.Mixed_7a, self.Mixed_7b,
                      self.Mixed_7c):
            x = stage(x)
        return self.fc(x.mean((2, 3)))


def inception_v3(*, seed: int = 0, batch: int = 1, image: int = 299, name: str = "inceptionv3",
                 **sizes: Any) -> ModelSpec:
    """Inception-v3 on ``[batch, 3, image, image]``; ``sizes`` override :class:`Inception3`'s arguments."""
    if image < 75:
        raise ValueError(f"Inception-v3 needs an image of 75x75 or more, got {image}")
    return image_spec(name, lambda: Inception3(**sizes), seed, batch, image,
                      "Inception-v3 (torchvision's architecture, auxiliary classifier built but not run, random weights)", init_mode="fan_in")
