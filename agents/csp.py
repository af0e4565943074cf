"""Composed Singular Prediction (Patabandi and Hall) and its Multiplicative Domain Formulation baseline.

The paper (its sections "Methodology" and "Case Study") predicts a schedule made of two
transformations, tiling (domain ``S1``) and loop permutation (``S2``):

* **MDF** learns one function ``f(c, s)`` over the product ``S1 x S2`` and predicts
  ``s* = argmax_s f(c, s)``; its training data are samples of the product.
* **ADF / CSP** learns one *singular* function per domain: the permutation model ``g2`` and the tile
  model ``g1``; the prediction composes them, ``psi(tau(tau(c, s1*), p*))``: apply the predicted tiling,
  then the predicted permutation.
* **Intra-tile permutations.** The permutation model is trained on measurements of the permutations of
  the intra-tile loops of a few tile schemes ("Performance of a tiled Conv2d is approximated with its
  intra-tile sub-nest's performance").
* **The tile model's training data query the permutation model**: each tile scheme in its data is
  measured with the permutation ``g2`` predicts for it.

Here, for one task (one layer ``c``): ``S1`` is the task's tile space and ``S2`` the ``D!`` orders of its
intra-tile loops (the innermost level of each of the ``D`` dimensions, permuted below the default outer
tiers: :meth:`~schedule_gym.spaces.OrderSpace.intra_tile_orders`). Both agents run on a
:class:`~schedule_gym.envs.ScheduleEnv` (or a session over a :class:`~schedule_gym.spaces.ScheduleSpace`)
and spend the same budget.

Choices of ours, where the paper's text does not say:

* **Model family**: gradient-boosted trees (xgboost, squared error on log latency) for all three models.
* **Features**: tiles: ``log2`` of every factor. Permutation: per position of the intra-tile sub-nest, the
  dimension there (one-hot), its tile factor (``log2``) and whether it is a reduction; per pair of
  dimensions, which comes first. The permutation model's target is the log latency relative to the mean
  of its tile scheme, so it learns what the order adds to a tiling.
* **The intra-tile approximation** is not taken literally: the permutation data are measurements of the
  whole kernel with each intra-tile order (our backends measure whole kernels; a sub-nest kernel would
  need a template of its own). Their cost is reported as it is.
* **Budget split** (CSP): ``perm_share`` of the training measurements for the permutation data over
  ``tile_schemes`` schemes, the rest for the tile data; ``predict_tiles x predict_orders`` measurements
  of the prediction (CSP-1: 1 x 1; the paper's CSP-5x5: 5 x 5). MDF spends its training share on uniform
  samples of ``S1 x S2`` and measures as many predicted schedules.
* **The argmax** runs over ``candidates`` uniformly drawn tile schemes plus every measured one (the tile
  space is too large to score whole); the permutation argmax is exhaustive for ``D! <= 5040``. MDF scores
  every candidate tile with ``mdf_orders`` random orders, then all orders of its best ``mdf_refine`` tiles.

After a run, :attr:`prediction` holds the predicted schedules and their measurements, and
:attr:`data_cost` the training data spent per domain (measurements and backend seconds).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from schedule_gym.agents.base import Agent, check_in_range, check_positive
from schedule_gym.spaces import Order, Schedule, ScheduleSpace
from schedule_gym.types import Config, MeasureResult

__all__ = ["CSPAgent", "MDFAgent", "ScheduleFeatures"]

XGB_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.9, "min_child_weight": 1, "nthread": 1, "verbosity": 0}
XGB_ROUNDS = 200


class ScheduleFeatures:
    """Feature vectors of tile configs and intra-tile orders of a schedule space (see the module docstring)."""

    def __init__(self, space: ScheduleSpace) -> None:
        if not isinstance(space, ScheduleSpace):
            raise TypeError(
                f"CSP and MDF predict schedules: run them on a ScheduleEnv (schedule_gym/Schedule-v0), got a space {space!r}"
            )
        self.space = space
        self.orders: list[Order] = space.orders.intra_tile_orders()
        self.inner_loops = space.orders.intra_tile_loops
        task = space.task
        self.dim_names = task.dim_names
        self.reduction = np.array([d.reduction for d in task.dims], dtype=np.float32)
        self.innermost_level = [d.splits - 1 for d in task.dims]
        d = len(self.dim_names)
        # per intra-tile order: the dimension at each position of the sub-nest, and pair precedences
        pos_of = {name: x for x, name in enumerate(self.dim_names)}
        self.dim_at = np.array([[pos_of[name] for name, _ in order[-d:]] for order in self.orders], dtype=np.int64)
        rank = np.argsort(self.dim_at, axis=1)  # rank[o, x]: position of dimension x in order o
        pairs = list(itertools.combinations(range(d), 2))
        self.precedence = np.array([[rank[o, a] < rank[o, b] for a, b in pairs] for o in range(len(self.orders))],
                                   dtype=np.float32)
        self.one_hot = np.eye(d, dtype=np.float32)[self.dim_at].reshape(len(self.orders), d * d)
        self.order_index = {order: i for i, order in enumerate(self.orders)}

    def tiles(self, configs: list[Config]) -> np.ndarray:
        return np.log2(np.array([[f for factors in c for f in factors] for c in configs], dtype=np.float64)).astype(np.float32)

    def inner_factors(self, configs: list[Config]) -> np.ndarray:
        """``(n, D)``: the innermost tile factor of each dimension."""
        return np.array([[c[x][lvl] for x, lvl in enumerate(self.innermost_level)] for c in configs], dtype=np.float64)

    def orders_of(self, configs: list[Config], order_ids: np.ndarray) -> np.ndarray:
        """Permutation features of ``(config, intra-tile order)`` pairs."""
        inner = np.log2(self.inner_factors(configs)).astype(np.float32)  # (n, D)
        at = self.dim_at[order_ids]  # (n, D): dimension at each position
        factor_at = np.take_along_axis(inner, at, axis=1)
        reduction_at = self.reduction[at]
        return np.concatenate([self.one_hot[order_ids], self.precedence[order_ids], factor_at, reduction_at, inner], axis=1)


def _fit(x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    import xgboost as xgb

    return xgb.train({**XGB_PARAMS, "seed": seed}, xgb.DMatrix(x, label=y), num_boost_round=XGB_ROUNDS)


def _predict(model: Any, x: np.ndarray) -> np.ndarray:
    import xgboost as xgb

    return model.predict(xgb.DMatrix(x))


class _PredictingAgent(Agent):
    """What CSP and MDF share: the schedule features, candidate tiles, the timed data and the prediction."""

    def __init__(self, seed: int, predict_tiles: int, predict_orders: int, candidates: int) -> None:
        super().__init__(seed)
        self.predict_tiles = check_positive(predict_tiles, "predict_tiles", integer=True)
        self.predict_orders = check_positive(predict_orders, "predict_orders", integer=True)
        self.candidates = check_positive(candidates, "candidates", integer=True)

    @property
    def n_predictions(self) -> int:
        return self.predict_tiles * self.predict_orders

    def _prepare(self) -> int:
        """Features, cleared reports; returns the training measurements the budget leaves."""
        self.features = ScheduleFeatures(self.space)
        #: the predicted schedules and their measurements (filled at the end of a run)
        self.prediction: list[tuple[Schedule, MeasureResult | None]] = []
        #: training data per domain: {"perm"|"tile"|"product": {"measurements": n, "backend_s": s}}
        self.data_cost: dict[str, dict[str, float]] = {}
        if self.remaining is None:
            raise ValueError(f"agent {self.name!r} splits a count budget between its domains: give a measurement count")
        train = self.remaining - self.n_predictions
        if train < 4:
            raise ValueError(
                f"agent {self.name!r} needs at least {self.n_predictions + 4} measurements after s0 "
                f"({self.n_predictions} for the prediction), has {self.remaining}"
            )
        return train

    def _measure_data(self, domain: str, schedules: list[Schedule]) -> list[MeasureResult | None]:
        wall = self.session.measure_wall_s
        fresh = sum(1 for s in set(schedules) if self.is_new(s))
        results = self.measure(schedules)
        cost = self.data_cost.setdefault(domain, {"measurements": 0, "backend_s": 0.0})
        cost["measurements"] += fresh
        cost["backend_s"] += self.session.measure_wall_s - wall
        return results

    def _schedule(self, config: Config, order_id: int) -> Schedule:
        return Schedule(config, self.features.orders[order_id])

    def _candidate_tiles(self, measured: list[Config]) -> list[Config]:
        draws = [self.space.tiles.sample(self.rng) for _ in range(self.candidates)]
        return list(dict.fromkeys(measured + draws))

    def _measure_prediction(self, schedules: list[Schedule]) -> None:
        schedules = list(dict.fromkeys(schedules))[: self.n_predictions]
        results = self.measure(schedules)
        self.prediction = list(zip(schedules, results))

    @property
    def predicted_best(self) -> tuple[Schedule, MeasureResult] | None:
        """The fastest of the measured predictions."""
        ok = [(s, r) for s, r in self.prediction if r is not None and r.latency_s is not None]
        return min(ok, key=lambda sr: sr[1].latency_s) if ok else None


class CSPAgent(_PredictingAgent):
    """Composed Singular Prediction: a permutation model, a tile model trained through it, composed."""

    name = "csp"

    def __init__(self, seed: int = 0, tile_schemes: int = 5, perm_share: float = 0.4, predict_tiles: int = 1,
                 predict_orders: int = 1, candidates: int = 4000) -> None:
        super().__init__(seed, predict_tiles, predict_orders, candidates)
        self.tile_schemes = check_positive(tile_schemes, "tile_schemes", integer=True)
        self.perm_share = check_in_range(perm_share, "perm_share", 0.0, 1.0)

    def search(self) -> None:
        train = self._prepare()
        f = self.features
        n_orders = len(f.orders)
        perm_budget = max(self.tile_schemes, round(self.perm_share * train))
        # --- permutation data: intra-tile permutations of a few tile schemes (the ADF's S2 samples)
        schemes = [self.space.tiles.sample(self.rng) for _ in range(self.tile_schemes)]
        per_scheme = max(1, min(n_orders, perm_budget // self.tile_schemes))
        pairs = [(c, int(o)) for c in schemes for o in self.rng.choice(n_orders, size=per_scheme, replace=False)]
        results = self._measure_data("perm", [self._schedule(c, o) for c, o in pairs])
        x, y = [], []
        for c in schemes:
            rows = [(o, r.latency_s) for (cc, o), r in zip(pairs, results) if cc == c and r is not None and r.latency_s]
            if len(rows) < 2:
                continue
            logs = np.log([lat for _, lat in rows])
            x.append(f.orders_of([c] * len(rows), np.array([o for o, _ in rows])))
            y.append(logs - logs.mean())
        if not x:
            raise ValueError(f"agent {self.name!r}: no tile scheme had two successful permutation measurements")
        self.perm_model = _fit(np.concatenate(x), np.concatenate(y), self.seed)

        # --- tile data: each scheme measured with the permutation the permutation model predicts (the
        # measurements the permutation data left; fewer orders than budget when D! is small)
        tile_budget = max(1, (self.remaining or 0) - self.n_predictions)
        tiles = list(dict.fromkeys(self.space.tiles.sample(self.rng) for _ in range(tile_budget)))
        chosen = self.best_orders(tiles, 1)[:, 0]
        results = self._measure_data("tile", [self._schedule(c, int(o)) for c, o in zip(tiles, chosen)])
        data = [(c, r.latency_s) for c, r in zip(tiles, results) if r is not None and r.latency_s is not None]
        self.tile_model = _fit(f.tiles([c for c, _ in data]), np.log([lat for _, lat in data]), self.seed)

        # --- composed prediction: apply the predicted tiling, then the predicted permutation
        candidates = self._candidate_tiles([c for c, _ in data])
        scores = _predict(self.tile_model, f.tiles(candidates))
        top = [candidates[i] for i in np.argsort(scores, kind="stable")[: self.predict_tiles]]
        orders = self.best_orders(top, self.predict_orders)
        self._measure_prediction([self._schedule(c, int(o)) for c, row in zip(top, orders) for o in row])

    def best_orders(self, configs: list[Config], k: int) -> np.ndarray:
        """``(len(configs), k)``: the ``k`` intra-tile orders the permutation model ranks first per config."""
        n_orders = len(self.features.orders)
        out = np.empty((len(configs), min(k, n_orders)), dtype=np.int64)
        all_orders = np.arange(n_orders)
        for i, c in enumerate(configs):
            scores = _predict(self.perm_model, self.features.orders_of([c] * n_orders, all_orders))
            out[i] = np.argsort(scores, kind="stable")[: out.shape[1]]
        return out


class MDFAgent(_PredictingAgent):
    """The Multiplicative Domain Formulation: one model over (tiles x intra-tile orders) samples."""

    name = "mdf"

    def __init__(self, seed: int = 0, predict_tiles: int = 1, predict_orders: int = 1, candidates: int = 4000,
                 mdf_orders: int = 4, mdf_refine: int = 20) -> None:
        super().__init__(seed, predict_tiles, predict_orders, candidates)
        self.mdf_orders = check_positive(mdf_orders, "mdf_orders", integer=True)
        self.mdf_refine = check_positive(mdf_refine, "mdf_refine", integer=True)

    def _x(self, configs: list[Config], order_ids: np.ndarray) -> np.ndarray:
        return np.concatenate([self.features.tiles(configs), self.features.orders_of(configs, order_ids)], axis=1)

    def search(self) -> None:
        train = self._prepare()
        f = self.features
        n_orders = len(f.orders)
        pairs = list(dict.fromkeys(
            (self.space.tiles.sample(self.rng), int(self.rng.integers(n_orders))) for _ in range(train)
        ))
        results = self._measure_data("product", [self._schedule(c, o) for c, o in pairs])
        data = [(c, o, r.latency_s) for (c, o), r in zip(pairs, results) if r is not None and r.latency_s is not None]
        self.model = _fit(self._x([c for c, _, _ in data], np.array([o for _, o, _ in data])),
                          np.log([lat for _, _, lat in data]), self.seed)
        # argmax over the product: every candidate tile with a few orders, then all orders of the best tiles
        candidates = self._candidate_tiles([c for c, _, _ in data])
        reps = [c for c in candidates for _ in range(self.mdf_orders)]
        draws = self.rng.integers(n_orders, size=len(reps))
        scores = _predict(self.model, self._x(reps, draws)).reshape(len(candidates), self.mdf_orders).min(axis=1)
        refine = [candidates[i] for i in np.argsort(scores, kind="stable")[: max(self.mdf_refine, self.predict_tiles)]]
        all_orders = np.arange(n_orders)
        best: list[tuple[float, Config, int]] = []
        for c in refine:
            s = _predict(self.model, self._x([c] * n_orders, all_orders))
            o = int(np.argmin(s))
            best.append((float(s[o]), c, o))
        best.sort(key=lambda t: t[0])
        chosen = []
        for _, c, _ in best[: self.predict_tiles]:
            s = _predict(self.model, self._x([c] * n_orders, all_orders))
            chosen += [self._schedule(c, int(o)) for o in np.argsort(s, kind="stable")[: self.predict_orders]]
        self._measure_prediction(chosen)
