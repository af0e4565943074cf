"""The PTB LSTM language model (Zaremba et al.), written as native cells."""

from __future__ import annotations

import torch
from torch import nn

from schedule_gym.models.zoo.base import ModelSpec, seeded

__all__ = ["LSTMLanguageModel", "NativeLSTMCell", "lstm_lm", "lstm_weights_as_torch"]


class NativeLSTMCell(nn.Module):
    """An LSTM cell as the paper's Figure 2a: four input Linears (with bias) and four hidden Linears
    (no bias), one per gate, in PyTorch's ``nn.LSTM`` gate order i, f, g, o::

        i = sigmoid(x_i(x) + h_i(h))    f = sigmoid(x_f(x) + h_f(h))
        g = tanh(x_g(x) + h_g(h))       o = sigmoid(x_o(x) + h_o(h))
        c' = f * c + i * g              h' = o * tanh(c')
    """

    GATES = ("i", "f", "g", "o")

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.input_size, self.hidden = input_size, hidden
        self.x_i, self.x_f = nn.Linear(input_size, hidden), nn.Linear(input_size, hidden)
        self.x_g, self.x_o = nn.Linear(input_size, hidden), nn.Linear(input_size, hidden)
        self.h_i, self.h_f = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.h_g, self.h_o = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.sigmoid(self.x_i(x) + self.h_i(h))
        f = torch.sigmoid(self.x_f(x) + self.h_f(h))
        g = torch.tanh(self.x_g(x) + self.h_g(h))
        o = torch.sigmoid(self.x_o(x) + self.h_o(h))
        c = f * c + i * g
        return o * torch.tanh(c), c

    def input_linears(self) -> list[nn.Linear]:
        return [self.x_i, self.x_f, self.x_g, self.x_o]

    def hidden_linears(self) -> list[nn.Linear]:
        return [self.h_i, self.h_f, self.h_g, self.h_o]


class LSTMLanguageModel(nn.Module):
    """Zaremba et al.'s PTB LSTM language model: token ids ``[batch, steps]`` -> Embedding ->
    ``num_layers`` stacked :class:`NativeLSTMCell` unrolled over the steps (a Python loop: unrolled
    by ``torch.export``; h and c start at zero) -> the top layer's outputs stacked along dim 1 ->
    Linear to the vocabulary: logits ``[batch, steps, vocab]``."""

    def __init__(self, vocab: int = 10000, hidden: int = 200, num_layers: int = 2) -> None:
        super().__init__()
        self.vocab, self.hidden, self.num_layers = vocab, hidden, num_layers
        self.embedding = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(NativeLSTMCell(hidden, hidden) for _ in range(num_layers))
        self.decoder = nn.Linear(hidden, vocab)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """The top layer's h at every step: ``[batch, steps, hidden]``."""
        batch, steps = tokens.shape
        x = self.embedding(tokens)
        h = [torch.zeros(batch, self.hidden) for _ in self.cells]
        c = [torch.zeros(batch, self.hidden) for _ in self.cells]
        outputs = []
        for t in range(steps):
            y = x[:, t]
            for k, cell in enumerate(self.cells):
                h[k], c[k] = cell(y, h[k], c[k])
                y = h[k]
            outputs.append(y)
        return torch.stack(outputs, dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.hidden_states(tokens))


def lstm_weights_as_torch(module: LSTMLanguageModel) -> nn.LSTM:
    """An ``nn.LSTM(hidden, hidden, num_layers, batch_first=True)`` with ``module``'s cell weights:
    ``weight_ih_l{k}`` / ``bias_ih_l{k}`` the four input Linears' weights / biases concatenated in
    i, f, g, o order, ``weight_hh_l{k}`` the hidden Linears', ``bias_hh_l{k}`` zeros. Applied to
    ``module.embedding(tokens)`` it gives :meth:`LSTMLanguageModel.hidden_states`."""
    lstm = nn.LSTM(module.hidden, module.hidden, num_layers=module.num_layers, batch_first=True)
    with torch.no_grad():
        for k, cell in enumerate(module.cells):
            getattr(lstm, f"weight_ih_l{k}").copy_(torch.cat([m.weight for m in cell.input_linears()]))
            getattr(lstm, f"bias_ih_l{k}").copy_(torch.cat([m.bias for m in cell.input_linears()]))
            getattr(lstm, f"weight_hh_l{k}").copy_(torch.cat([m.weight for m in cell.hidden_linears()]))
            getattr(lstm, f"bias_hh_l{k}").zero_()
    return lstm.eval()


def lstm_lm(*, vocab: int = 10000, hidden: int = 200, num_layers: int = 2, steps: int = 20, batch: int = 20,
            init_scale: float = 0.1, seed: int = 0, name: str = "lstm-ptb") -> ModelSpec:
    """The PTB LSTM language model (:class:`LSTMLanguageModel`) on token ids ``[batch, steps]``; every
    parameter uniform in ``[-init_scale, init_scale]`` (Zaremba et al.'s init). The defaults are the
    "small" configuration: vocabulary 10000, hidden 200, 2 layers, 20 steps, batch 20."""

    def make():
        module = LSTMLanguageModel(vocab, hidden, num_layers)
        with torch.no_grad():
            for p in module.parameters():
                p.uniform_(-init_scale, init_scale)
        return module, (torch.randint(0, vocab, (batch, steps), dtype=torch.int64),)

    module, inputs = seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"PTB LSTM language model: {num_layers} layers of native cells (4+4 Linears each), hidden "
                     f"{hidden}, vocabulary {vocab}, {steps} steps, batch {batch} (random weights)")
