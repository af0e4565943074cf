"""The Vision Transformer (Dosovitskiy et al. 2021), torchvision's ``vit_b_16`` architecture."""

from __future__ import annotations

import torch
from torch import nn

from schedule_gym.models.zoo.attention import PreNormBlock
from schedule_gym.models.zoo.base import ModelSpec, seeded

__all__ = ["VisionTransformer", "vit"]


class VisionTransformer(nn.Module):
    """Patches embedded by a ``patch`` x ``patch`` convolution with that stride, a class token, learned
    position embeddings, ``layers`` :class:`PreNormBlock` (exact GELU, LayerNorm eps 1e-6, as
    torchvision's), a final LayerNorm and a Linear head on the class token.

    Parameters as torchvision's ``VisionTransformer`` (``in_proj`` is the block's ``attn.qkv``; module
    names differ). Its dropouts are no-ops in eval mode and are left out.
    """

    def __init__(self, image: int = 224, patch: int = 16, layers: int = 12, hidden: int = 768, heads: int = 12,
                 mlp: int = 3072, num_classes: int = 1000, eps: float = 1e-6) -> None:
        super().__init__()
        if image % patch:
            raise ValueError(f"image size {image} is not a multiple of the patch size {patch}")
        self.hidden, self.patches = hidden, (image // patch) ** 2
        self.conv_proj = nn.Conv2d(3, hidden, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embedding = nn.Parameter(torch.empty(1, self.patches + 1, hidden).normal_(std=0.02))
        self.layers = nn.ModuleList(PreNormBlock(hidden, heads, mlp, eps) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.hidden, self.patches).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, 1, self.hidden), x], dim=1) + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


def vit(*, image: int = 224, patch: int = 16, layers: int = 12, hidden: int = 768, heads: int = 12,
        mlp: int = 3072, num_classes: int = 1000, batch: int = 1, seed: int = 0, name: str = "vit-b16") -> ModelSpec:
    """A :class:`VisionTransformer` on ``[batch, 3, image, image]`` (the defaults are ViT-B/16's);
    PyTorch's default initialisation, position embeddings ~ N(0, 0.02)."""

    def make():
        module = VisionTransformer(image, patch, layers, hidden, heads, mlp, num_classes)
        return module, (torch.randn(batch, 3, image, image),)

    module, inputs = seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"ViT: patch {patch}, {layers} pre-norm layers, hidden {hidden}, {heads} heads, MLP {mlp}, "
                     f"input {list(inputs[0].shape)} (random weights)")
