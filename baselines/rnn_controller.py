"""The RNN controller: Zhang et al.'s second comparator, a recurrent policy trained with REINFORCE.

The "general configuration optimization method using a RNN controller by Google researchers" (Zhang et
al., Section 5; Zoph & Le, "Neural Architecture Search with Reinforcement Learning", Section 3.1-3.2):
an LSTM emits a config one decision at a time — for every dimension, the factor of each loop but the
innermost, outermost first, chosen among the divisors of what is left of the extent (the innermost
loop takes the rest) — each decision fed back as the next input. A batch of ``batch_size`` configs is
sampled and measured; the controller is trained with REINFORCE on ``1 / cost`` rewards (Eq. 8, scaled
by ``cost(s0)`` so rewards are of order one; failures get 0) against an exponential moving-average
baseline, with an entropy bonus.

A sampled config that was already measured costs nothing and still trains the controller with its
recorded reward. When ``patience`` batches in a row bring nothing new (the policy has converged onto
measured configs), the next batch is drawn uniformly from the unmeasured configs instead, so a run
always spends its budget.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from schedule_gym.agents.base import Agent, check_in_range, check_positive
from schedule_gym.agents.random_search import draw_without_replacement
from schedule_gym.spaces import Config
from schedule_gym.spaces.tile_space import divisors

__all__ = ["RNNControllerAgent"]


class Controller(nn.Module):
    """An LSTM cell over a shared vocabulary of factors (every divisor of any extent), plus a start token."""

    def __init__(self, vocab: int, n_decisions: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab + 1, hidden)  # the last token starts a sequence
        self.position = nn.Embedding(n_decisions, hidden)
        self.cell = nn.LSTMCell(hidden, hidden)
        self.head = nn.Linear(hidden, vocab)


class RNNControllerAgent(Agent):
    """REINFORCE-trained LSTM controller emitting split factors one at a time."""

    name = "rnn"
    uses_torch = True

    def __init__(
        self,
        seed: int = 0,
        batch_size: int = 16,
        hidden: int = 64,
        lr: float = 5e-3,
        baseline_decay: float = 0.9,
        entropy_coef: float = 1e-3,
        patience: int = 5,
    ) -> None:
        super().__init__(seed)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)
        self.hidden = check_positive(hidden, "hidden", integer=True)
        self.lr = check_positive(lr, "lr")
        self.baseline_decay = check_in_range(baseline_decay, "baseline_decay", 0.0, 1.0)
        self.entropy_coef = check_in_range(entropy_coef, "entropy_coef", 0.0, float("inf"))
        self.patience = check_positive(patience, "patience", integer=True)

    def _sample(self, n: int) -> tuple[list[Config], torch.Tensor, torch.Tensor]:
        """``n`` configs from the controller, with the sum of their log-probabilities and entropies."""
        model, vocab = self._model, self._vocab
        h = torch.zeros(n, self.hidden)
        c = torch.zeros(n, self.hidden)
        token = torch.full((n,), len(vocab), dtype=torch.long)
        log_prob = torch.zeros(n)
        entropy = torch.zeros(n)
        configs: list[list[list[int]]] = [[] for _ in range(n)]
        step = 0
        for d in self.space.dims:
            left = np.full(n, d.extent, dtype=np.int64)
            factors = np.zeros((n, d.splits), dtype=np.int64)
            for level in range(d.splits - 1):
                h, c = model.cell(model.embed(token) + model.position.weight[step], (h, c))
                logits = model.head(h)
                legal = torch.from_numpy((left[:, None] % self._vocab_array[None, :]) == 0)
                logits = logits.masked_fill(~legal, -torch.inf)
                dist = torch.distributions.Categorical(logits=logits)
                choice = torch.from_numpy(self._choose(dist.probs.detach().numpy()))
                log_prob = log_prob + dist.log_prob(choice)
                entropy = entropy + torch.where(legal, -dist.probs * dist.logits.clamp(min=-1e9), 0.0).sum(-1)
                factor = self._vocab_array[choice.numpy()]
                factors[:, level] = factor
                left //= factor
                token = choice
                step += 1
            factors[:, -1] = left
            for i in range(n):
                configs[i].append(factors[i].tolist())
        return [tuple(tuple(f) for f in cfg) for cfg in configs], log_prob, entropy

    def _choose(self, probs: np.ndarray) -> np.ndarray:
        """One categorical draw per row with ``self.rng`` (so the run depends on the seed only)."""
        cum = np.cumsum(probs, axis=1)
        u = self.rng.random(len(probs))[:, None] * cum[:, -1:]
        return np.minimum((cum <= u).sum(axis=1), probs.shape[1] - 1)

    def search(self) -> None:
        space = self.space
        vocab = sorted({int(v) for d in space.dims for v in divisors(d.extent)})
        self._vocab, self._vocab_array = vocab, np.array(vocab, dtype=np.int64)
        n_decisions = max(1, sum(d.splits - 1 for d in space.dims))
        self._model = Controller(len(vocab), n_decisions, self.hidden)
        optim = torch.optim.Adam(self._model.parameters(), lr=self.lr)
        s0 = space.initial_config()
        ref = self._result.s0_latency_s
        baseline: float | None = None
        taken: set[int] = {space.index(s0)}
        draws = draw_without_replacement(self.rng, space.size, taken)
        idle = 0
        while True:
            n = self.batch_size if self.remaining is None else min(self.batch_size, self.remaining)
            if idle >= self.patience:  # converged onto measured configs: spend the budget elsewhere
                batch = [space.config(i) for i in (next(draws, None) for _ in range(n)) if i is not None and self.is_new(i)]
                if not batch:
                    self.check_budget()
                    return
                self.measure(batch)
                idle = 0
                continue
            configs, log_prob, entropy = self._sample(self.batch_size)
            new = [cfg for cfg in dict.fromkeys(configs) if self.is_new(cfg)][:n]
            results = {cfg: r for cfg, r in zip(new, self.measure(new))} if new else {}
            taken.update(space.index(cfg) for cfg, r in results.items() if r is not None)
            idle = 0 if any(r is not None for r in results.values()) else idle + 1
            costs = []
            for cfg in configs:
                result = results.get(cfg) or self.session.result(cfg)
                costs.append(None if result is None or not self.session.in_session(cfg) else result.latency_s)
            if ref is None:
                ref = next((c for c in costs if c is not None), None)
            rewards = torch.tensor([0.0 if c is None else ref / c for c in costs])
            baseline = float(rewards.mean()) if baseline is None else (
                self.baseline_decay * baseline + (1 - self.baseline_decay) * float(rewards.mean())
            )
            loss = -((rewards - baseline) * log_prob).mean() - self.entropy_coef * entropy.mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
