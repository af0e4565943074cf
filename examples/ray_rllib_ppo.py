"""Ray RLlib PPO on a schedule-gym environment, on a local Ray instance (a tiny budget by default).

RLlib builds its environments from a name in its own registry (``ray.tune.registry.register_env``); this
script registers the Gymnasium id under that name with a creator that imports ``schedule_gym`` (so each
Ray worker registers the package's ids) and calls ``gymnasium.make``. The policy is plain PPO: the
environment's ``action_masks()`` are not used (RLlib masks only through a custom RLModule), so an illegal
action costs the environment's illegal-action penalty and leaves the config where it was.

    python examples/ray_rllib_ppo.py --iterations 3
    python examples/ray_rllib_ppo.py --env-id schedule_gym/Conv2d-v0 --address auto   # on a cluster

RLlib (``ray[rllib]``) is not part of any schedule-gym extra: see docs/cluster.md for why and how to
install it next to the pinned Gymnasium.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass
class Args:
    env_id: str = "schedule_gym/Gemm-v0"
    iterations: int = 1
    train_batch_size: int = 200  # environment steps per iteration
    minibatch_size: int = 50
    num_epochs: int = 1
    seed: int = 0
    address: str = "local"  # local: a Ray instance here with num_cpus=2; else auto or ray://host:port


def make_env(config: dict[str, Any]) -> Any:
    """RLlib's env creator: a Gymnasium environment by id (``config["id"]``, other keys as ``make`` kwargs)."""
    import gymnasium as gym

    import schedule_gym  # noqa: F401  (registers the schedule_gym/ ids in this worker)

    kwargs = {k: v for k, v in config.items() if k != "id"}
    return gym.make(config["id"], **kwargs)


def train(args: Args) -> list[dict[str, Any]]:
    """``args.iterations`` PPO iterations; returns RLlib's result dict of each."""
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    started = False
    if not ray.is_initialized():
        if args.address == "local":
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=args.address)
        started = True
    name = f"rllib-{args.env_id}"
    register_env(name, make_env)
    config = (
        PPOConfig()
        .environment(name, env_config={"id": args.env_id})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)  # sample in the driver's local runner
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=args.train_batch_size, minibatch_size=args.minibatch_size,
                  num_epochs=args.num_epochs)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    try:
        return [algo.train() for _ in range(args.iterations)]
    finally:
        algo.stop()
        if started:
            ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for key, default in vars(Args()).items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(default), default=default)
    args = Args(**vars(parser.parse_args()))
    for i, result in enumerate(train(args), 1):
        runners = result.get("env_runners", {})
        print(f"iteration {i}: {runners.get('num_env_steps_sampled_lifetime', '?')} env steps, "
              f"episode return mean {runners.get('episode_return_mean', float('nan'))}")


if __name__ == "__main__":
    main()
