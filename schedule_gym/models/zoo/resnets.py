"""ResNet (torchvision's BasicBlock / Bottleneck v1.5) and ResNeXt (the Bottleneck with grouped 3x3
convolutions), with torchvision's module names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, image_spec

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet", "resnext"]


def _conv3x3(cin: int, cout: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 conv-bn layers and a shortcut (a strided 1x1 conv-bn when the shape changes)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64) -> None:
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError(f"BasicBlock takes groups 1 and base width 64, got {groups} and {base_width}")
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride: v1.5), 1x1 expand by 4; shortcut as in BasicBlock.

    The inner width is ``int(planes * base_width / 64) * groups`` and the 3x3 convolution has ``groups``
    groups (torchvision's): ResNet's defaults give ``planes``; ResNeXt-50 32x4d's (32, 4) twice that.
    """

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with its sizes as arguments (the defaults are ResNet-18's).

    ``layers`` blocks per stage, ``widths`` the stages' planes, ``strides`` their first block's stride;
    the stem is a ``stem_kernel`` conv with stride ``stem_stride``, BN, ReLU and (``maxpool``) a 3x3/2
    max pool; the head a mean over the spatial dimensions and a Linear to ``num_classes``. ``groups``
    and ``width_per_group`` go to every :class:`Bottleneck` (ResNeXt).
    """

    def __init__(self, block: type[BasicBlock] | type[Bottleneck] = BasicBlock,
                 layers: Sequence[int] = (2, 2, 2, 2), widths: Sequence[int] = (64, 128, 256, 512),
                 strides: Sequence[int] = (1, 2, 2, 2), stem_channels: int = 64, stem_kernel: int = 7,
                 stem_stride: int = 2, maxpool: bool = True, num_classes: int = 1000, groups: int = 1,
                 width_per_group: int = 64) -> None:
        super().__init__()
        if not len(layers) == len(widths) == len(strides):
            raise ValueError(f"layers {layers}, widths {widths} and strides {strides} differ in length")
        self.groups, self.base_width = groups, width_per_group
        self.conv1 = nn.Conv2d(3, stem_channels, stem_kernel, stride=stem_stride, padding=stem_kernel // 2,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(stem_channels)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if maxpool else nn.Identity()
        self.inplanes = stem_channels
        for i, (n, planes, stride) in enumerate(zip(layers, widths, strides)):
            setattr(self, f"layer{i + 1}", self._make_layer(block, planes, n, stride))
        self.num_stages = len(layers)
        self.fc = nn.Linear(widths[-1] * block.expansion, num_classes)

    def _make_layer(self, block: Any, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(_conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        out = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        out += [block(self.inplanes, planes, groups=self.groups, base_width=self.base_width)
                for _ in range(1, blocks)]
        return nn.Sequential(*out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(x.mean((2, 3)))


_DEPTHS = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)),
           50: (Bottleneck, (3, 4, 6, 3)), 101: (Bottleneck, (3, 4, 23, 3))}


def resnet(depth: int = 18, *, seed: int = 0, batch: int = 1, image: int = 224, name: str | None = None,
           **sizes: Any) -> ModelSpec:
    """ResNet-``depth`` (18: BasicBlock [2, 2, 2, 2]; 34: BasicBlock [3, 4, 6, 3]; 50: Bottleneck
    [3, 4, 6, 3]; 101: Bottleneck [3, 4, 23, 3]) on ``[batch, 3, image, image]``; ``sizes`` override
    :class:`ResNet`'s arguments (``layers``, ``widths``, ``strides``, stem, ``num_classes``)."""
    if depth not in _DEPTHS:
        raise ValueError(f"ResNet depth {depth}: known depths are {', '.join(map(str, _DEPTHS))}")
    block, layers = _DEPTHS[depth]
    kwargs = {"block": block, "layers": layers, **sizes}
    return image_spec(name or f"resnet{depth}", lambda: ResNet(**kwargs), seed, batch, image,
                      f"ResNet-{depth} (torchvision's architecture, random weights)")


def resnext(depth: int = 50, *, groups: int = 32, width_per_group: int = 4, seed: int = 0, batch: int = 1,
            image: int = 224, name: str | None = None, **sizes: Any) -> ModelSpec:
    """ResNeXt-``depth`` ``groups`` x ``width_per_group``d (Xie et al. 2017; torchvision's
    ``resnext50_32x4d`` by default): the Bottleneck ResNet with grouped 3x3 convolutions."""
    if depth not in _DEPTHS or _DEPTHS[depth][0] is not Bottleneck:
        raise ValueError(f"ResNeXt depth {depth}: known depths are 50 and 101")
    kwargs = {"block": Bottleneck, "layers": _DEPTHS[depth][1], "groups": groups,
              "width_per_group": width_per_group, **sizes}
    return image_spec(name or f"resnext{depth}", lambda: ResNet(**kwargs), seed, batch, image,
                      f"ResNeXt-{depth} {groups}x{width_per_group}d (torchvision's architecture, random weights)")
