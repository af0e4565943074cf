"""Pretrain the transfer agent's cross-operator cost model on a protocol's training tasks and save it as XGBoost JSON.

One file, top to bottom (CleanRL style): arguments, data, objective selection on a validation split of the
training tasks, the final fit, saving.

* **data**: per training task (held-out tasks are refused: ``check_training_tasks``), ``n_uniform`` configs
  drawn uniformly and the configs met by ``n_descents`` greedy descents on the mock (best neighbour until
  none is better; half start from the best uniform configs, half from random ones), so good configs are
  represented; each labelled with the mock's latency on the protocol's profile, featurised by
  :func:`schedule_gym.agents.transfer.features.config_features`;
* **selection**: every objective of ``--objectives`` is fitted on the training tasks less a validation
  group (``val_tasks`` drawn with the seed) and on convolutions only (validated on the dense layers and
  batch matmuls: an unseen operator, as a depthwise convolution is on the held-out split); the one with the
  lowest mean top-16 regret over both validation groups (the best latency among the model's 16 first
  picks of a task's sample, against the sample's best) is refitted on every training task;
* **saving**: ``<out>`` (XGBoost JSON: loads without unpickling) and ``<out stem>.meta.json`` (feature
  version, profile, protocol, training tasks' keys, sample counts, seed, validation figures).

    nice .venv/bin/python examples/pretrain_cost_model.py --protocol v0
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
from scipy.stats import spearmanr

from schedule_gym.agents.transfer import (
    DEFAULT_MODEL,
    FEATURE_NAMES,
    FEATURE_VERSION,
    NestFeaturizer,
    TransferCostModel,
    fit_booster,
    neighbour_indices,
)
from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.pretrained import check_training_tasks
from schedule_gym.hardware import cpu_name


@dataclass
class Args:
    protocol: str = "v0"
    """the protocol whose training split is fitted (on its mock profile)"""
    profile: str = ""
    """the mock profile whose latencies label the data and whose caches the features describe (default: the
    protocol's); a model for the CPU a profile is fitted to, such as the day's"""
    n_uniform: int = 4096
    """configs drawn uniformly per training task"""
    n_descents: int = 32
    """greedy descents on the mock per training task"""
    n_neighbours: int = 4096
    """configs kept per task of those the descents scored (their paths are always kept)"""
    objectives: str = "rank:pairwise,rank:ndcg,reg:squarederror"
    """objectives compared on the validation splits (comma-separated)"""
    val_tasks: int = 6
    """training tasks held back for validation (drawn with the seed)"""
    num_boost_round: int = 300
    max_depth: int = 6
    """depth 6 keeps the JSON near 2.5 MB and validated as well as 8"""
    eta: float = 0.1
    nthread: int = 2
    seed: int = 0
    out: str = str(DEFAULT_MODEL)
    """the model file; its sidecar is <stem>.meta.json beside it"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def descend(backend: MockBackend, task, space, index: int) -> tuple[list[int], dict[int, float]]:
    """Greedy descent on the mock from ``index``: the path, and every config scored on the way."""
    latency = float(backend.model_latency_s(task, [index])[0])
    path, scored = [index], {index: latency}
    while True:
        nb = neighbour_indices(space, np.array([index]))[0]
        nb = nb[nb >= 0]
        if nb.size == 0:
            return path, scored
        lat = backend.model_latency_s(task, nb)
        scored.update(zip(nb.tolist(), lat.tolist()))
        best = int(np.argmin(lat))
        if lat[best] >= latency:
            return path, scored
        index, latency = int(nb[best]), float(lat[best])
        path.append(index)


def collect(protocol, tasks, args: Args, rng: np.random.Generator):
    """Features, ``log2(latency / flops)``, task group and whether drawn uniformly, of every training task's
    sample; a held-out task is a ValueError (before anything is scored)."""
    tasks = check_training_tasks(protocol, tasks)
    backend = MockBackend(profile=protocol.profile)
    xs, ys, groups, uniform, counts = [], [], [], [], {}
    for g, task in enumerate(tasks):
        space = backend.space(task)
        drawn = space.sample_indices(rng, min(args.n_uniform, space.size))
        drawn_lat = backend.model_latency_s(task, drawn)
        half = args.n_descents // 2
        starts = np.concatenate([drawn[np.argsort(drawn_lat, kind="stable")[:half]],
                                 rng.choice(drawn, min(args.n_descents - half, drawn.size), replace=False)])
        paths, scored = [], {}
        for start in starts.tolist():
            path, met = descend(backend, task, space, start)
            paths += path
            scored.update(met)
        met_idx = np.fromiter(scored, dtype=np.int64, count=len(scored))
        kept = rng.choice(met_idx, min(args.n_neighbours, met_idx.size), replace=False)
        idx = np.unique(np.concatenate([drawn, kept, np.array(paths, dtype=np.int64)]))
        xs.append(NestFeaturizer(space, backend.profile)(idx))
        ys.append(np.log2(backend.model_latency_s(task, idx) / task.flops))
        groups.append(np.full(idx.size, g))
        uniform.append(np.isin(idx, drawn))
        counts[task.name] = int(idx.size)
        print(f"  {task.name}: {idx.size} configs ({drawn.size} uniform, {len(scored)} met by {starts.size} descents)")
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(groups), np.concatenate(uniform), counts


def evaluate(model: TransferCostModel, x, y, groups, uniform, at: np.ndarray, top: int = 16) -> dict[str, float]:
    """Mean over the tasks ``at`` of: Spearman correlation with the latency on the uniform sample, and the
    regret of the model's ``top`` first picks of the task's whole sample (best picked / best - 1)."""
    rhos, regrets = [], []
    for g in np.unique(groups[at]):
        rows = at & (groups == g)
        score, log_time = model.score(x[rows]), y[rows]
        drawn = uniform[rows]
        rhos.append(spearmanr(score[drawn], -log_time[drawn]).statistic)
        picks = np.argsort(-score, kind="stable")[:top]
        regrets.append(float(np.exp2(log_time[picks].min() - log_time.min()) - 1.0))
    return {"spearman": float(np.mean(rhos)), f"top{top}_regret_mean": float(np.mean(regrets)),
            f"top{top}_regret_median": float(np.median(regrets)), "tasks": int(len(rhos))}


if __name__ == "__main__":
    args = parse_args()
    protocol = get_protocol(args.protocol)
    if args.profile:
        protocol = replace(protocol, profile=args.profile)
    rng = np.random.default_rng(args.seed)
    tree_params = {"max_depth": args.max_depth, "eta": args.eta, "nthread": args.nthread}

    def meta_of(objective: str, tasks, counts, validation) -> dict:
        return {"feature_version": FEATURE_VERSION, "feature_names": list(FEATURE_NAMES), "objective": objective,
                "profile": protocol.profile, "protocol": protocol.to_dict(), "training_tasks": [t.key for t in tasks],
                "samples": counts, "seed": args.seed, "params": tree_params, "num_boost_round": args.num_boost_round,
                "validation": validation, "args": asdict(args), "cpu": cpu_name(),
                "date": datetime.date.today().isoformat()}

    # ---- data: the training split only
    t0 = time.perf_counter()
    tasks = protocol.train_tasks()
    print(f"sampling {len(tasks)} training tasks of protocol {protocol.name} on mock profile {protocol.profile}")
    x, y, groups, uniform, counts = collect(protocol, tasks, args, rng)
    print(f"{len(y)} configs in {time.perf_counter() - t0:.0f} s")

    # ---- objective selection on two validation splits of the training tasks
    val_random = np.isin(groups, rng.choice(len(tasks), args.val_tasks, replace=False))
    val_operator = np.isin(groups, [g for g, t in enumerate(tasks) if t.op != "conv2d"])
    splits = {"random tasks": val_random, "non-conv operators (fitted on conv2d)": val_operator}
    validation: dict[str, dict[str, dict[str, float]]] = {}
    for objective in args.objectives.split(","):
        validation[objective] = {}
        for split, held in splits.items():
            booster = fit_booster(x[~held], y[~held], groups[~held], objective, tree_params, args.num_boost_round,
                                  args.seed)
            model = TransferCostModel(booster, meta_of(objective, tasks, counts, {}))
            validation[objective][split] = figures = evaluate(model, x, y, groups, uniform, held)
            print(f"{objective:18s} {split}: " + ", ".join(f"{k} {v:.4f}" for k, v in figures.items()))

    def loss(objective: str) -> tuple[float, float]:
        per_split = validation[objective].values()
        return (float(np.mean([f["top16_regret_mean"] for f in per_split])),
                -float(np.mean([f["spearman"] for f in per_split])))

    chosen = min(validation, key=loss)
    print(f"chosen objective: {chosen} (lowest mean top-16 regret over the validation splits)")

    # ---- the final fit on every training task, saved
    booster = fit_booster(x, y, groups, chosen, tree_params, args.num_boost_round, args.seed)
    model = TransferCostModel(booster, meta_of(chosen, tasks, counts, validation))
    path = model.save(args.out)
    print(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB) and its sidecar in {time.perf_counter() - t0:.0f} s")
