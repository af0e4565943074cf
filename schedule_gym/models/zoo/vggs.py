"""VGG (Simonyan and Zisserman 2015), torchvision's ``vgg11`` ... ``vgg19`` (``_bn``: with batch norm)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, image_spec

__all__ = ["VGG", "VGG_CONFIGS", "vgg"]

#: torchvision's ``cfgs``: output channels of each 3x3 convolution, "M" a 2x2 max pool
VGG_CONFIGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


class VGG(nn.Module):
    """torchvision's VGG (``features``, ``classifier``) with its sizes as arguments.

    ``config`` as :data:`VGG_CONFIGS`; each convolution (3x3, padding 1, with bias) is followed by
    BatchNorm when ``batch_norm`` and by ReLU. The classifier (Linear, ReLU, Linear, ReLU, Linear of
    ``classifier_width``) reads the flattened last feature map, ``image / 2**pools`` on a side.
    torchvision's ``AdaptiveAvgPool2d((7, 7))`` is the identity on the 7x7 map of a 224x224 input and its
    Dropouts are no-ops in eval mode: they are left out (``nn.Identity`` keeps the Linears' names).
    """

    def __init__(self, config: Sequence[int | str] = VGG_CONFIGS[16], batch_norm: bool = False, image: int = 224,
                 classifier_width: int = 4096, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin, side = 3, image
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, stride=2))
                side //= 2
            else:
                layers.append(nn.Conv2d(cin, int(v), 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(int(v)))
                layers.append(nn.ReLU())
                cin = int(v)
        if side < 1:
            raise ValueError(f"image size {image} is too small for {config.count('M')} max pools")
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(cin * side * side, classifier_width), nn.ReLU(), nn.Identity(),
                                        nn.Linear(classifier_width, classifier_width), nn.ReLU(), nn.Identity(),
                                        nn.Linear(classifier_width, num_classes))

    def init_classifier(self) -> None:
        """torchvision's: Linear weights ~ N(0, 0.01), biases 0."""
        with torch.no_grad():
            for m in self.classifier:
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0.0, 0.01)
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def vgg(depth: int = 16, *, batch_norm: bool = False, seed: int = 0, batch: int = 1, image: int = 224,
        name: str | None = None, **sizes: Any) -> ModelSpec:
    """VGG-``depth`` (11, 13, 16, 19; ``batch_norm``: torchvision's ``vgg16_bn``...) on ``[batch, 3, image,
    image]``; ``sizes`` override :class:`VGG`'s arguments (``config``, ``classifier_width``, ``num_classes``)."""
    if depth not in VGG_CONFIGS:
        raise ValueError(f"VGG depth {depth}: known depths are {', '.join(map(str, VGG_CONFIGS))}")
    kwargs = {"config": VGG_CONFIGS[depth], "batch_norm": batch_norm, "image": image, **sizes}
    bn = " with batch norm" if batch_norm else ""
    return image_spec(name or f"vgg{depth}{'_bn' * batch_norm}", lambda: VGG(**kwargs), seed, batch, image,
                      f"VGG-{depth}{bn} (torchvision's architecture, random weights)")
