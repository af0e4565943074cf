"""What every zoo family shares: :class:`ModelSpec`, seeded building and the CNN initialisation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ModelSpec", "image_spec", "init_cnn", "seeded"]


@dataclass
class ModelSpec:
    """A model ready to run or export: ``module(*inputs)``; the module is in ``eval()`` mode."""

    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    description: str


def seeded(seed: int, make: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
           ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``make()`` under ``torch.manual_seed(seed)``, the global RNG state restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module, inputs = make()
    return module.eval(), inputs


def init_cnn(module: nn.Module, mode: str = "fan_out") -> None:
    """Convolutions Kaiming normal over ``mode`` (torchvision's ResNet init: fan-out; ``"fan_in"`` keeps
    the activations of networks that concatenate or reduce many channels in 1x1 convolutions near unit
    scale); batch norm with non-trivial inference statistics and affine parameters, so that folding it
    into the convolutions changes something."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)


def image_spec(name: str, module_of: Callable[[], nn.Module], seed: int, batch: int, image: int,
               what: str, init_mode: str = "fan_out") -> ModelSpec:
    """A CNN on ``[batch, 3, image, image]``: ``module_of()`` built and initialised (:func:`init_cnn` with
    ``init_mode``, then the module's own ``init_classifier()`` if it has one) under ``seed``; ``what``
    heads the description."""

    def make():
        module = module_of()
        init_cnn(module, init_mode)
        if hasattr(module, "init_classifier"):
            module.init_classifier()
        return module, (torch.randn(batch, 3, image, image),)

    module, inputs = seeded(seed, make)
    return ModelSpec(name, module, inputs, f"{what}, input {list(inputs[0].shape)}")
