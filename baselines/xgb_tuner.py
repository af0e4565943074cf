"""The XGBoost tuner: Zhang et al.'s "state-of-the-art XGBoost" comparator, written the way AutoTVM's is.

AutoTVM's ``XGBTuner`` (Chen et al., "Learning to Optimize Tensor Programs", NeurIPS 2018;
``tvm/autotvm/tuner/{model_based_tuner,xgboost_cost_model,sa_model_optimizer}.py`` in TVM <= 0.16), which
later TVM releases no longer ship:

* **cost model**: gradient-boosted trees (xgboost) over features of a config, trained on every
  measurement so far with a *ranking* objective (``rank:pairwise``; label: throughput relative to the
  best so far, failures 0), retrained after every ``plan_size`` new measurements;
* **candidates**: parallel simulated annealing over the model's predictions (``parallel_size`` chains of
  ``n_iter`` steps, temperature falling linearly from 1 to 0, a step is one random move of the tile
  space, chains persist between plans), keeping the ``plan_size`` best unmeasured points it visits;
* **batches**: measured ``batch_size`` at a time from the plan; each pick is a uniformly random
  unmeasured config with probability ``eps_greedy`` (AutoTVM: 0.05) instead, and the first plan is
  random (the model needs data).

Features (AutoTVM's ``knob`` features, plus tile sizes): ``log2`` of every loop factor, and ``log2`` of
the tile each loop level spans in each dimension (the product of the factors inside it).
"""

from __future__ import annotations

import heapq

import numpy as np

from schedule_gym.agents.base import Agent, check_in_range, check_positive
from schedule_gym.agents.random_search import draw_without_replacement

__all__ = ["XGBTunerAgent"]


class XGBTunerAgent(Agent):
    """AutoTVM-style XGBoost tuner: a ranking model, simulated annealing, epsilon-greedy exploration."""

    name = "xgb"

    def __init__(
        self,
        seed: int = 0,
        plan_size: int = 64,
        batch_size: int = 16,
        eps_greedy: float = 0.05,
        parallel_size: int = 128,
        n_iter: int = 500,
        early_stop: int = 50,
        num_boost_round: int = 100,
        max_depth: int = 3,
    ) -> None:
        super().__init__(seed)
        self.plan_size = check_positive(plan_size, "plan_size", integer=True)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)
        self.eps_greedy = check_in_range(eps_greedy, "eps_greedy", 0.0, 1.0)
        self.parallel_size = check_positive(parallel_size, "parallel_size", integer=True)
        self.n_iter = check_positive(n_iter, "n_iter", integer=True)
        self.early_stop = check_positive(early_stop, "early_stop", integer=True)
        self.num_boost_round = check_positive(num_boost_round, "num_boost_round", integer=True)
        self.max_depth = check_positive(max_depth, "max_depth", integer=True)

    # -------------------------------------------------------------------------- features
    def features(self, indices: np.ndarray) -> np.ndarray:
        """``log2`` factors, and ``log2`` of the tile inside each loop level, per config."""
        cols = []
        for factors in self.space.factors_of_indices(np.asarray(indices, dtype=np.int64)):
            logs = np.log2(factors.astype(np.float64))
            cols.append(logs)
            cols.append(np.cumsum(logs[:, ::-1], axis=1)[:, ::-1][:, 1:])  # tile spanned by levels 1..d-1
        return np.concatenate(cols, axis=1)

    def _fit(self, indices: list[int], latencies: list[float | None]) -> object:
        import xgboost as xgb

        ok = [lat for lat in latencies if lat is not None]
        best = min(ok) if ok else 1.0
        labels = np.array([0.0 if lat is None else best / lat for lat in latencies])
        params = {
            "objective": "rank:pairwise", "max_depth": self.max_depth, "gamma": 1e-4, "min_child_weight": 1,
            "subsample": 1.0, "eta": 0.3, "lambda": 1.0, "alpha": 0.0, "nthread": 1,
            "seed": int(self.rng.integers(2**31)), "verbosity": 0,
        }
        dtrain = xgb.DMatrix(self.features(np.array(indices)), label=labels)
        return xgb.train(params, dtrain, num_boost_round=self.num_boost_round)

    def _predict(self, model: object, indices: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return model.predict(xgb.DMatrix(self.features(indices)))

    # ------------------------------------------------------------------ simulated annealing
    def _anneal(self, model: object, measured: set[int]) -> list[int]:
        """The ``plan_size`` best unmeasured points visited by ``parallel_size`` annealing chains."""
        if self._chains is None:
            self._chains = self.space.sample_indices(self.rng, self.parallel_size, replace=True)
        points = self._chains
        scores = self._predict(model, points)
        heap: list[tuple[float, int]] = []  # (score, index): a min-heap of the best plan_size points
        in_heap: set[int] = set()

        def offer(idx: int, score: float) -> bool:
            if idx in measured or idx in in_heap:
                return False
            if len(heap) < self.plan_size:
                heapq.heappush(heap, (score, idx))
                in_heap.add(idx)
                return True
            if score > heap[0][0]:
                _, out = heapq.heapreplace(heap, (score, idx))
                in_heap.discard(out)
                in_heap.add(idx)
                return True
            return False

        for idx, score in zip(points, scores):
            offer(int(idx), float(score))
        last_change = 0
        for k in range(self.n_iter):
            temperature = 1.0 - k / self.n_iter
            new_points = self.space.random_moves(points, self.rng)  # AutoTVM's random_walk, on this space's moves
            new_scores = self._predict(model, new_points)
            accept = self.rng.random(len(points)) < np.exp(np.minimum((new_scores - scores) / (temperature + 1e-5), 1))
            points = np.where(accept, new_points, points)
            scores = np.where(accept, new_scores, scores)
            changed = False
            for idx, score in zip(new_points, new_scores):
                changed |= offer(int(idx), float(score))
            if changed:
                last_change = k
            elif k - last_change > self.early_stop:
                break
        self._chains = points  # persistent chains, as AutoTVM's (persistent=True)
        return [idx for _, idx in sorted(heap, reverse=True)]

    # ---------------------------------------------------------------------------------- search
    def search(self) -> None:
        space = self.space
        s0 = space.index(space.initial_config())
        measured_idx: list[int] = [s0]
        measured_lat: list[float | None] = [None if self.s0_result is None else self.s0_result.latency_s]
        measured = {s0}
        taken = set(measured)
        draws = draw_without_replacement(self.rng, space.size, taken)
        self._chains: np.ndarray | None = None
        plan: list[int] = []
        trained_at = 0
        while True:
            if len(measured) - trained_at >= self.plan_size:  # AutoTVM: retrain every plan_size measurements
                model = self._fit(measured_idx, measured_lat)
                plan = self._anneal(model, measured)
                trained_at = len(measured)
            n = self.batch_size if self.remaining is None else min(self.batch_size, self.remaining)
            batch: list[int] = []
            while len(batch) < n:
                if plan and self.rng.random() >= self.eps_greedy:
                    idx = plan.pop(0)
                    if idx in taken:
                        continue
                    taken.add(idx)
                else:  # explore (and fill the first plan) with a uniformly random unmeasured config
                    idx = next(draws, None)
                    if idx is None:
                        break
                    if idx in measured:
                        continue
                batch.append(idx)
            if not batch:
                self.check_budget()
                return
            for idx, result in zip(batch, self.measure(batch)):
                if result is not None:
                    measured.add(idx)
                    measured_idx.append(idx)
                    measured_lat.append(result.latency_s)
