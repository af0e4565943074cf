"""Environment steps per second on the mock backend, random legal actions (issue 2's speed target).

Runs each variant side by side in one process, several times, and prints min / median steps per second:

* ``raw``: ``TilingEnv`` itself;
* ``make``: ``gymnasium.make("schedule_gym/Gemm-v0", ...)`` with its wrappers (TimeLimit, order enforcing);
* ``s0`` / ``random`` start: episodes of 100 steps from the paper's s0 (many revisits, served from the
  cache) or from uniformly random configs (most steps measure a new config).

Also times scoring the whole 1024^3 space with the vectorised model.

    python examples/benchmarks/env_steps.py [--steps 200000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium
import numpy as np

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym import MockBackend, TilingEnv, gemm


def run(env: gymnasium.Env, steps: int, seed: int) -> tuple[float, int]:
    """Steps per second of ``steps`` random legal actions; returns (rate, new measurements)."""
    rng = np.random.default_rng(seed)
    base = env.unwrapped
    obs, info = env.reset(seed=seed)
    mask = info["action_mask"]
    t0 = time.perf_counter()
    for _ in range(steps):
        legal = np.flatnonzero(mask)
        action = int(legal[rng.integers(len(legal))])
        obs, reward, terminated, truncated, info = env.step(action)
        mask = info["action_mask"]
        if terminated or truncated:
            obs, info = env.reset()
            mask = info["action_mask"]
    elapsed = time.perf_counter() - t0
    return steps / elapsed, base.session.num_measurements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    variants = {
        "raw, start s0": lambda: gymnasium.wrappers.TimeLimit(TilingEnv(gemm(1024, 1024, 1024)), 100),
        "raw, start random": lambda: gymnasium.wrappers.TimeLimit(
            TilingEnv(gemm(1024, 1024, 1024), start="random"), 100
        ),
        "make, start s0": lambda: gymnasium.make("schedule_gym/Gemm-v0", m=1024, k=1024, n=1024),
        "make, start random": lambda: gymnasium.make(
            "schedule_gym/Gemm-v0", m=1024, k=1024, n=1024, start="random"
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    measured: dict[str, int] = {}
    for rep in range(args.repeats):  # interleave variants so machine noise hits them alike
        for name, factory in variants.items():
            env = factory()
            rate, n_measured = run(env, args.steps, seed=rep)
            rates[name].append(rate)
            measured[name] = n_measured
            env.close()

    print(f"GEMM 1024^3, mock backend, {args.steps:,} random legal steps x {args.repeats} runs, one process")
    print(f"{'variant':<22}{'min steps/s':>14}{'median steps/s':>16}{'new configs/run':>17}")
    for name, values in rates.items():
        print(f"{name:<22}{min(values):>14,.0f}{statistics.median(values):>16,.0f}{measured[name]:>17,}")

    backend = MockBackend()
    task = gemm(1024, 1024, 1024)
    backend.space(task)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        latency = backend.score_space(task)
        times.append(time.perf_counter() - t0)
    best = int(np.argmin(latency))
    print(
        f"scoring all {latency.size:,} configs: min {min(times):.2f} s, median {statistics.median(times):.2f} s; "
        f"optimum {backend.space(task).config(best)} at {task.flops / latency[best] * 1e-9:.1f} GFLOP/s"
    )


if __name__ == "__main__":
    main()
