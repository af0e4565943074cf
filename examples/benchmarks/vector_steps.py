"""Environment steps per second of the native vector env next to SyncVectorEnv / AsyncVectorEnv of TilingEnv,
and SB3 PPO training throughput from each (issue 16's benchmark). Not a timed test: run it and read the table.

* vector env (``gymnasium.make_vec(id, num_envs=N)``) at N = 1, 64, 1024;
* ``SyncVectorEnv`` / ``AsyncVectorEnv`` of ``TilingEnv`` (``vectorization_mode="sync"``/``"async"``) at N = 1, 8, 64
  (1, 8 on the replay table: each ``TilingEnv`` reads the table itself);
* on the mock (GEMM 1024^3, ``Gemm-v0``), the shipped replay table (``GemmTable-v0``) and the multi-task
  environment (``MultiTask-v0``: 26 ResNet-50 / BERT-base tasks, a task per episode; also with the ``features``
  observations, ``best_improvement`` rewards and 64-measurement session episodes), random starts,
  uniformly random actions (legal or not) drawn before timing, 100-step episodes with autoreset;
* SB3 PPO (``MlpPolicy``, CPU) timesteps per second for a fixed number of timesteps, from ``SB3VecEnv``
  and from ``DummyVecEnv`` of the registered env, at the same N.

    taskset -c 1 nice -n 19 python examples/benchmarks/vector_steps.py [--seconds 2] [--ppo-steps 8192]
    python examples/benchmarks/vector_steps.py --envs multitask "multitask, features" --sizes 1024 4096 \
        --native-only --score-tables --seconds 10    # the multi-task rows on warm latency tables
"""

from __future__ import annotations

import argparse
import datetime
import time

import gymnasium as gym
import numpy as np

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.hardware import cpu_identity
from ppo_throughput import score_tables  # noqa: E402  (this folder, on sys.path when a script of it runs)

ENVS = {"mock": ("schedule_gym/Gemm-v0", {"start": "random"}), "replay": ("schedule_gym/GemmTable-v0", {"start": "random"}),
        # MultiTask-v0: a task of ResNet-50 / BERT-base drawn per episode (26 tasks), as a policy trains on them
        "multitask": ("schedule_gym/MultiTask-v0", {"start": "random"}),
        "multitask, features": ("schedule_gym/MultiTask-v0", {"start": "random", "observation": "features",
                                                              "reward": "best_improvement:0.01", "episode": "session",
                                                              "budget_measurements": 64})}


def steps_per_s(envs: gym.vector.VectorEnv, seconds: float, seed: int = 0, warmup: float = 1.0) -> tuple[float, int]:
    """Vector steps for about ``seconds`` after ``warmup`` seconds of them; returns (env steps/s, env steps).

    The mock scores its latency table lazily, a chunk of 4,096 configs at a time, so a fresh environment's
    first steps mostly score chunks: a long ``warmup`` times the steps once most chunks it meets are scored,
    as in a long training run."""
    rng = np.random.default_rng(seed)
    n = envs.num_envs
    actions = rng.integers(envs.single_action_space.n, size=(256, n))
    envs.reset(seed=seed)
    for phase in ("warm-up", "timed"):
        count, t0 = 0, time.perf_counter()
        limit = warmup if phase == "warm-up" else seconds
        while True:
            for a in actions[: max(1, min(256, 4096 // n))]:
                envs.step(a)
                count += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= limit:
                break
    return count * n / elapsed, count * n


def ppo_rate(venv, n_steps_total: int) -> float:
    from stable_baselines3 import PPO

    n = venv.num_envs
    n_steps = max(8, 2048 // n)
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=min(256, n_steps * n), n_epochs=1, seed=0,
                device="cpu")
    model.learn(n_steps * n)  # warm-up: one rollout and update
    t0 = time.perf_counter()
    model.learn(n_steps_total, reset_num_timesteps=False)
    return n_steps_total / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--ppo-steps", type=int, default=8192)
    parser.add_argument("--warmup-seconds", type=float, default=1.0, help="untimed steps before each row's timing")
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS), help="the rows' environments")
    parser.add_argument("--sizes", nargs="+", type=int, default=None,
                        help="the native vector env's N (default 1 64 1024, and 4096 for the multi-task rows)")
    parser.add_argument("--native-only", action="store_true", help="only the native vector env's rows (no Sync/Async, no PPO)")
    parser.add_argument("--score-tables", action="store_true",
                        help="score every latency table of a native vector env before its row (warm tables, as in a "
                             "long training run; the multi-task spaces take minutes, more than a warm-up reaches)")
    args = parser.parse_args()

    rows: list[tuple[str, str, int, float]] = []
    ppo_rows: list[tuple[str, str, int, float]] = []
    for backend in args.envs:
        env_id, kwargs = ENVS[backend]
        sizes = args.sizes or (1, 64, 1024) + ((4096,) if backend.startswith("multitask") else ())
        for n in sizes:
            envs = gym.make_vec(env_id, num_envs=n, **kwargs)
            if args.score_tables:
                print(f"{backend}, N = {n}: scored every table in {score_tables(envs):.0f} s", flush=True)
            rows.append((backend, "vector env", n, steps_per_s(envs, args.seconds, warmup=args.warmup_seconds)[0]))
            envs.close()
            print(*rows[-1], flush=True)
        if args.native_only:
            continue
        for mode in ("sync", "async"):
            # every replay TilingEnv reads the table itself (seconds each): N = 64 would mostly time that
            for n in (1, 8, 64) if backend != "replay" else (1, 8):
                envs = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)
                rows.append((backend, f"{mode.capitalize()}VectorEnv(TilingEnv)", n, steps_per_s(envs, args.seconds)[0]))
                envs.close()
            print(*rows[-1], flush=True)

    if not args.native_only:
        from stable_baselines3.common.vec_env import DummyVecEnv

        from schedule_gym.envs.sb3_vec import SB3VecEnv

        env_id, kwargs = ENVS["mock"]
        for n in (8, 64):
            ppo_rows.append(("mock", "SB3VecEnv", n, ppo_rate(SB3VecEnv.make(env_id, n, **kwargs), args.ppo_steps)))
            dummy = DummyVecEnv([lambda: gym.make(env_id, **kwargs) for _ in range(n)])
            ppo_rows.append(("mock", "DummyVecEnv(TilingEnv)", n, ppo_rate(dummy, args.ppo_steps)))

    print(f"{datetime.date.today()}  {cpu_identity().describe()}  (one process; timings as launched, e.g. taskset/nice)")
    print(f"env steps/s, random starts, uniformly random actions, 100-step episodes, {args.seconds:g} s per row "
          f"after {args.warmup_seconds:g} s of warm-up" + (", every latency table scored first" if args.score_tables else ""))
    print(f"| backend | environment | N | env steps/s |\n|---|---|---:|---:|")
    for backend, name, n, rate in rows:
        print(f"| {backend} | {name} | {n} | {rate:,.0f} |")
    if not ppo_rows:
        return
    print(f"\nSB3 PPO (MlpPolicy, CPU, n_epochs=1, {args.ppo_steps:,} timesteps after a warm-up rollout), GEMM 1024^3 mock")
    print(f"| backend | VecEnv | N | timesteps/s |\n|---|---|---:|---:|")
    for backend, name, n, rate in ppo_rows:
        print(f"| {backend} | {name} | {n} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
