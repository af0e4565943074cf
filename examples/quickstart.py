"""The README's demo: a short tuning run on the mock backend, then on real TVM kernels.

1. prints the paper's three space sizes as the package computes them;
2. trains sb3-contrib's MaskablePPO on GEMM 512^3 (mock backend) for a few thousand steps;
3. compares the best config the trained policy's rollouts measured with uniform random search at the
   same number of unique measurements, and with the exact optimum of the mock model (the whole space
   scored in about a second);
4. on the real TVM backend (this CPU): the same environment, GEMM 512^3, 24 random configs and a short
   greedy walk from the best of them, every kernel compiled, checked against NumPy and timed; records
   go to runs/demo-tvm.jsonl, so running the demo again measures nothing twice. Ends with NumPy's
   GFLOP/s on the same machine in the same run.

    python examples/quickstart.py [--timesteps 4096] [--seed 0] [--no-tvm]
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym import MockBackend, TileSpace, TilingEnv, gemm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-tvm", action="store_true", help="skip the real-kernel part")
    args = parser.parse_args()
    torch.set_num_threads(1)

    print("== Tile spaces (Zhang et al., splits 4/2/4)")
    for n in (512, 1024, 2048):
        print(f"   {n}^3: {TileSpace(gemm(n, n, n)).size:>10,} configs")

    print(f"\n== MaskablePPO on GEMM 512^3, mock backend, {args.timesteps} steps")
    env = gymnasium.make("schedule_gym/Gemm-v0", m=512, k=512, n=512, reward="log_speedup_prev", max_episode_steps=50)
    model = MaskablePPO("MlpPolicy", env, seed=args.seed, n_steps=256, batch_size=64, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    train_s = time.perf_counter() - t0
    base = env.unwrapped
    print(f"   trained in {train_s:.1f} s; {base.num_measurements} unique configs measured while training")

    # Tune with the trained policy: fresh session, sampled rollouts from s0, budget 200 configs.
    budget = 200
    tuner = TilingEnv(gemm(512, 512, 512), budget_measurements=budget)
    obs, info = tuner.reset(seed=args.seed)
    truncated = False
    while not truncated:
        for _ in range(50):
            action, _ = model.predict(obs, deterministic=False, action_masks=get_action_masks(tuner))
            obs, reward, terminated, truncated, info = tuner.step(int(action))
            if truncated:
                break
        if not truncated:
            obs, info = tuner.reset()
    ppo_best = info["best_gflops"]
    print(f"   policy rollouts, {budget} configs: best {ppo_best:.1f} GFLOP/s at {info['best_config']}")

    random_env = TilingEnv(gemm(512, 512, 512), budget_measurements=budget)
    random_env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    picks = random_env.space.sample_indices(rng, budget)
    random_env.evaluate([random_env.space.config(int(i)) for i in picks])
    random_best = random_env.best
    flops = random_env.task.flops
    print(f"   random search, {budget} configs: best {flops / random_best.latency_s * 1e-9:.1f} GFLOP/s at {random_best.config}")

    backend = MockBackend()
    task = gemm(512, 512, 512)
    scores = backend.score_space(task)
    best = int(np.argmin(scores))
    print(f"   exact optimum of the mock model: {task.flops / scores[best] * 1e-9:.1f} GFLOP/s at {backend.space(task).config(best)}")

    if not args.no_tvm:
        tune_real(args.seed)


def tune_real(seed: int, shape: int = 512, samples: int = 24, walk: int = 12) -> None:
    print(f"\n== Real TVM backend: GEMM {shape}^3 on this CPU")
    t0 = time.perf_counter()
    env = TilingEnv(
        gemm(shape, shape, shape), backend="tvm", backend_options={"records": "runs/demo-tvm.jsonl"}, reward="log_speedup_prev"
    )
    obs, info = env.reset(seed=seed)
    print(f"   s0 {info['config']}: {info['gflops']:.2f} GFLOP/s")
    rng = np.random.default_rng(seed)
    picks = env.space.sample_indices(rng, samples)
    results = env.evaluate([env.space.config(int(i)) for i in picks])
    failed = sum(1 for r in results if r is not None and not r.ok)
    print(f"   {samples} random configs: best {info_best(env):.1f} GFLOP/s ({failed} failed builds/runs)")
    # greedy walk: from the best config so far, move to the best of its neighbours while that improves
    obs, info = env.reset(options={"config": env.best.config})
    for _ in range(walk):
        neighbours = env.space.neighbours(info["config"])
        measured = env.evaluate([c for _, c in neighbours])
        ok = [(r.latency_s, a) for (a, _), r in zip(neighbours, measured) if r is not None and r.ok]
        if not ok or min(ok)[0] >= info["latency_s"]:
            break
        obs, reward, terminated, truncated, info = env.step(min(ok)[1])
    best = env.best
    print(f"   after a greedy walk: best {info_best(env):.1f} GFLOP/s at {best.config}")
    print(f"   {env.num_measurements} configs evaluated in {time.perf_counter() - t0:.1f} s "
          f"({env.measure_wall_s:.1f} s in the backend); records in runs/demo-tvm.jsonl")
    env.close()
    a = np.random.default_rng(0).standard_normal((shape, shape), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((shape, shape), dtype=np.float32)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    print(f"   NumPy (OpenBLAS, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'auto')}) in the same run: "
          f"{2 * shape**3 / min(times) * 1e-9:.1f} GFLOP/s")


def info_best(env: TilingEnv) -> float:
    return env.task.flops / env.best.latency_s * 1e-9


if __name__ == "__main__":
    main()
