"""Where a walking policy goes wrong on held-out tasks: how often its most probable move is one of the oracle
expert's best moves on the states it visits itself, and how far its sessions end from the best config within
reach, per group of tasks (depthwise convolutions, the rest).

The expert is DAgger's (:class:`~schedule_gym.benchmark.oracle.WalkExpert`, built here on the held-out tasks for the
diagnosis only: no policy is trained on it). ``--sessions`` copies of the protocol's session game, in the
observation the checkpoint reads, are played with moves drawn from the policy (as the benchmark plays it) for
``4 * budget`` moves each, four times over::

    python examples/benchmarks/expert_agreement.py leaderboard/v1-dagger16-moves.safetensors --protocol v1 --budget-track 16

prints per group: the tasks, the agreement of the policy's most probable move with the expert's best moves, the
median regret of the sessions' best configs against the best reachable config, the share of the policy's legal
moves that reach a config already measured (they cost no measurement, only a move), the share of sessions that
the move cap ends before their budget is spent, and where steepest descent from ``s0`` on the true latencies
stops (:func:`~schedule_gym.benchmark.oracle.steepest_descent`: a walker that only moves downhill) against the best
reachable config (mock figures of the protocol's profile: they do not depend on the CPU).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from schedule_gym.baselines.imitation import (OBSERVATION_OF, ended_regrets, expert_labels, imitation_env_kwargs,
                                              make_experts)
from schedule_gym.baselines.ppo_vec import load_checkpoint, make_envs
from schedule_gym.benchmark.oracle import steepest_descent
from schedule_gym.benchmark.ppo_tuner import MULTITASK_ID
from schedule_gym.benchmark.protocol import get_protocol


def depthwise(task) -> bool:
    return task.op == "conv2d" and int(task.param("groups", 1)) > 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--budget-track", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=0.25, help="the expert's (as DAgger's default)")
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    policy = load_checkpoint(args.checkpoint)
    architecture = policy.meta["architecture"].get("class", "Agent")
    if architecture not in OBSERVATION_OF:
        parser.error(f"{args.checkpoint} is a {architecture}; this script plays {sorted(OBSERVATION_OF)}")
    protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    budget, tasks = protocol.budget, protocol.held_out_tasks()
    for name, group in (("depthwise", [t for t in tasks if depthwise(t)]), ("other", [t for t in tasks if not depthwise(t)])):
        if not group:
            continue
        kwargs = {**imitation_env_kwargs(protocol, architecture), "tasks": [t.to_dict() for t in group]}
        envs = make_envs(MULTITASK_ID, args.sessions, kwargs)
        try:
            experts = make_experts(envs, budget, args.tolerance)
            stops = [(float(table(np.array([i]))[0]) / expert.best_s, int(expert.distance[i]))
                     for space, table, expert in zip(envs.core.spaces, envs.core.tables, experts)
                     for i, _ in [steepest_descent(space, table)]]
            obs, info = envs.reset(seed=args.seed)
            generator = torch.Generator().manual_seed(args.seed)
            valid = np.ones(args.sessions, dtype=bool)  # False on an autoreset step (its action is ignored)
            agree, regrets, revisits, spent = [], [], [], []
            for _ in range(4 * 4 * budget):
                labels = expert_labels(envs, experts)
                greedy = policy.act(obs, info["action_mask"], deterministic=True)
                keep = valid & labels.any(axis=1)
                agree.append(labels[keep, greedy[keep]])
                obs, _, terminated, truncated, info = envs.step(policy.act(obs, info["action_mask"], generator=generator))
                done = terminated | truncated
                moved = valid & info["legal"]  # a legal move of a running session (not an autoreset step)
                revisits.append(~info["new_measurement"][moved])
                regrets += ended_regrets(info, done, experts)
                spent += info["num_measurements"][done].tolist()
                valid = ~done
        finally:
            envs.close()
        print(f"{name}: {len(group)} tasks, agreement with the expert {np.concatenate(agree).mean():.3f}, median "
              f"regret against the best reachable config {np.median(regrets):.3f} over {len(regrets)} sessions; "
              f"{np.concatenate(revisits).mean():.1%} of the legal moves reach a config already measured, "
              f"{np.mean(np.array(spent) < budget):.1%} of the sessions end at the move cap ({4 * budget} moves) "
              f"with measurements left (median spent {np.median(spent):.0f} of {budget}); steepest descent from s0 "
              f"with every neighbour known stops at {np.median([r for r, _ in stops]):.2f}x the best reachable "
              f"config, {np.median([d for _, d in stops]):.0f} moves from the good set (medians over the tasks)",
              flush=True)


if __name__ == "__main__":
    main()
