"""Felix's search (Zhao et al., Section 3.4, Algorithm 1): :class:`FelixAgent`."""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from schedule_gym.agents.base import Agent, check_positive
from schedule_gym.agents.felix.features import FeatureSpec
from schedule_gym.agents.felix.model import FelixCostModel, load_cost_model, train_cost_model
from schedule_gym.agents.felix.relaxation import LogRelaxation
from schedule_gym.agents.random_search import draw_without_replacement

__all__ = ["FelixAgent"]


@dataclass
class _Data:
    """Measurements so far as features and log costs (the model's training set)."""

    indices: list[int] = field(default_factory=list)
    features: torch.Tensor | None = None


class FelixAgent(Agent):
    """Felix's per-subgraph search (Zhao et al., Section 3.4, Algorithm 1) on a tile space.

    Each round:

    1. draw ``n_seeds`` configs uniformly from the space (valid by construction: Algorithm 1's rejection
       sampling of valid starting points) and take their log-factors as starting values;
    2. run ``n_steps`` Adam steps (step size ``lr``) on all seeds as one batch, minimising Eq. 4:
       predicted log latency plus ``penalty_weight * sum max(p, 0)^2`` over the bound penalties;
    3. round every visited point (the starts included) to a valid config (:meth:`LogRelaxation.round_to_indices`),
       dedupe, drop configs already measured, rank by the model and measure the best ``n_measure`` as one
       batch (fewer when the budget has fewer left). If descent found fewer new configs than that (a
       small or nearly exhausted space), the batch is filled with the model's best of a random draw of
       unmeasured configs, so the search never stalls;
    4. update the cost model on every measurement so far (failed ones cost :meth:`Agent.failed_cost`):
       ``train_steps`` Adam steps at ``train_lr`` on minibatches of ``train_batch_size`` drawn from all of
       them (the whole set while it is smaller), continuing the same optimiser across rounds.

    Rounds repeat until the budget is spent.

    Cost model (``cost_model``):

    * ``None`` (default): a fresh :class:`FelixCostModel` (``hidden_size``, ``n_hidden_layers``) whose
      feature normaliser is fitted on random configs of the task. An untrained model would steer the
      first descent nowhere in particular, so the first round instead measures ``n_measure`` configs
      drawn uniformly at random, and the model is trained on them (and on ``s0``) before the first descent;
    * a path to a file written by :func:`save_cost_model`, or a :class:`FelixCostModel`: a pretrained
      model (Felix's setting: pretrained on TenSet, then updated online). Every run starts from a copy
      of it, so runs are independent and repeatable; the first round already descends on it;
    * a list of such paths or models (one feature spec spans only tasks with the same numbers of
      dimensions and operands, so a convolution and a dense layer need two models): each run takes the
      first whose feature spec fits its task, and a task that none fits is a ``ValueError``.

    Args:
        seed: seeds ``self.rng`` (starting points, random batches) and torch (model initialisation, minibatches).
        n_seeds, n_steps, n_measure: Algorithm 1's ``nSeeds``, ``nSteps``, ``nMeasure`` (paper: 8, 200, 16).
        lr: Adam's step size in log-factor units during descent.
        penalty_weight: Eq. 4's ``lambda``.
        cost_model: see above.
        train_steps, train_lr, train_batch_size: the online model update of each round.
        hidden_size, n_hidden_layers: the architecture of a fresh model (ignored with ``cost_model``).

    Deviations from the paper: one symbolic schedule per task (our template), so Algorithm 1's loop over
    sketches is a single one; factors are rounded factor by factor to divisors of what is left of the
    extent; the features are an analogue of Felix's (Ansor's) for this project's CPU loop nest, not its
    82; the batch is filled at random when descent finds too few new configs; without a pretrained model the
    first round is random.

    Threads: the networks are small, and torch's default OpenMP workers spin-wait on cores another process
    keeps busy, which slows every round down (``examples/results/library-figures.md``); so :meth:`Agent.run`
    runs torch agents on one thread and restores the thread count afterwards.

    >>> from schedule_gym.envs import gemm_env
    >>> result = FelixAgent(seed=0, n_steps=20).run(gemm_env(64, 64, 64), 40)
    >>> result.num_measurements
    40
    """

    name = "felix"
    uses_torch = True

    def __init__(
        self,
        seed: int = 0,
        n_seeds: int = 8,
        n_steps: int = 200,
        n_measure: int = 16,
        lr: float = 0.05,
        penalty_weight: float = 10.0,
        cost_model: FelixCostModel | str | os.PathLike | Sequence[FelixCostModel | str | os.PathLike] | None = None,
        train_steps: int = 50,
        train_lr: float = 1e-3,
        train_batch_size: int = 256,
        hidden_size: int = 256,
        n_hidden_layers: int = 3,
    ) -> None:
        super().__init__(seed)
        self.n_seeds = check_positive(n_seeds, "n_seeds", integer=True)
        self.n_steps = check_positive(n_steps, "n_steps", integer=True)
        self.n_measure = check_positive(n_measure, "n_measure", integer=True)
        self.lr = check_positive(lr, "lr")
        self.penalty_weight = check_positive(penalty_weight, "penalty_weight")
        self.train_steps = check_positive(train_steps, "train_steps", integer=True)
        self.train_lr = check_positive(train_lr, "train_lr")
        self.train_batch_size = check_positive(train_batch_size, "train_batch_size", integer=True)
        self.hidden_size = check_positive(hidden_size, "hidden_size", integer=True)
        self.n_hidden_layers = check_positive(n_hidden_layers, "n_hidden_layers", integer=True)
        self._pretrained: list[FelixCostModel] = []
        self.cost_model: str | tuple[str, ...] | None = None
        if cost_model is not None:
            many = isinstance(cost_model, (list, tuple))
            items = list(cost_model) if many else [cost_model]
            if not items:
                raise ValueError("cost_model must name at least one model when it is a list")
            names = []
            for item in items:
                if isinstance(item, FelixCostModel):
                    self._pretrained.append(copy.deepcopy(item).eval())
                    names.append("pretrained FelixCostModel")
                elif isinstance(item, (str, os.PathLike)):
                    self._pretrained.append(load_cost_model(item))
                    names.append(str(item))
                else:
                    raise TypeError("cost_model must be None, a path, a FelixCostModel or a list of them, got "
                                    f"{type(item).__name__}")
            self.cost_model = tuple(names) if many else names[0]

    # ----------------------------------------------------------------------------- model
    def _new_model(self) -> FelixCostModel:
        task = self.space.task
        if self._pretrained:
            reasons = []
            for pretrained in self._pretrained:
                try:
                    pretrained.featurizer(task)
                except ValueError as exc:
                    reasons.append(str(exc))
                    continue
                return copy.deepcopy(pretrained)
            if len(reasons) == 1:
                raise ValueError(reasons[0])
            raise ValueError(f"no pretrained cost model fits task {task.name!r}: " + "; ".join(reasons))
        model = FelixCostModel(FeatureSpec.for_tasks([task]), self.hidden_size, self.n_hidden_layers)
        sample = self.space.sample_indices(self.rng, min(2048, self.space.size))
        featurizer = model.featurizer(task)
        with torch.no_grad():
            model.fit_feature_normaliser(featurizer(featurizer.log_factors_of_indices(self.space, sample)))
        return model.eval()

    def _train(self) -> None:
        rows = self._result.history
        failed = self.failed_cost()
        new = [r.index for r in rows[len(self._data.indices) :]]
        if new:
            with torch.no_grad():
                feats = self._featurizer(self._featurizer.log_factors_of_indices(self.space, np.array(new)))
            self._data.features = feats if self._data.features is None else torch.cat([self._data.features, feats])
            self._data.indices.extend(new)
        costs = [math.log(failed if r.latency_s is None else r.latency_s) for r in rows]
        train_cost_model(
            self._model, self._data.features, torch.tensor(costs, dtype=torch.float32), steps=self.train_steps,
            batch_size=self.train_batch_size, optimizer=self._optimizer,
        )

    def _predict(self, indices: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            feats = self._featurizer(self._featurizer.log_factors_of_indices(self.space, indices))
            return self._model(feats).numpy()

    # ----------------------------------------------------------------------------- search
    def _descend(self) -> np.ndarray:
        """Algorithm 1, lines 12-19: Adam from ``n_seeds`` random valid configs; every visited point."""
        starts = self.space.sample_indices(self.rng, self.n_seeds, replace=self.n_seeds > self.space.size)
        free = self._relax.free_of_indices(starts).requires_grad_(True)
        visited = [free.detach().clone()]
        if self._relax.n_free:
            opt = torch.optim.Adam([free], lr=self.lr)
            for _ in range(self.n_steps):
                log_factors = self._relax.log_factors(free)
                objective = self._model(self._featurizer(log_factors)).sum()
                objective = objective + self.penalty_weight * self._relax.penalty(log_factors).sum()
                (grad,) = torch.autograd.grad(objective, free)
                free.grad = grad
                opt.step()
                visited.append(free.detach().clone())
        return torch.cat(visited).numpy()

    def _candidates(self, visited: np.ndarray, k: int) -> list[int]:
        """Algorithm 1, lines 20-22: round, dedupe, drop measured, best ``k`` by the model (filled at random)."""
        indices = np.unique(self._relax.round_to_indices(visited))
        indices = np.array([i for i in indices.tolist() if self.is_new(i)], dtype=np.int64)
        chosen: list[int] = []
        if indices.size:
            order = np.argsort(self._predict(indices), kind="stable")
            chosen = indices[order[:k]].tolist()
        if len(chosen) < k:
            taken = {r.index for r in self._result.history} | set(chosen)
            draws = draw_without_replacement(self.rng, self.space.size, taken)
            pool = [i for _, i in zip(range(8 * (k - len(chosen))), draws)]
            if pool:
                pool_arr = np.array(pool, dtype=np.int64)
                order = np.argsort(self._predict(pool_arr), kind="stable")
                chosen += pool_arr[order[: k - len(chosen)]].tolist()
        return chosen

    def _batch_size(self) -> int:
        return self.n_measure if self.remaining is None else min(self.n_measure, self.remaining)

    def search(self) -> None:
        self._relax = LogRelaxation(self.space)
        self._model = self._new_model()
        self._featurizer = self._model.featurizer(self.space.task)
        self._optimizer = torch.optim.Adam(self._model.parameters(), lr=self.train_lr)
        self._data = _Data()
        if not self._pretrained:
            taken = {r.index for r in self._result.history}
            draws = draw_without_replacement(self.rng, self.space.size, taken)
            self.measure([i for _, i in zip(range(self._batch_size()), draws)])
            self.check_budget()
            self._train()
        while True:
            self.check_budget()
            batch = self._candidates(self._descend(), self._batch_size())
            if not batch:
                return
            self.measure(batch)
            self.check_budget()
            self._train()
