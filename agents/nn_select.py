"""NN-assisted tile size selection (Rahman, Pouchet, Sadayappan, iWAPT 2010, "Overview of the Algorithm").

1. measure a random ``x%`` of the tile space (or ``N`` configs);
2. train a multi-layer perceptron — the tile sizes in, the execution time out, one hidden layer of 30
   neurons, trained with resilient back-propagation (Rprop) and 10% held out for validation;
3. predict the performance of the entire space (here: of a uniform sample of ``predict_limit`` configs
   where the space is larger);
4. collect the ``y`` configs predicted best that were not already run and run them (one batch, so a
   backend builds them concurrently); the best measured config is the result.

Differences from the slides, all parameters: the inputs are ``log2`` of every loop factor (the slides
feed the tile sizes; logs keep sizes from 1 to 1024 on one scale), and the network predicts the
standardised *log* latency (``target="log"``; ``"time"`` fits the raw execution time as the slides do).
With a count budget and no ``sample`` given, half the budget is sampled and the rest is spent on
predicted picks (the slides' experiments sample 1-4% and pick ``y = 50``). Budget left after the picks
(failed picks, or a time budget) goes to further rounds: retrain on everything measured, pick again.
"""

from __future__ import annotations

import itertools
import math
import numbers

import numpy as np
import torch
from torch import nn

from schedule_gym.agents.base import Agent, check_positive
from schedule_gym.agents.random_search import draw_without_replacement

__all__ = ["NNSelectAgent", "TileMLP"]


