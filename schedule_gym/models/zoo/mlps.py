"""A two-layer perceptron (the smallest model, for tests)."""

from __future__ import annotations

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, seeded

__all__ = ["MLP", "mlp"]


class MLP(nn.Module):
    """Linear, ReLU, Linear."""

    def __init__(self, inputs: int = 32, hidden: int = 64, outputs: int = 10) -> None:
        super().__init__()
        self.fc1, self.relu, self.fc2 = nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.fc1(x)))


def mlp(*, inputs: int = 32, hidden: int = 64, outputs: int = 10, batch: int = 4, seed: int = 0,
        name: str = "tiny-mlp") -> ModelSpec:
    """:class:`MLP` on ``[batch, inputs]``."""

    def make():
        return MLP(inputs, hidden, outputs), (torch.randn(batch, inputs),)

    module, example = seeded(seed, make)
    return ModelSpec(name, module, example,
                     f"MLP: Linear {inputs}->{hidden}, ReLU, Linear {hidden}->{outputs}, input {[batch, inputs]}")
