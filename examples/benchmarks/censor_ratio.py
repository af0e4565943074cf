"""Does a tighter censor bound cost a search its best kernel? One agent, real kernels, two protocols.

For each seed, runs the agent for ``--budget`` real measurements of GEMM 1024^3 (``gemm-cpu``, all
cores) once with the old censor defaults (ratio 10, floor 0.1 s) and once with today's (ratio 5, floor
0.05 s), each with a fresh backend, and prints the search's wall time and best latency. The figures in
``MeasureProtocol``'s docstring (XGBoost, 150 measurements, seeds 0 and 1, Zen 4, 2026-11-25) came from
this comparison, run before the stop margin was narrowed from 10% + 20 ms to 5% + 5 ms past the bound.

    python examples/benchmarks/censor_ratio.py [--agent xgb] [--budget 150] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import time

from schedule_gym import TilingEnv, gemm
from schedule_gym.agents import make_agent
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name

PROTOCOLS = {"ratio 10, floor 0.1 s": {"censor_ratio": 10.0, "censor_floor_s": 0.1},
             "ratio 5, floor 0.05 s": {"censor_ratio": 5.0, "censor_floor_s": 0.05}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    task = gemm(1024, 1024, 1024)
    print(f"{task.name}, agent {args.agent}, {args.budget} measurements, CPU {cpu_name()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'seed':>4}  {'protocol':24s} {'wall s':>8} {'best ms':>9}")
    for seed in args.seeds:
        for label, protocol in PROTOCOLS.items():
            backend = TVMBackend(protocol=protocol)
            env = TilingEnv(task, backend=backend)
            try:
                t0 = time.perf_counter()
                result = make_agent(args.agent, seed).run(env, args.budget)
                wall = time.perf_counter() - t0
            finally:
                env.close()
                backend.close()
            print(f"{seed:>4}  {label:24s} {wall:8.1f} {result.best_latency_s * 1e3:9.2f}")


if __name__ == "__main__":
    main()
