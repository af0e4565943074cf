"""Model-based search from a pretrained cross-operator cost model: :class:`TransferAgent`."""

from __future__ import annotations

import functools
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.agents.base import Agent, check_in_range, check_positive
from schedule_gym.agents.random_search import draw_without_replacement
from schedule_gym.agents.transfer.features import NestFeaturizer
from schedule_gym.agents.transfer.model import DEFAULT_MODEL, TransferCostModel
from schedule_gym.envs.features import machine_profile
from schedule_gym.spaces import TileSpace

__all__ = ["TransferAgent", "load_cost_model", "neighbour_indices"]


def neighbour_indices(space: TileSpace, indices: np.ndarray) -> np.ndarray:
    """``(len(indices), space.n_actions)`` int64: the config each move leads to from each config, -1 where
    the move is illegal (the vectorised :meth:`TileSpace.neighbours`)."""
    idx = np.asarray(indices, dtype=np.int64)
    out = []
    for d, stride, size in zip(space.dims, space.strides, space.dim_sizes):
        row = (idx // stride) % size
        nxt = d.next_row[row]
        out.append(np.where(nxt >= 0, idx[:, None] + (nxt - row[:, None]) * stride, -1))
    return np.concatenate(out, axis=1) if out else np.empty((len(idx), 0), dtype=np.int64)


def _check_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def _best_first(indices: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``indices`` without repeats and their scores, best score first (ties: first seen)."""
    order = np.argsort(-scores, kind="stable")
    unique, first = np.unique(indices[order], return_index=True)
    keep = np.sort(first)
    return indices[order][keep], scores[order][keep]


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, stamp: tuple[int, int]) -> TransferCostModel:
    return TransferCostModel.load(path)


def load_cost_model(path: str | os.PathLike) -> TransferCostModel:
    """:meth:`TransferCostModel.load`, cached while the file is unchanged (its boosters are never changed in
    place: fine-tuning boosts a copy)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise ValueError(f"cost model {path} cannot be read: {exc}") from None
    return _load_cached(str(path.resolve()), (stat.st_mtime_ns, stat.st_size))


class TransferAgent(Agent):
    """AutoTVM's model-based search (Chen et al., NeurIPS 2018, Sections 3-4) started from a cost model
    pretrained across operators (TenSet's transfer learning, Zheng et al., NeurIPS 2021 datasets track,
    Section 5), on the shared features of :mod:`~schedule_gym.agents.transfer.features`.

    Each round:

    1. **propose** (AutoTVM's model optimiser): score ``pool_size`` configs drawn uniformly, the best
       measured configs and the annealing chains of the last round with the model; ``parallel_size`` chains
       start from the best of them and take ``n_iter`` steps of simulated annealing over the tile space's
       moves (a random move accepted with probability ``exp(gain / T)``, ``T`` falling linearly from
       ``temperature`` times the spread of the pool's scores to 0); the ``n_climb`` best configs visited then
       climb to the best of their neighbours under the model until none is better;
    2. **measure** a batch of ``batch_size`` of the best unmeasured configs visited, each replaced with
       probability ``eps_greedy`` by a uniformly random unmeasured config (AutoTVM's epsilon-greedy);
    3. **fine-tune**: the pretrained booster continued with ``finetune_rounds`` trees (depth
       ``finetune_depth``, step ``finetune_eta``) fitted to this task's measurements so far, failed ones
       at :meth:`Agent.failed_cost` (TenSet's fine-tuning of a pretrained model on the target task); every
       round refits from the pretrained booster, so the model is a function of the measurements.

    There is no random first plan: the pretrained model ranks the first batch. With ``serial_probe`` that
    batch also holds two **serial** configs, which open no parallel region: the model's best *serial twin*
    of its best configs (the same inner tiles, the parallel loops' factors moved into the next loop of their
    dimension) and its best of uniformly drawn serial configs, climbed among serial neighbours. Whether to
    open a parallel region is the one decision whose cost does not scale with the kernel (a fixed launch
    overhead, against the kernel's run time), so a tree model pretrained on larger kernels than the task's
    cannot rank it (trees do not extrapolate); the probes isolate that decision, and their measurements
    teach the fine-tuned model which side wins.

    Args:
        seed: seeds every draw (pool, annealing, exploration) and the boosting.
        cost_model: a :class:`TransferCostModel` or the path of one saved by
            ``examples/pretrain_cost_model.py`` (default: the shipped model pretrained on protocol v0's
            training split, on the mock's ``znver5-2core-fitted`` profile).
        batch_size, eps_greedy, pool_size, parallel_size, n_iter, temperature, n_climb: see above.
        finetune_rounds, finetune_depth, finetune_eta: see above.
        serial_probe: measure two serial configs in the first batch (see above).

    The features describe the backend's CPU profile (:func:`~schedule_gym.envs.features.machine_profile`:
    the mock's own, else the mock's pick for this machine), so the agent runs on any backend.

    >>> from schedule_gym.envs import gemm_env
    >>> TransferAgent(seed=0).run(gemm_env(64, 64, 64), 20).num_measurements
    20
    """

    name = "transfer"

    def __init__(
        self,
        seed: int = 0,
        cost_model: TransferCostModel | str | os.PathLike | None = None,
        batch_size: int = 8,
        eps_greedy: float = 0.05,
        pool_size: int = 2048,
        parallel_size: int = 64,
        n_iter: int = 50,
        temperature: float = 0.5,
        n_climb: int = 8,
        finetune_rounds: int = 20,
        finetune_depth: int = 3,
        finetune_eta: float = 0.3,
        serial_probe: bool = True,
    ) -> None:
        super().__init__(seed)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)
        self.eps_greedy = check_in_range(eps_greedy, "eps_greedy", 0.0, 1.0)
        self.pool_size = check_positive(pool_size, "pool_size", integer=True)
        self.parallel_size = check_positive(parallel_size, "parallel_size", integer=True)
        self.n_iter = _check_count(n_iter, "n_iter")
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not 0 <= temperature < math.inf:
            raise ValueError(f"temperature must be a non-negative finite number, got {temperature!r}")
        self.temperature = float(temperature)
        self.n_climb = _check_count(n_climb, "n_climb")
        self.finetune_rounds = _check_count(finetune_rounds, "finetune_rounds")
        self.finetune_depth = check_positive(finetune_depth, "finetune_depth", integer=True)
        self.finetune_eta = check_in_range(finetune_eta, "finetune_eta", 0.0, 1.0)
        if not isinstance(serial_probe, (bool, np.bool_)):
            raise ValueError(f"serial_probe must be true or false, got {serial_probe!r}")
        self.serial_probe = bool(serial_probe)
        if cost_model is None:
            cost_model = DEFAULT_MODEL
        if isinstance(cost_model, TransferCostModel):
            self._pretrained, self.cost_model = cost_model, "TransferCostModel"
        elif isinstance(cost_model, (str, os.PathLike)):
            self._pretrained, self.cost_model = load_cost_model(cost_model), str(cost_model)
        else:
            raise TypeError(f"cost_model must be a TransferCostModel, a path or None, got {type(cost_model).__name__}")

    @classmethod
    def default_artefacts(cls, params: Mapping[str, Any]) -> tuple[Path, ...]:
        """The shipped model when ``cost_model`` is not given (its sidecar names its training tasks)."""
        return (DEFAULT_MODEL,) if params.get("cost_model") is None else ()

    # ------------------------------------------------------------------------------ model
    def _fine_tune(self) -> TransferCostModel:
        rows = self._result.history
        if self.finetune_rounds == 0 or len(rows) < 2:
            return self._pretrained
        failed = self.failed_cost()
        indices = np.array([r.index for r in rows], dtype=np.int64)
        latency = np.array([failed if r.latency_s is None else r.latency_s for r in rows])
        if np.all(latency == latency[0]):
            return self._pretrained  # nothing to rank
        params = {"max_depth": self.finetune_depth, "eta": self.finetune_eta, "subsample": 1.0,
                  "colsample_bytree": 1.0, "min_child_weight": 1.0}
        return self._pretrained.fine_tuned(self._featurize(indices), np.log2(latency / self._flops),
                                           self.finetune_rounds, params, seed=int(self.rng.integers(2**31)))

    def _score(self, model: TransferCostModel, indices: np.ndarray) -> np.ndarray:
        return model.score(self._featurize(indices))

    # ----------------------------------------------------------------------------- search
    def _propose(self, model: TransferCostModel, measured: set[int]) -> list[int]:
        """Step 1: unmeasured configs visited by annealing and climbing, best predicted first."""
        space, rng = self.space, self.rng
        ok = sorted((r for r in self._result.history if r.latency_s is not None), key=lambda r: r.latency_s)
        elites = np.array([r.index for r in ok[: max(1, self.parallel_size // 4)]], dtype=np.int64)
        pool = np.unique(np.concatenate([
            space.sample_indices(rng, min(self.pool_size, space.size)), elites,
            self._chains if self._chains is not None else np.empty(0, dtype=np.int64)]))
        pool_scores = self._score(model, pool)
        top = np.argsort(-pool_scores, kind="stable")[: self.parallel_size]
        points, scores = pool[top], pool_scores[top]
        seen_idx, seen_scores = [pool], [pool_scores]
        spread = float(np.std(pool_scores)) or 1.0
        for k in range(self.n_iter):
            temp = self.temperature * spread * (1.0 - k / self.n_iter) + 1e-12
            new = space.random_moves(points, rng)
            new_scores = self._score(model, new)
            accept = rng.random(len(points)) < np.exp(np.minimum((new_scores - scores) / temp, 0.0))
            points, scores = np.where(accept, new, points), np.where(accept, new_scores, scores)
            seen_idx.append(new)
            seen_scores.append(new_scores)
        self._chains = points
        climbers, climber_scores = _best_first(np.concatenate(seen_idx), np.concatenate(seen_scores))
        climbers, climber_scores = climbers[: self.n_climb], climber_scores[: self.n_climb]
        while climbers.size and space.n_actions:
            nb = neighbour_indices(space, climbers)
            legal = nb >= 0
            flat = np.where(legal, nb, climbers[:, None])
            nb_scores = self._score(model, flat.ravel()).reshape(flat.shape)
            nb_scores[~legal] = -np.inf
            seen_idx.append(flat[legal])
            seen_scores.append(nb_scores[legal])
            best = np.argmax(nb_scores, axis=1)
            gain = nb_scores[np.arange(len(climbers)), best] > climber_scores
            climbers = flat[np.arange(len(climbers)), best][gain]
            climber_scores = nb_scores[np.arange(len(gain)), best][gain]
        ranked, _ = _best_first(np.concatenate(seen_idx), np.concatenate(seen_scores))
        return [i for i in ranked.tolist() if i not in measured]

    def _parallel_levels(self) -> dict[int, set[int]]:
        """The parallel loops of the nest (its ``n_parallel`` leading loops) as {dimension position: tile
        levels}: the one reading of which factors open the parallel region, for the twins and the masks."""
        nest, dim_pos = self._featurize.nest, self._featurize.dim_pos
        levels: dict[int, set[int]] = {}
        for name, level in nest.order[: nest.n_parallel]:
            levels.setdefault(dim_pos[name], set()).add(level)
        return levels

    def _serial_twin(self, index: int) -> int | None:
        """The config ``index`` would be without its parallel region: the factors of its parallel loops moved
        into the next inner loop of the same dimension (the innermost other loop when none is inner), so its
        inner tiles are kept; None when the nest has no parallel loop."""
        levels, space = self._parallel_levels(), self.space
        if not levels:
            return None
        rows = list(space.rows_of_index(index))
        for x, parallel in levels.items():
            dim = space.dims[x]
            factors = list(dim.tuples[rows[x]])
            free = [level for level in range(dim.splits) if level not in parallel]
            if not free:
                return None
            target = next((level for level in free if level > max(parallel)), free[-1])
            for level in parallel:
                factors[target] *= factors[level]
                factors[level] = 1
            rows[x] = dim.row_of[tuple(factors)]
        return int(sum(r * stride for r, stride in zip(rows, space.strides)))

    def _serial_masks(self) -> list[np.ndarray] | None:
        """Per dimension, a mask of the rows (factorisations) that give every parallel loop on that dimension
        extent 1: the serial configs are exactly the products of allowed rows (None: no parallel loop)."""
        levels = self._parallel_levels()
        if not levels:
            return None
        masks = [np.ones(d.table.shape[0], dtype=bool) for d in self.space.dims]
        for x, parallel in levels.items():
            masks[x] = np.all(self.space.dims[x].table[:, sorted(parallel)] == 1, axis=1)
        return masks

    def _serial_probes(self, model: TransferCostModel, plan: list[int], measured: set[int]) -> list[int]:
        """Two unmeasured serial configs: the model's best serial twin of the plan's ``parallel_size`` first
        configs (their inner tiles as ranked), and the model's best of ``pool_size`` serial configs drawn
        uniformly, climbed to its best serial neighbour until none is better (the model's own serial pick)."""
        space, rng = self.space, self.rng
        masks = self._serial_masks()
        if masks is None:
            return []

        def serial(indices: np.ndarray) -> np.ndarray:
            keep = np.ones(len(indices), dtype=bool)
            for m, stride, size in zip(masks, space.strides, space.dim_sizes):
                keep &= m[(indices // stride) % size]
            return keep

        def best_new(indices: np.ndarray, chosen: list[int]) -> tuple[int, float] | None:
            fresh = np.array([i for i in np.unique(indices).tolist() if i not in measured and i not in chosen],
                             dtype=np.int64)
            if not fresh.size:
                return None
            scores = self._score(model, fresh)
            return int(fresh[np.argmax(scores)]), float(scores.max())

        probes: list[int] = []
        twins = [t for t in map(self._serial_twin, plan[: self.parallel_size]) if t is not None]
        if (pick := best_new(np.array(twins, dtype=np.int64), probes)) is not None:
            probes.append(pick[0])
        allowed = [np.flatnonzero(m) for m in masks]
        n = min(self.pool_size, math.prod(len(a) for a in allowed))
        pool = sum((a[rng.integers(len(a), size=n)] * stride for a, stride in zip(allowed, space.strides)),
                   np.zeros(n, dtype=np.int64))
        pick = best_new(pool, probes)
        while pick is not None and space.n_actions:
            nb = neighbour_indices(space, np.array([pick[0]]))[0]
            nb = nb[nb >= 0]
            better = best_new(nb[serial(nb)], probes)
            if better is None or better[1] <= pick[1]:
                break
            pick = better
        return probes + ([pick[0]] if pick is not None else [])

    def search(self) -> None:
        space = self.space
        profile = machine_profile(self.session.backend)
        self._featurize = NestFeaturizer(space, profile)
        self._flops = float(space.task.flops)
        self._chains: np.ndarray | None = None
        measured = {r.index for r in self._result.history} | {space.index(space.initial_config())}
        draws = draw_without_replacement(self.rng, space.size, set(measured))
        model = self._pretrained
        probe = self.serial_probe
        while True:
            self.check_budget()
            plan = self._propose(model, measured)
            n = self.batch_size if self.remaining is None else min(self.batch_size, self.remaining)
            batch: list[int] = []
            if probe:
                batch += self._serial_probes(model, plan, measured)[:n]
                probe = False
            for idx in plan:
                if len(batch) == n:
                    break
                if self.rng.random() < self.eps_greedy:
                    idx = next((i for i in draws if i not in measured and i not in batch), -1)
                    if idx < 0:
                        continue
                if idx not in batch:
                    batch.append(idx)
            while len(batch) < n:  # the plan ran dry: fill from uniform draws
                idx = next((i for i in draws if i not in measured and i not in batch), -1)
                if idx < 0:
                    break
                batch.append(idx)
            if not batch:
                return
            self.measure(batch)
            measured.update(batch)
            self.check_budget()
            model = self._fine_tune()