class TileMLP(nn.Module):
    """The slides' predictor: tile sizes in, one hidden layer (30 neurons), execution time out."""

    def __init__(self, n_inputs: int, hidden: int = 30) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_inputs, hidden), nn.Sigmoid(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class NNSelectAgent(Agent):
    """Sample, train an MLP, predict the space, measure the best predicted.

    Args:
        sample: configs measured at random first: an int ``N``, or a float ``x`` in (0, 1) for ``x`` of
            the space. Default: half of a count budget (100 configs under a time-only budget).
        picks: ``y``, predicted-best configs measured after training. Default: the rest of the budget.
        hidden: hidden neurons (slides: 30). epochs: Rprop epochs (full batch).
        target: ``"log"`` (log latency, default) or ``"time"`` (latency, as in the slides).
        predict_limit: predict the whole space up to this size, else a uniform sample of this many.
        batch_size: picks measured per batch.
    """

    name = "nn"
    uses_torch = True

    def __init__(
        self,
        seed: int = 0,
        sample: int | float | None = None,
        picks: int | None = None,
        hidden: int = 30,
        epochs: int = 300,
        target: str = "log",
        predict_limit: int = 2_000_000,
        batch_size: int = 16,
    ) -> None:
        super().__init__(seed)
        if sample is not None:
            if isinstance(sample, bool) or not isinstance(sample, numbers.Real):
                raise ValueError(f"sample must be an int count, a fraction in (0, 1) or None, got {sample!r}")
            if isinstance(sample, numbers.Integral) and sample < 1:
                raise ValueError(f"sample must be at least 1 config, got {sample!r}")
            if not isinstance(sample, numbers.Integral) and not 0 < sample < 1:
                raise ValueError(f"sample as a fraction of the space must be in (0, 1), got {sample!r}")
        if target not in ("log", "time"):
            raise ValueError(f"target must be 'log' or 'time', got {target!r}")
        self.sample = sample
        self.picks = check_positive(picks, "picks", integer=True, none_means="the rest of the budget")
        self.hidden = check_positive(hidden, "hidden", integer=True)
        self.epochs = check_positive(epochs, "epochs", integer=True)
        self.target = target
        self.predict_limit = check_positive(predict_limit, "predict_limit", integer=True)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)

    def _inputs(self, indices: np.ndarray) -> torch.Tensor:
        factors = self.space.factors_of_indices(indices)
        return torch.from_numpy(np.log2(np.concatenate(factors, axis=1).astype(np.float32)))

    def _sample_size(self) -> int:
        if isinstance(self.sample, numbers.Integral):
            n = int(self.sample)
        elif self.sample is not None:
            n = max(1, math.floor(self.sample * self.space.size))
        else:
            n = 100 if self.remaining is None else max(1, self.remaining // 2)
        return n if self.remaining is None else min(n, self.remaining)

    def train(self, indices: np.ndarray, latencies: np.ndarray) -> TileMLP:
        """Fit the MLP on measured configs with Rprop (full batch), keeping the best epoch on 10% held out."""
        x = self._inputs(indices)
        y = np.log(latencies) if self.target == "log" else latencies
        mean, std = float(y.mean()), float(y.std()) or 1.0
        y_t = torch.from_numpy(((y - mean) / std).astype(np.float32))
        order = self.rng.permutation(len(indices))
        n_val = len(indices) // 10 if len(indices) >= 20 else 0
        val, fit = torch.from_numpy(order[:n_val]), torch.from_numpy(order[n_val:])
        model = TileMLP(x.shape[1], self.hidden)
        optim = torch.optim.Rprop(model.parameters())
        best_loss, best_state = math.inf, None
        for _ in range(self.epochs):
            optim.zero_grad()
            loss = nn.functional.mse_loss(model(x[fit]), y_t[fit])
            loss.backward()
            optim.step()
            if n_val:
                with torch.no_grad():
                    val_loss = float(nn.functional.mse_loss(model(x[val]), y_t[val]))
                if val_loss < best_loss:
                    best_loss, best_state = val_loss, {k: v.clone() for k, v in model.state_dict().items()}
        if best_state is not None:
            model.load_state_dict(best_state)
        return model

    def search(self) -> None:
        space = self.space
        s0 = space.index(space.initial_config())
        taken = {s0}
        draws = draw_without_replacement(self.rng, space.size, taken)
        # 1. measure a random x% of the space
        n_sample = self._sample_size()
        measured: dict[int, float] = {}
        failed = self.failed_cost()
        if self.s0_result is not None:
            measured[s0] = self.cost(self.s0_result, failed)
        while len(measured) < n_sample + (s0 in measured):
            batch = [idx for _, idx in zip(range(self.batch_size), draws)]
            if not batch:
                break
            for idx, result in zip(batch, self.measure(batch)):
                if result is not None:
                    measured[idx] = self.cost(result, self.failed_cost())
        # 3. the space to predict: all of it, or a uniform sample
        if space.size <= self.predict_limit:
            candidates = np.arange(space.size, dtype=np.int64)
        else:
            candidates = np.unique(space.sample_indices(self.rng, self.predict_limit, replace=True))
        picks_left = self.picks
        while True:
            # 2. train the MLP on everything measured; predict
            indices = np.fromiter(measured, dtype=np.int64, count=len(measured))
            model = self.train(indices, np.array([measured[i] for i in indices]))
            with torch.no_grad():
                predicted = torch.cat([model(self._inputs(chunk)) for chunk in np.array_split(candidates, max(1, len(candidates) // 262144))]).numpy()
            # 4. run the y best predicted that were not already run
            order = np.argsort(predicted, kind="stable")
            if picks_left is not None:
                want = picks_left
            else:  # the rest of a count budget in one go; rounds of a batch under a time budget
                want = self.remaining if self.remaining is not None else self.batch_size
            if self.remaining is not None:
                want = min(want, self.remaining)
            new = (int(candidates[i]) for i in order if self.is_new(int(candidates[i])))
            chosen = list(itertools.islice(new, want))
            if not chosen:
                self.check_budget()
                return
            for start in range(0, len(chosen), self.batch_size):
                batch = chosen[start : start + self.batch_size]
                for idx, result in zip(batch, self.measure(batch)):
                    if result is not None:
                        measured[idx] = self.cost(result, self.failed_cost())
            if picks_left is not None:
                picks_left -= len(chosen)
                if picks_left <= 0:
                    return
