"""The README's demo: a short tuning run on the mock backend, then on real TVM kernels.

1. prints the paper's three space sizes as the package computes them;
2. trains sb3-contrib's MaskablePPO on GEMM 512^3 (mock backend) for a few thousand steps;
3. compares the best config the trained policy's rollouts measured with uniform random search at the
   same number of unique measurements, and with the exact optimum of the mock model (the whole space
   scored in about a second);
4. the G-BFS agent and random search on the mock backend at the same budget;
5. on the real TVM backend (this CPU): G-BFS on GEMM 512^3 for 100 configs, every kernel compiled,
   checked against NumPy and timed; records go to runs/demo-tvm.jsonl, so running the demo again
   measures nothing twice. Ends with NumPy's GFLOP/s (OpenBLAS Haswell and AVX-512 kernels) on the
   same machine in the same run.

    python examples/quickstart.py [--timesteps 4096] [--seed 0] [--no-tvm]
"""

from __future__ import annotations

import argparse
import time

import gymnasium
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym import MockBackend, TileSpace, TilingEnv, gemm
from schedule_gym.agents import make_agent
from schedule_gym.reference import library_references


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
    print(f"   trained in {train_s:.1f} s; {base.session.num_measurements} unique configs measured while training")

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
    random_env.session.measure([int(i) for i in picks])
    random_best = random_env.session.best
    flops = random_env.task.flops
    print(f"   random search, {budget} configs: best {flops / random_best.latency_s * 1e-9:.1f} GFLOP/s at {random_best.config}")

    backend = MockBackend()
    task = gemm(512, 512, 512)
    scores = backend.score_space(task)
    best = int(np.argmin(scores))
    print(f"   exact optimum of the mock model: {task.flops / scores[best] * 1e-9:.1f} GFLOP/s at {backend.space(task).config(best)}")

    gbfs = make_agent("gbfs", seed=args.seed).run(TilingEnv(task), budget)
    print(f"   G-BFS agent, {budget} configs: best {gbfs.best_gflops:.1f} GFLOP/s at {gbfs.best_config}")

    if not args.no_tvm:
        tune_real(args.seed)


def tune_real(seed: int, shape: int = 512, budget: int = 100) -> None:
    print(f"\n== Real TVM backend: G-BFS (Zhang et al., Algorithm 1) on GEMM {shape}^3 on this CPU, {budget} configs")
    env = TilingEnv(gemm(shape, shape, shape), backend="tvm", backend_options={"records": "runs/demo-tvm.jsonl"})
    result = make_agent("gbfs", seed=seed).run(env, budget)
    env.close()
    failed = sum(1 for r in result.history if r.latency_s is None)
    print(f"   s0 {env.space.initial_config()}: {result.flops / result.s0_latency_s * 1e-9:.2f} GFLOP/s")
    print(f"   best {result.best_gflops:.1f} GFLOP/s at {result.best_config} "
          f"({result.speedup_over_s0:.0f}x over s0; {failed} failed builds/runs)")
    print(f"   {result.num_measurements} configs in {result.wall_s:.1f} s, every kernel checked against NumPy; "
          "records in runs/demo-tvm.jsonl (a second run measures nothing twice)")
    for times in library_references(env.task):  # the OpenBLAS kernels selected here, and the AVX-512 ones
        print(f"   {times.label}: {times.stats.best_gflops:.1f} GFLOP/s (same run)")


if __name__ == "__main__":
    main()
