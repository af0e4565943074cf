"""The cost model (Zhao et al., Section 4: TenSet's MLP): :class:`FelixCostModel`, its training
(:func:`train_cost_model`), offline pretraining (:func:`pretrain_cost_model`) and its files
(:func:`save_cost_model`, :func:`load_cost_model`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from schedule_gym.agents.base import check_positive
from schedule_gym.agents.felix.features import FeatureSpec, TileFeaturizer
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task

__all__ = [
    "CHECKPOINT_FORMAT",
    "FelixCostModel",
    "load_cost_model",
    "pretrain_cost_model",
    "save_cost_model",
    "train_cost_model",
]

#: ``format`` of a saved cost model; bump when the checkpoint layout or the feature formulas change.
CHECKPOINT_FORMAT = "schedule-gym/felix-cost-model/v1"


class FelixCostModel(nn.Module):
    """An MLP predicting a config's log latency (seconds) from its features (Felix, Section 4: TenSet's MLP).

    ``forward(features) = log_flops + target_mean + target_std * mlp((features - feature_mean) / feature_std)``:
    the network predicts log seconds per flop (standardised), the inverse of the normalised throughput
    TenSet's model predicts, so one model spans shapes. ``n_hidden_layers`` hidden layers of
    ``hidden_size`` ReLU units (4 linear layers by default, as in TenSet). The normalisers are buffers,
    saved with the weights. ``config`` is plain JSON: everything needed to rebuild the model.
    """

    def __init__(self, spec: FeatureSpec | None = None, hidden_size: int = 256, n_hidden_layers: int = 3) -> None:
        super().__init__()
        spec = FeatureSpec() if spec is None else spec
        hidden_size = check_positive(hidden_size, "hidden_size", integer=True)
        n_hidden_layers = check_positive(n_hidden_layers, "n_hidden_layers", integer=True)
        self.spec = spec
        self.config: dict[str, Any] = {
            "feature_spec": spec.to_dict(),
            "hidden_size": hidden_size,
            "n_hidden_layers": n_hidden_layers,
        }
        n_features = spec.n_features()
        layers: list[nn.Module] = []
        width = n_features
        for _ in range(n_hidden_layers):
            layers += [nn.Linear(width, hidden_size), nn.ReLU()]
            width = hidden_size
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        self.register_buffer("feature_mean", torch.zeros(n_features))
        self.register_buffer("feature_std", torch.ones(n_features))
        self.register_buffer("target_mean", torch.zeros(()))
        self.register_buffer("target_std", torch.ones(()))
        # 0: normalisers not fitted; 1: features fitted; 2: features and targets fitted
        self.register_buffer("fitted", torch.zeros((), dtype=torch.int64))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FelixCostModel:
        if not isinstance(config, dict) or set(config) != {"feature_spec", "hidden_size", "n_hidden_layers"}:
            raise ValueError(f"a cost model config has keys feature_spec, hidden_size, n_hidden_layers; got {config!r}")
        return cls(FeatureSpec.from_dict(config["feature_spec"]), config["hidden_size"], config["n_hidden_layers"])

    def featurizer(self, task: Task) -> TileFeaturizer:
        """The featurizer of ``task`` under this model's spec (ValueError if the task does not fit it)."""
        return TileFeaturizer(task, self.spec)

    def fit_feature_normaliser(self, features: torch.Tensor) -> None:
        with torch.no_grad():
            self.feature_mean.copy_(features.mean(0))
            std = features.std(0) if features.shape[0] > 1 else torch.ones_like(self.feature_std)
            self.feature_std.copy_(torch.where(std > 1e-3, std, torch.ones_like(std)))
            self.fitted.fill_(max(1, int(self.fitted)))

    def fit_target_normaliser(self, features: torch.Tensor, log_latency: torch.Tensor) -> None:
        rel = log_latency - features[:, 0]
        with torch.no_grad():
            self.target_mean.copy_(rel.mean())
            std = rel.std() if rel.numel() > 1 else torch.ones(())
            self.target_std.copy_(std if std > 1e-3 else torch.ones(()))
            self.fitted.fill_(2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.feature_mean) / self.feature_std
        return features[:, 0] + self.target_mean + self.target_std * self.mlp(z).squeeze(-1)


