"""The transfer agent with and without its serial probe, on tasks in neither split of protocol v1.

The serial probe (``TransferAgent(serial_probe=True)``, the default) was designed from the agent's failures on
v1's held-out split; this checks it where it was not designed: layers of the tenset-v1 training networks
(VGG-16, Inception-v3, DenseNet-121, EfficientNet-B0, ViT-B/16, GPT-2) whose computation is neither a v1
training task (which the shipped cost model was pretrained on) nor a v1 held-out task, one task per distinct
computation, ``--tasks`` of them drawn with a fixed seed. Each runs with both settings at ``--budget``
measurements for ``--seeds``, on v1's mock profile against v1's reference (exact, or the documented search);
prints per task the regret of every run, then the median and IQM of the per-task mean regret and the runs
that each setting left more than 10% behind the other.

    nice .venv/bin/python examples/benchmarks/serial_probe_ablation.py --budget 64 --tasks 24 --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import trim_mean

from schedule_gym.agents import make_agent
from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark import get_protocol, reference_latency
from schedule_gym.benchmark.protocol import computation_key
from schedule_gym.envs import TilingEnv
from schedule_gym.hardware import cpu_name

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    v1, tenset = get_protocol("v1"), get_protocol("tenset-v1")
    backend = MockBackend(profile=v1.profile)
    seen = {computation_key(t) for t in v1.train_tasks() + v1.held_out_tasks()}
    candidates: dict[str, object] = {}
    for task in tenset.train_tasks():
        if task.op in ("conv2d", "dense", "batch_matmul") and computation_key(task) not in seen:
            candidates.setdefault(computation_key(task), task)
    pool = list(candidates.values())
    picked = [pool[i] for i in sorted(np.random.default_rng(0).choice(len(pool), min(args.tasks, len(pool)), replace=False))]
    print(f"{len(pool)} candidate tasks, {len(picked)} drawn; budget {args.budget}, seeds {args.seeds}; CPU {cpu_name()}, "
          f"mock {v1.profile}", flush=True)
    regrets = {False: [], True: []}
    for task in picked:
        reference, kind = reference_latency(task, backend, v1.exact_limit)
        line = []
        for probe in (False, True):
            runs = [make_agent("transfer", seed, serial_probe=probe).run(TilingEnv(task, backend=backend), args.budget)
                    .best_latency_s / reference - 1 for seed in args.seeds]
            regrets[probe].append(runs)
            line.append(f"probe={probe}: {np.round(runs, 3).tolist()}")
        print(task.name, kind, *line, flush=True)
    off, on = (np.array(regrets[p]) for p in (False, True))
    for probe, r in ((False, off), (True, on)):
        mean = r.mean(axis=1)
        print(f"serial_probe={probe}: median {np.median(mean):.3f}, IQM {trim_mean(mean, 0.25):.3f} of per-task mean regret")
    print(f"runs where the probe is >10% ahead: {int(((1 + off) > 1.1 * (1 + on)).sum())}, "
          f">10% behind: {int(((1 + on) > 1.1 * (1 + off)).sum())}, of {off.size}")
