"""BERT's encoder (post-norm layers on hidden states, no embeddings): BERT-base and BERT-tiny."""

from __future__ import annotations

import math

import torch
from torch import nn

from schedule_gym.models.zoo.attention import attend, merge_heads, split_heads
from schedule_gym.models.zoo.base import ModelSpec, seeded

__all__ = ["BertEncoder", "BertLayer", "bert"]


class BertLayer(nn.Module):
    """One post-norm BERT layer: self-attention (Q, K, V, output Linears), residual + LayerNorm,
    FFN (Linear, exact GELU, Linear), residual + LayerNorm."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072, eps: float = 1e-12) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        self.heads, self.head_dim = heads, hidden // heads
        self.scale = float(math.sqrt(self.head_dim))
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.gelu = nn.GELU()  # the exact (erf) form, as BERT's
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (split_heads(self.query(x), self.heads), split_heads(self.key(x), self.heads),
                   split_heads(self.value(x), self.heads))
        context = merge_heads(attend(q, k, v, self.scale))
        x = self.attention_norm(x + self.attention_output(context))
        return self.output_norm(x + self.output(self.gelu(self.intermediate(x))))


class BertEncoder(nn.Module):
    """``layers`` :class:`BertLayer` on hidden states ``[batch, tokens, hidden]`` (no embeddings)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def bert(*, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, tokens: int = 128,
         batch: int = 1, seed: int = 0, name: str = "bert-base") -> ModelSpec:
    """A BERT encoder (:class:`BertEncoder`) on float hidden states ``[batch, tokens, hidden]``."""

    def make():
        module = BertEncoder(layers, hidden, heads, ffn)
        return module, (torch.randn(batch, tokens, hidden),)

    module, inputs = seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"BERT encoder: {layers} post-norm layer{'s' * (layers != 1)}, hidden {hidden}, {heads} heads, "
                     f"FFN {ffn}, on hidden states {list(inputs[0].shape)} (random weights)")