def train_cost_model(
    model: FelixCostModel,
    features: torch.Tensor,
    log_latency: torch.Tensor,
    steps: int,
    lr: float = 1e-3,
    batch_size: int | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
) -> float:
    """Fit ``model`` to ``(features, log_latency)`` with Adam on the squared error in standardised units.

    ``steps`` optimiser steps, on the whole set or on minibatches of ``batch_size`` drawn with
    ``generator`` (in a fixed, seeded order). Fits the normalisers first if they are not yet fitted.
    Returns the last loss.
    """
    if int(model.fitted) < 1:
        model.fit_feature_normaliser(features)
    if int(model.fitted) < 2:
        model.fit_target_normaliser(features, log_latency)
    opt = optimizer if optimizer is not None else torch.optim.Adam(model.parameters(), lr=lr)
    n = features.shape[0]
    loss = torch.zeros(())
    model.train()
    for _ in range(steps):
        if batch_size is None or batch_size >= n:
            x, y = features, log_latency
        else:
            pick = torch.randint(n, (batch_size,), generator=generator)
            x, y = features[pick], log_latency[pick]
        loss = (((model(x) - y) / model.target_std) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


# ============================================================================ pretraining and files
def _as_task(item: object) -> Task:
    from schedule_gym.envs import TilingEnv
    from schedule_gym.tasks import get_task

    if isinstance(item, Task):
        return item
    if isinstance(item, str):
        return get_task(item)
    base = getattr(item, "unwrapped", item)
    if isinstance(base, TilingEnv):
        return base.task
    raise TypeError(f"expected a Task, a preset task name or a TilingEnv, got {item!r}")


def _record_samples(source: object) -> list[tuple[Task, np.ndarray, np.ndarray]]:
    """``(task, configs' log-factors, log costs)`` per task of a record file, store or shipped table key."""
    from schedule_gym.data import TABLES
    from schedule_gym.records import RecordStore

    if isinstance(source, RecordStore):
        store = source
    elif isinstance(source, str) and source in TABLES:
        store = RecordStore(TABLES[source].path)
    elif isinstance(source, (str, os.PathLike)):
        store = RecordStore(source)
    else:
        raise TypeError(f"records must be a record file path, a RecordStore or a shipped table key, got {source!r}")
    by_task: dict[str, list] = {}
    tasks: dict[str, Task] = {}
    for record in store:
        by_task.setdefault(record.task.key, []).append(record.result)
        tasks[record.task.key] = record.task
    out = []
    for key, results in by_task.items():
        ok = [r.latency_s for r in results if r.latency_s is not None]
        if not ok:
            continue
        failed = 10.0 * max(ok)  # as Agent.failed_cost: ten times the worst successful latency
        flat = np.array([[f for fs in r.config for f in fs] for r in results], dtype=np.float64)
        costs = np.array([failed if r.latency_s is None else r.latency_s for r in results])
        out.append((tasks[key], np.log(flat), np.log(costs)))
    return out


def pretrain_cost_model(
    tasks: Iterable[object] = (),
    records: Iterable[object] = (),
    *,
    backend: object = "mock",
    n_samples: int = 8192,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 1e-3,
    hidden_size: int = 256,
    n_hidden_layers: int = 3,
    spec: FeatureSpec | None = None,
    seed: int = 0,
) -> FelixCostModel:
    """A cost model fitted offline, as Felix pretrains on TenSet (Section 4), for :class:`FelixAgent`.

    Args:
        tasks: tasks (a :class:`Task`, a preset name such as ``"gemm-512"`` or a ``TilingEnv``) of which
            ``n_samples`` configs each, drawn uniformly, are scored by ``backend``. Never include the task
            the model will later tune if the point is to measure transfer.
        records: measurement records to fit too: record file paths, ``RecordStore`` objects or keys of
            shipped tables (``"gemm-128-323-znver5-1t"``: real Zen 5 latencies). Failed records cost ten
            times the worst success of their task, as in the search.
        backend: ``"mock"`` (the default CPU profile), a profile name, or a ``LatencyBackend``; a
            ``MockBackend`` is scored in bulk with its analytic model, any other backend measures.
        epochs: passes over the samples, in minibatches of ``batch_size``, Adam at ``lr``.
        spec: the feature spec (default: :meth:`FeatureSpec.for_tasks` of every task).
        seed: seeds the config draws and the model's initialisation and batches (global RNG untouched).

    >>> model = pretrain_cost_model(["gemm-64"], n_samples=64, epochs=1, hidden_size=8)
    >>> model.config["hidden_size"]
    8
    """
    from schedule_gym.backends import LatencyBackend, MockBackend
    from schedule_gym.backends.mock.selection import PROFILES

    n_samples = check_positive(n_samples, "n_samples", integer=True)
    epochs = check_positive(epochs, "epochs", integer=True)
    batch_size = check_positive(batch_size, "batch_size", integer=True)
    lr = check_positive(lr, "lr")
    if isinstance(backend, str):
        if backend == "mock":
            backend = MockBackend()
        elif backend in PROFILES:
            backend = MockBackend(profile=backend)
        else:
            raise ValueError(
                f"backend must be 'mock', a mock profile name ({', '.join(PROFILES)}) or a LatencyBackend, "
                f"got {backend!r}"
            )
    if not isinstance(backend, LatencyBackend):
        raise TypeError(f"backend must be 'mock', a mock profile name or a LatencyBackend, got {backend!r}")
    task_list = [_as_task(t) for t in tasks]
    if isinstance(records, (str, os.PathLike)):
        records = [records]
    samples: list[tuple[Task, np.ndarray, np.ndarray]] = []
    for source in records:
        samples.extend(_record_samples(source))
    rng = np.random.default_rng(seed)
    for task in task_list:
        space = TileSpace(task)
        idx = space.sample_indices(rng, min(n_samples, space.size))
        if backend.scores_in_bulk:  # a noise-free model or records: scored at once
            lat = backend.bulk_latency_s(task, idx)
        else:
            results = backend.measure(task, [space.config(int(i)) for i in idx])
            ok = [r.latency_s for r in results if r.latency_s is not None]
            failed = 10.0 * max(ok) if ok else 1.0
            lat = np.array([failed if r.latency_s is None else r.latency_s for r in results])
        flat = np.concatenate(space.factors_of_indices(idx), axis=1).astype(np.float64)
        samples.append((task, np.log(flat), np.log(lat)))
    if not samples:
        raise ValueError("pretrain_cost_model needs at least one task or record source with a successful measurement")
    spec = FeatureSpec.for_tasks([t for t, _, _ in samples]) if spec is None else spec
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = FelixCostModel(spec, hidden_size, n_hidden_layers)
        feats, targets = [], []
        with torch.no_grad():
            for task, log_f, log_lat in samples:
                feats.append(TileFeaturizer(task, spec)(torch.from_numpy(log_f).to(torch.float32)))
                targets.append(torch.from_numpy(log_lat).to(torch.float32))
        x, y = torch.cat(feats), torch.cat(targets)
        generator = torch.Generator().manual_seed(seed)
        steps = epochs * max(1, math.ceil(x.shape[0] / batch_size))
        train_cost_model(model, x, y, steps=steps, lr=lr, batch_size=batch_size, generator=generator)
    return model


def save_cost_model(model: FelixCostModel, path: str | os.PathLike) -> None:
    """Write ``model`` as a plain ``state_dict`` and a JSON config (no pickled objects, no code)."""
    if not isinstance(model, FelixCostModel):
        raise TypeError(f"expected a FelixCostModel, got {type(model).__name__}")
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    torch.save({"format": CHECKPOINT_FORMAT, "config": json.dumps(model.config), "state_dict": state}, Path(path))


def load_cost_model(path: str | os.PathLike) -> FelixCostModel:
    """Read a model written by :func:`save_cost_model`.

    The file is read with ``torch.load(weights_only=True)``, which unpickles only tensors and plain
    containers, so a file cannot run code; anything but the expected layout (format tag, JSON config,
    a ``state_dict`` of finite tensors of the right names and shapes) is a ``ValueError`` naming the path.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cost model file {str(path)!r} does not exist")
    where = f"{str(path)!r} is not a Felix cost model checkpoint"
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError (disallowed globals), RuntimeError, EOFError, ...
        reason = " ".join(str(exc).split())[:300]
        raise ValueError(f"{where}: it cannot be loaded as plain tensors ({type(exc).__name__}: {reason})") from None
    if not isinstance(data, dict) or set(data) != {"format", "config", "state_dict"}:
        found = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: expected a dict with keys format, config, state_dict, found {found}")
    if data["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"{where}: format {data['format']!r}, expected {CHECKPOINT_FORMAT!r}")
    try:
        config = json.loads(data["config"]) if isinstance(data["config"], str) else None
        if config is None:
            raise ValueError("config is not a JSON string")
        model = FelixCostModel.from_config(config)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: bad config ({exc})") from None
    state = data["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ValueError(f"{where}: state_dict must map names to tensors")
    expected = model.state_dict()
    if set(state) != set(expected):
        raise ValueError(f"{where}: state_dict keys {sorted(state)} differ from the model's {sorted(expected)}")
    for key, value in state.items():
        if value.shape != expected[key].shape or value.dtype != expected[key].dtype:
            raise ValueError(
                f"{where}: {key} has shape {tuple(value.shape)} {value.dtype}, "
                f"expected {tuple(expected[key].shape)} {expected[key].dtype}"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}: {key} holds non-finite values")
    model.load_state_dict(state)
    model.eval()
    return model
