"""Pretrain Felix's cost models on a protocol's training tasks (mock latencies) and save them, weights only.

One file, top to bottom (CleanRL style): arguments, pretraining, a check on fresh samples, saving. One model
per operator (a feature spec spans one operator family), fitted by
:func:`schedule_gym.benchmark.pretrained.pretrain_felix` on latencies of the protocol's mock profile for
configs drawn uniformly from every training task of that operator; it refuses held-out tasks.

    taskset -c 1 nice -n 19 .venv/bin/python examples/pretrain_felix.py --protocol v0
    taskset -c 1 nice -n 19 .venv/bin/schedule-gym benchmark --protocol v0 --agent felix \\
        --agent-param 'cost_model=["leaderboard/v0-felix-cost-model-conv2d.pt","leaderboard/v0-felix-cost-model-dense.pt"]' \\
        --name felix-pretrained --seeds 0 1 --leaderboard leaderboard/v0.jsonl

``leaderboard/v0-felix-cost-model-{conv2d,dense}.pt`` are this script's files with its defaults. They are
written by :func:`~schedule_gym.agents.felix.save_cost_model` (a ``state_dict`` and a JSON config) and read
with ``torch.load(weights_only=True)`` by :func:`~schedule_gym.agents.felix.load_cost_model`: loading one
runs no code from the file.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from schedule_gym.agents.felix import save_cost_model
from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.pretrained import felix_training_tasks, pretrain_felix, write_sidecar
from schedule_gym.spaces import TileSpace


@dataclass
class Args:
    protocol: str = "v0"
    """the protocol whose training split is fitted"""
    ops: str = "conv2d,dense"
    """operators to fit (comma-separated): v0's held-out split has convolutions and dense layers only"""
    n_samples: int = 8192
    """configs drawn per training task"""
    epochs: int = 30
    hidden_size: int = 128
    """128 keeps each file near 250 kB (the agent's from-scratch default is 256)"""
    n_hidden_layers: int = 3
    seed: int = 0
    check_samples: int = 2048
    """fresh configs per training task (another seed) for the fit check"""
    out: str = "leaderboard"
    """files are <out>/<protocol>-felix-cost-model-<op>.pt"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


if __name__ == "__main__":
    args = parse_args()
    torch.set_num_threads(1)  # a small MLP on shared cores: one thread is fastest
    protocol = get_protocol(args.protocol)
    ops = [op for op in args.ops.split(",") if op]
    training = felix_training_tasks(protocol, ops)

    # ---- pretraining: the training split only (pretrain_felix refuses held-out tasks)
    t0 = time.perf_counter()
    models = pretrain_felix(protocol, ops=ops, n_samples=args.n_samples, epochs=args.epochs,
                            hidden_size=args.hidden_size, n_hidden_layers=args.n_hidden_layers, seed=args.seed)
    print(f"pretrained {', '.join(models)} on protocol {protocol.name}'s training split in "
          f"{time.perf_counter() - t0:.0f} s")

    # ---- check: rank correlation with the mock on fresh configs of each training task
    backend = MockBackend(profile=protocol.profile)
    rng = np.random.default_rng(args.seed + 1)
    for op, model in models.items():
        corr = []
        for task in (t for t in protocol.train_tasks() if t.op == op):
            space = TileSpace(task)
            idx = space.sample_indices(rng, min(args.check_samples, space.size))
            featurizer = model.featurizer(task)
            with torch.no_grad():
                predicted = model(featurizer(featurizer.log_factors_of_indices(space, idx))).numpy()
            corr.append(rank_correlation(predicted, backend.model_latency_s(task, idx)))
        print(f"{op}: {len(corr)} training tasks, rank correlation with the mock on fresh configs: "
              f"median {np.median(corr):.3f}, min {np.min(corr):.3f}")

    # ---- saving
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for op, model in models.items():
        path = out / f"{protocol.name}-felix-cost-model-{op}.pt"
        save_cost_model(model, path)
        # the sidecar <stem>.meta.json: the keys fitted, which the benchmark checks against held-out ones
        write_sidecar(path, protocol, training[op], artefact="felix cost model", operator=op,
                      command=shlex.join(["python", *sys.argv]), n_samples=args.n_samples, epochs=args.epochs,
                      hidden_size=args.hidden_size, n_hidden_layers=args.n_hidden_layers, seed=args.seed)
        print(f"saved {path} ({path.stat().st_size / 1e3:.0f} kB) and its sidecar")
