"""Every agent on the mock backend at a fixed budget, over seeds, against the space's exact optimum.

The mock model scores a whole space in about a second, so the optimum is exact. Prints, per agent, the
best GFLOP/s found (median, min, max over seeds), the median ratio of the best latency to the optimum,
how many seeds reached the optimum, and the median number of measurements to come within 1% of it.

    python examples/benchmarks/agents_mock.py [--shape 1024 1024 1024] [--budget 0.1%] [--seeds 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from schedule_gym.agents import AGENTS, make_agent
from schedule_gym.backends import MockBackend
from schedule_gym.envs import TilingEnv
from schedule_gym.tasks import gemm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs=3, type=int, default=[1024, 1024, 1024], metavar=("M", "K", "N"))
    parser.add_argument("--budget", default="0.1%")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--agents", nargs="+", default=list(AGENTS))
    args = parser.parse_args()

    task = gemm(*args.shape)
    env = TilingEnv(task=task)
    space = env.space
    t0 = time.perf_counter()
    latencies = MockBackend().score_space(task)
    optimum = float(latencies.min())
    print(f"{task.describe()}: {space.size:,} configs scored in {time.perf_counter() - t0:.1f} s; "
          f"optimum {task.flops / optimum * 1e-9:.1f} GFLOP/s; budget {args.budget}, seeds 0-{args.seeds - 1}")
    print(f"{'agent':<8} {'median':>8} {'min':>8} {'max':>8}  {'best/opt':>8}  {'optimum':>8}  {'to 1%':>6}  {'s/run':>6}")
    for name in args.agents:
        best, hits, to_1pct, walls = [], 0, [], []
        for seed in range(args.seeds):
            result = make_agent(name, seed=seed).run(env, args.budget)
            best.append(result.best_latency_s)
            hits += result.best_latency_s <= optimum * (1 + 1e-9)
            within = [r.n for r in result.history if r.best_latency_s is not None and r.best_latency_s <= optimum * 1.01]
            to_1pct.append(within[0] if within else np.nan)
            walls.append(result.wall_s)
        gflops = task.flops / np.array(best) * 1e-9
        print(f"{name:<8} {np.median(gflops):8.1f} {gflops.min():8.1f} {gflops.max():8.1f}  "
              f"{np.median(best) / optimum:8.3f}  {hits:>4}/{args.seeds:<3}  {np.nanmedian(to_1pct) if not np.all(np.isnan(to_1pct)) else float('nan'):6.0f}  "
              f"{np.median(walls):6.2f}")


if __name__ == "__main__":
    main()
