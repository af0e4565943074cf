"""RLlib sampling throughput: the native vector environment against RLlib's own vectorisation.

Builds ``examples/ray_rllib_ppo.py``'s PPO (masked by default) once per (vectorisation, number of
environments) and times its local env runner's ``sample`` of ``--steps`` environment steps, ``--repeats``
times after one warm-up sample, side by side in one run; prints min and median steps per second. Sampling
only: no learning step, so the figures are what the environment side of RLlib feeds a learner.

    python examples/benchmarks/rllib_sampling.py [--envs 4 32] [--steps 2048] [--repeats 3] [--no-mask]

Needs the ``rllib`` extra (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: ray_rllib_ppo's build()
from ray_rllib_ppo import Args, build  # noqa: E402

from schedule_gym.hardware import cpu_name  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="schedule_gym/Gemm-v0")
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--modes", nargs="+", default=["vector_entry_point", "sync"])
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mask", action=argparse.BooleanOptionalAction, default=True)
    a = parser.parse_args()
    if importlib.util.find_spec("pandas") is None:
        parser.error("needs the rllib extra: pip install -c constraints.txt -e '.[rllib]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"{a.env_id}, RLlib PPO env runner sample() of {a.steps} steps x {a.repeats} (after a warm-up), "
          f"mask={a.mask}, CPU {cpu_name()}")
    print(f"{'vectorize':<20} {'envs':>5} {'min steps/s':>12} {'median steps/s':>15}")
    try:
        for n in a.envs:
            for mode in a.modes:
                algo = build(Args(env_id=a.env_id, mask=a.mask, vectorize=mode, num_envs=n))
                try:
                    runner = algo.env_runner
                    runner.sample(num_timesteps=a.steps, random_actions=False)
                    rates = []
                    for _ in range(a.repeats):
                        t0 = time.perf_counter()
                        episodes = runner.sample(num_timesteps=a.steps, random_actions=False)
                        elapsed = time.perf_counter() - t0
                        rates.append(sum(len(e) for e in episodes) / elapsed)
                finally:
                    algo.stop()
                print(f"{mode:<20} {n:>5} {min(rates):>12,.0f} {statistics.median(rates):>15,.0f}", flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
