"""The cross-operator cost model: gradient-boosted trees over :mod:`~schedule_gym.agents.transfer.features`.

:func:`fit_booster` fits XGBoost on configs of many tasks, labelled with ``log2(latency_s / flops)``, with
one of :data:`OBJECTIVES`: a pairwise ranking within each task (``rank:pairwise``, AutoTVM's objective;
label: the best latency of the task over the config's), a top-weighted ranking (``rank:ndcg``, labels the
same ratio in 16 grades) or a regression on the log time per flop (``reg:squarederror``: dividing by the
task's flops normalises the tasks onto one scale). :class:`TransferCostModel` holds the booster and its
sidecar (feature version, profile, protocol, training tasks, sample counts, seed), scores configs (higher
is faster, whatever the objective), continues boosting on one task's measurements (:meth:`fine_tuned`),
and is saved as XGBoost's JSON (gzip-compressed when the name ends in ``.json.gz``, as the shipped model: a
quarter of the size) plus a JSON sidecar: loading reads data only, nothing is unpickled.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.benchmark.pretrained import sidecar_path
from schedule_gym.data import DATA_DIR
from schedule_gym.agents.transfer.features import FEATURE_NAMES, FEATURE_VERSION, N_FEATURES

__all__ = ["DEFAULT_MODEL", "OBJECTIVES", "TransferCostModel", "fit_booster", "rank_labels"]

OBJECTIVES = ("rank:pairwise", "rank:ndcg", "reg:squarederror")
#: the model shipped with the package: pretrained on protocol v0's training split (examples/pretrain_cost_model.py)
DEFAULT_MODEL = DATA_DIR / "transfer-cost-model-v0.json.gz"
_NDCG_GRADES = 16  # rank:ndcg takes integer relevance; 16 grades of best/latency keep its gains finite
#: what every sidecar holds
SIDECAR_KEYS = ("feature_version", "feature_names", "objective", "profile", "protocol", "training_tasks",
                "samples", "seed", "params", "num_boost_round")


def rank_labels(log_time: np.ndarray, groups: np.ndarray, objective: str) -> np.ndarray:
    """XGBoost labels of ``objective`` for configs with ``log_time`` (``log2(latency_s / flops)``) in task
    ``groups``: ``best / latency`` within the group for ``rank:pairwise`` (graded into 16 integers for
    ``rank:ndcg``), the log time itself for a regression."""
    _check_objective(objective)
    log_time = np.asarray(log_time, dtype=np.float64)
    if objective == "reg:squarederror":
        return log_time
    groups = np.asarray(groups)
    out = np.empty_like(log_time)
    for g in np.unique(groups):
        at = groups == g
        out[at] = np.exp2(log_time[at].min() - log_time[at])
    if objective == "rank:ndcg":
        out = np.minimum(np.floor(_NDCG_GRADES * out), _NDCG_GRADES - 1)
    return out


def _check_objective(objective: object) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return str(objective)


def fit_booster(features: np.ndarray, log_time: np.ndarray, groups: np.ndarray, objective: str,
                params: Mapping[str, Any] | None = None, num_boost_round: int = 300, seed: int = 0,
                base: Any = None) -> Any:
    """An ``xgboost.Booster`` fitted on rows ``features`` (``(n, N_FEATURES)``) of configs with ``log_time``
    in task ``groups`` (rows of a group need not be contiguous), boosting ``num_boost_round`` trees on top of
    ``base`` (a booster to continue, or None). ``params`` override the tree parameters below."""
    import xgboost as xgb

    _check_objective(objective)
    features = np.asarray(features, dtype=np.float32)
    if features.ndim != 2 or features.shape[1] != N_FEATURES:
        raise ValueError(f"features must be (n, {N_FEATURES}), got shape {features.shape}")
    groups = np.asarray(groups)
    order = np.argsort(groups, kind="stable")  # XGBoost wants each query's rows together
    labels = rank_labels(log_time, groups, objective)[order]
    ranking = objective.startswith("rank:")
    dtrain = xgb.DMatrix(features[order], label=labels, qid=groups[order] if ranking else None,
                         feature_names=list(FEATURE_NAMES))
    full = {"objective": objective, "tree_method": "hist", "max_depth": 6, "eta": 0.1, "subsample": 0.8,
            "colsample_bytree": 0.8, "min_child_weight": 2.0, "nthread": 1, "seed": int(seed), "verbosity": 0}
    if ranking:  # pairs drawn at random within a task (pairwise) or around its top (ndcg)
        full.update(lambdarank_num_pair_per_sample=8,
                    lambdarank_pair_method="mean" if objective == "rank:pairwise" else "topk")
    full.update(params or {})
    return xgb.train(full, dtrain, num_boost_round=num_boost_round, xgb_model=base)


class TransferCostModel:
    """A pretrained booster and its sidecar ``meta`` (see :data:`SIDECAR_KEYS`)."""

    def __init__(self, booster: Any, meta: Mapping[str, Any]) -> None:
        missing = [k for k in SIDECAR_KEYS if k not in meta]
        if missing:
            raise ValueError(f"cost model sidecar lacks {', '.join(missing)}")
        if meta["feature_version"] != FEATURE_VERSION or list(meta["feature_names"]) != list(FEATURE_NAMES):
            raise ValueError(f"cost model was fitted on features {meta['feature_version']!r}; this package computes "
                             f"{FEATURE_VERSION!r}: pretrain it again (examples/pretrain_cost_model.py)")
        _check_objective(meta["objective"])
        self.booster = booster
        self.meta = dict(meta)

    @property
    def objective(self) -> str:
        return str(self.meta["objective"])

    def score(self, features: np.ndarray) -> np.ndarray:
        """Higher is faster: the ranking margin, or the negated predicted log time per flop."""
        out = self.booster.inplace_predict(np.asarray(features, dtype=np.float32), validate_features=False)
        out = np.asarray(out, dtype=np.float64)
        return -out if self.objective == "reg:squarederror" else out

    def fine_tuned(self, features: np.ndarray, log_time: np.ndarray, num_boost_round: int,
                   params: Mapping[str, Any], seed: int) -> TransferCostModel:
        """A copy boosted ``num_boost_round`` more trees on one task's measurements (continued boosting:
        the new trees fit what the pretrained ones get wrong on this task; TenSet's transfer, Section 5)."""
        booster = fit_booster(features, log_time, np.zeros(len(log_time), dtype=np.int64), self.objective,
                              params=params, num_boost_round=num_boost_round, seed=seed, base=self.booster.copy())
        return TransferCostModel(booster, self.meta)

    # ------------------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write the booster as XGBoost JSON at ``path`` (``*.json``, or ``*.json.gz`` compressed) and the sidecar
        beside it."""
        path = Path(path)
        if not path.name.endswith((".json", ".json.gz")):
            raise ValueError(f"a cost model file is XGBoost JSON and ends in .json or .json.gz, got {str(path)!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = bytes(self.booster.save_raw(raw_format="json"))
        path.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
        sidecar_path(path).write_text(json.dumps(self.meta, indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> TransferCostModel:
        """The model saved at ``path`` (XGBoost JSON, gzip-compressed if it ends in ``.gz``) with its sidecar. A missing, unreadable or malformed file
        is a ``ValueError`` naming it; nothing in either file is executed."""
        import xgboost as xgb

        path = Path(path)
        meta_path = sidecar_path(path)
        try:
            raw = path.read_bytes()
            if path.suffix == ".gz":
                raw = gzip.decompress(raw)
            meta_text = meta_path.read_text(encoding="utf-8")
        except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip's BadGzipFile is an OSError
            raise ValueError(f"cost model {path} cannot be read (with its sidecar {meta_path.name}): {exc}") from None
        try:
            meta = json.loads(meta_text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"cost model sidecar {meta_path} is not valid JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"cost model sidecar {meta_path} must hold a JSON object")
        booster = xgb.Booster()
        try:
            json.loads(raw)  # XGBoost's own parser reports a bad file only as a C++ trace
            booster.load_model(bytearray(raw))
        except (ValueError, xgb.core.XGBoostError) as exc:
            raise ValueError(f"cost model {path} is not an XGBoost JSON model: {str(exc).splitlines()[0]}") from None
        if booster.num_features() != N_FEATURES:
            raise ValueError(f"cost model {path} takes {booster.num_features()} features, not {N_FEATURES}")
        try:
            return cls(booster, meta)
        except ValueError as exc:
            raise ValueError(f"cost model {path}: {exc}") from None
