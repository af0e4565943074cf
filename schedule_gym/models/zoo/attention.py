"""Multi-head attention written out (projections, ``Q @ K^T``, softmax, ``@ V``) and the pre-norm
transformer block that ViT and GPT-2 share.

No ``nn.MultiheadAttention`` or ``F.scaled_dot_product_attention``: their fused forms export as
operators TVM cannot import, and written out the attention's two batch matmuls reach the mapping.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["PreNormBlock", "SelfAttention", "attend", "merge_heads", "split_heads"]


def split_heads(y: torch.Tensor, heads: int) -> torch.Tensor:
    """``[batch, tokens, hidden]`` -> ``[batch, heads, tokens, hidden / heads]``."""
    b, t, d = y.shape
    return y.view(b, t, heads, d // heads).permute(0, 2, 1, 3)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`split_heads`."""
    b, h, t, hd = y.shape
    return y.permute(0, 2, 1, 3).reshape(b, t, h * hd)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(q @ k^T / scale) @ v`` over split heads; where the boolean ``mask`` (broadcast to the
    scores) is False the score is the lowest float32 (GPT-2's causal masking)."""
    scores = q @ k.transpose(-1, -2) / scale
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) @ v


class SelfAttention(nn.Module):
    """Fused Q, K, V projection (``qkv``: one Linear to 3 x hidden, as torchvision's ViT ``in_proj`` and
    GPT-2's ``c_attn``), attention over ``heads`` heads (causal when ``causal_tokens`` is the longest
    sequence to mask for), output projection (``proj``)."""

    def __init__(self, hidden: int, heads: int, causal_tokens: int | None = None) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        self.heads, self.hidden = heads, hidden
        self.scale = float(math.sqrt(hidden // heads))
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.causal_mask: torch.Tensor | None
        if causal_tokens is None:
            self.causal_mask = None
        else:
            mask = torch.ones(causal_tokens, causal_tokens, dtype=torch.bool).tril()
            self.register_buffer("causal_mask", mask.view(1, 1, causal_tokens, causal_tokens), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q, k, v = (split_heads(y, self.heads) for y in self.qkv(x).split(self.hidden, dim=2))
        mask = None if self.causal_mask is None else self.causal_mask[:, :, :t, :t]
        return self.proj(merge_heads(attend(q, k, v, self.scale, mask)))


class PreNormBlock(nn.Module):
    """A pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))`` with the MLP
    Linear, GELU (``gelu``: ``"none"`` the exact erf form, ``"tanh"`` the approximation), Linear."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, gelu: str = "none",
                 causal_tokens: int | None = None) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = SelfAttention(hidden, heads, causal_tokens)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(approximate=gelu), nn.Linear(ffn, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
