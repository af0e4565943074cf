"""GPT-2 (Radford et al. 2019) as Hugging Face's ``GPT2LMHeadModel``: token and position embeddings,
pre-norm blocks with causal attention, a final LayerNorm and the LM head tied to the token embedding."""

from __future__ import annotations

import torch
from torch import nn

from schedule_gym.models.zoo.attention import PreNormBlock
from schedule_gym.models.zoo.base import ModelSpec, seeded

__all__ = ["GPT2", "gpt2"]


class GPT2(nn.Module):
    """Token ids ``[batch, tokens]`` -> logits ``[batch, tokens, vocab]`` (``lm_head`` False: the final
    hidden states ``[batch, tokens, hidden]``).

    Blocks as GPT-2's: LayerNorm eps 1e-5, fused Q, K, V projection, causal attention (masked scores
    set to the lowest float32, as Hugging Face's), MLP of 4 x hidden with the tanh GELU (GPT-2's
    ``gelu_new``). The LM head is a bias-free Linear sharing the token embedding's weight (counted once).
    Dropouts are no-ops in eval mode and are left out.
    """

    def __init__(self, vocab: int = 50257, positions: int = 1024, layers: int = 12, hidden: int = 768,
                 heads: int = 12, eps: float = 1e-5, lm_head: bool = True) -> None:
        super().__init__()
        self.positions = positions
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.h = nn.ModuleList(PreNormBlock(hidden, heads, 4 * hidden, eps, gelu="tanh", causal_tokens=positions)
                               for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False) if lm_head else None
        if self.lm_head is not None:
            self.lm_head.weight = self.wte.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.positions:
            raise ValueError(f"{t} tokens: the model has {self.positions} positions")
        x = self.wte(tokens) + self.wpe.weight[:t]
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return x if self.lm_head is None else self.lm_head(x)


def gpt2(*, vocab: int = 50257, positions: int = 1024, layers: int = 12, hidden: int = 768, heads: int = 12,
         tokens: int = 128, lm_head: bool = True, batch: int = 1, seed: int = 0, name: str = "gpt2") -> ModelSpec:
    """:class:`GPT2` (the defaults are GPT-2 small's) on random token ids ``[batch, tokens]``; GPT-2's
    initialisation: Linear and embedding weights ~ N(0, 0.02), biases 0."""

    def make():
        module = GPT2(vocab, positions, layers, hidden, heads, lm_head=lm_head)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    m.weight.normal_(0.0, 0.02)
                    if getattr(m, "bias", None) is not None:
                        m.bias.zero_()
        return module, (torch.randint(0, vocab, (batch, tokens), dtype=torch.int64),)

    module, inputs = seeded(seed, make)
    head = "tied LM head" if lm_head else "no LM head"
    return ModelSpec(name, module, inputs,
                     f"GPT-2: {layers} pre-norm causal layers, hidden {hidden}, {heads} heads, vocabulary {vocab}, "
                     f"{head}, on token ids {list(inputs[0].shape)} (random weights)")
