"""Ray RLlib PPO with action masking on a schedule-gym environment, on a local Ray instance (a small budget).

One file, top to bottom (CleanRL style): arguments, environment, agent, training loop. RLlib builds its
environments from a name in its own registry: ``rllib_env_creator`` (``schedule_gym.baselines.rllib_masking``)
is registered under that name. With ``--vectorize vector_entry_point`` (default) RLlib asks the creator for
``num_envs`` environments at once and gets the Gymnasium id's registered vector environment (for the tiling
ids, the native ``TilingVectorEnv``, stepped as arrays); ``sync`` and ``async`` let RLlib vectorise single
environments itself. With masking (default) observations are ``{"action_mask", "observations"}`` dicts and
the policy is ``MaskedPPOTorchRLModule``, whose illegal actions have probability 0 (MaskablePPO's masking
on RLlib's new API stack); ``--no-mask`` trains plain PPO, for which an illegal action is a no-op costing the
environment's illegal-action penalty.

    python examples/ray_rllib_ppo.py --iterations 5
    python examples/ray_rllib_ppo.py --iterations 5 --no-mask
    python examples/ray_rllib_ppo.py --env-id schedule_gym/Conv2d-v0 --address auto --num-env-runners 4
    python examples/ray_rllib_ppo.py --protocol v1 --num-envs 64 --train-batch-size 4096 --minibatch-size 1024

``--protocol`` trains on a protocol's training split: ``MultiTask-v0`` (its native vector environment,
``MultiTaskVectorEnv``, under ``vector_entry_point``) in the protocol's layout and mock profile, so a cluster
of env runners samples every training task; ``--env-kwargs`` passes any id's arguments as JSON.

Each iteration prints the mean return of the episodes that ended in it, the fraction of the sampled actions
that were illegal (0 with masking) and the environment steps sampled per second of the iteration (sampling
and learning). Needs the ``rllib`` extra: ``pip install -c constraints.txt -e '.[rllib]'`` (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Args:
    env_id: str = "schedule_gym/Gemm-v0"
    """a Gymnasium id of schedule-gym (its registered kwargs: Gemm-v0 is 1024^3 on the mock backend)"""
    mask: bool = True
    """mask illegal actions (--no-mask: plain PPO)"""
    vectorize: str = "vector_entry_point"
    """RLlib's gym_env_vectorize_mode: vector_entry_point (the id's native vector env), sync or async"""
    num_envs: int = 4
    """environments per env runner"""
    num_env_runners: int = 0
    """0: sample in the driver; more: remote env runners (Ray actors)"""
    max_episode_steps: int = 100
    env_kwargs: str = "{}"
    """the environment's arguments as JSON (e.g. '{"m": 256, "k": 256, "n": 256}' or a MultiTask-v0's tasks)"""
    protocol: str = ""
    """a protocol name (v0, v1, tenset-v1...): MultiTask-v0 on its training split, in its layout and mock
    profile (replaces --env-id; --env-kwargs may add observation, reward or episode options)"""
    iterations: int = 3
    train_batch_size: int = 800
    """environment steps per iteration"""
    minibatch_size: int = 200
    num_epochs: int = 2
    seed: int = 0
    address: str = "local"
    """local: a Ray instance here with num_cpus=2; else auto or ray://host:port"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in fields(Args):
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    args = Args(**vars(parser.parse_args()))
    try:
        env_config(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def env_config(args: Args) -> dict[str, Any]:
    """RLlib's ``env_config`` for the creator: the id, masking, the time limit and the environment's arguments
    (``--env-kwargs``, and with ``--protocol`` MultiTask-v0's training split); bad JSON or an unknown protocol
    is a ``ValueError`` naming it."""
    from schedule_gym.envs.resolve import json_object

    kwargs = json_object(args.env_kwargs, "--env-kwargs")
    env_id = args.env_id
    if args.protocol:
        from schedule_gym.benchmark.ppo_tuner import MULTITASK_ID, protocol_env_kwargs

        env_id, kwargs = MULTITASK_ID, {**kwargs, **protocol_env_kwargs(args.protocol)}
    return {"id": env_id, "mask": args.mask, "max_episode_steps": args.max_episode_steps, **kwargs}


def build(args: Args) -> Any:
    """RLlib's PPO ``Algorithm`` for ``args`` (Ray must be initialised)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from schedule_gym.baselines.rllib_masking import MaskedPPOTorchRLModule, SamplingMetrics, rllib_env_creator

    # ---- environment: the creator under an RLlib name; RLlib vectorises as args.vectorize says
    config_of_env = env_config(args)
    name = f"rllib-{config_of_env['id']}"
    register_env(name, rllib_env_creator)

    # ---- agent: PPO, with the masking RLModule when the observations carry masks
    config = (
        PPOConfig()
        .environment(name, env_config=config_of_env)
        .env_runners(num_env_runners=args.num_env_runners, num_envs_per_env_runner=args.num_envs,
                     gym_env_vectorize_mode=args.vectorize)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=args.train_batch_size, minibatch_size=args.minibatch_size,
                  num_epochs=args.num_epochs)
        .callbacks(SamplingMetrics)
        .debugging(seed=args.seed)
    )
    if args.mask:
        config = config.rl_module(rl_module_spec=RLModuleSpec(module_class=MaskedPPOTorchRLModule))
    return config.build_algo()


def train(args: Args, on_result: Any = None) -> list[dict[str, Any]]:
    """``args.iterations`` PPO iterations on a Ray instance (started at ``args.address`` unless one is running);
    returns RLlib's result dict of each; ``on_result(i, result, seconds)`` is called after each."""
    import ray

    started = False
    if not ray.is_initialized():
        if args.address == "local":
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=args.address)
        started = True
    algo = build(args)

    # ---- training loop
    results = []
    try:
        for i in range(1, args.iterations + 1):
            started_s = time.perf_counter()
            result = algo.train()
            seconds = time.perf_counter() - started_s
            results.append(result)
            if on_result is not None:
                on_result(i, result, seconds)
        return results
    finally:
        algo.stop()
        if started:
            ray.shutdown()


def summary(result: dict[str, Any]) -> dict[str, float]:
    """One iteration's figures from :class:`SamplingMetrics`' sums: mean return of the episodes that ended,
    fraction of the sampled actions that were illegal, environment steps sampled."""
    runners = result["env_runners"]
    ended = runners.get("num_episodes_ended", 0)
    actions = runners.get("num_actions", 0)
    return {
        "episode_return_mean": runners["episode_return_sum"] / ended if ended else float("nan"),
        "illegal_fraction": runners["num_illegal_actions"] / actions if actions else float("nan"),
        "env_steps": float(runners.get("num_env_steps_sampled", 0)),
    }


if __name__ == "__main__":
    args = parse_args()
    agent = "rllib_masked_ppo" if args.mask else "rllib_ppo"
    run_name = f"{env_config(args)['id'].split('/')[-1]}__{agent}__{args.seed}"
    print(f"{run_name}: {args.num_envs} envs per runner, vectorize={args.vectorize}")

    def report(i: int, result: dict[str, Any], seconds: float) -> None:
        s = summary(result)
        print(f"iteration {i}: episode return mean {s['episode_return_mean']:.2f}, illegal actions "
              f"{s['illegal_fraction']:.3f}, {s['env_steps']:.0f} env steps in {seconds:.2f} s "
              f"({s['env_steps'] / seconds:.0f} env steps/s)", flush=True)

    train(args, on_result=report)
