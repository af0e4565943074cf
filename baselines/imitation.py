"""DAgger on the oracle walker: a policy that learns, on the training tasks, to walk from ``s0`` to the good configs
within a session's reach, and plays held-out tasks zero-shot (Ross, Gordon and Bagnell, AISTATS 2011, Algorithm 3.1).

Why: PPO trained on the session game (:func:`~schedule_gym.benchmark.ppo_tuner.session_env_kwargs`) stays level
with random search on the held-out split, although the oracle walker (:mod:`schedule_gym.benchmark.oracle`) shows
that a config near the reference lies within reach of ``s0`` on almost every task. Its reward says only *that* a
walk paid off, after the fact; on the mock's training tasks the exact answer is known: the **expert** of a task
(:class:`~schedule_gym.benchmark.oracle.WalkExpert`) marks the reachable configs within ``1 + tolerance`` of the
best reachable one, and in any config the moves that bring the walker closest to them (the legal moves whose
destination is nearest the good set). DAgger turns that into a policy on the same feature observations:

1. Iteration ``i`` rolls the vector environment out for ``rollout_steps`` steps, each sub-environment taking the
   expert's move (one of its best, drawn uniformly) with probability ``beta_decay ** i`` and the policy's draw
   otherwise (iteration 0 is the expert alone: behaviour cloning);
2. every visited state is labelled with the expert's best moves, whoever acted, and added to the data set
   (the oldest dropped past ``max_samples``): the policy also learns the way back from where *it* strays;
3. the actor is trained ``epochs`` passes over the data set on the likelihood of the expert's set of moves,
   ``-log sum_{a in best} pi(a | s)`` (any of the tied moves is right).

The network is CleanRL's ``Agent`` on the ``"features"`` observation, or (``--architecture MoveScorer``)
:class:`~schedule_gym.baselines.networks.MoveScorer` on ``"move_features"``: one scorer of every move by the config
it leads to, which reads a move on an operator it never trained on (a depthwise convolution) in the same terms.

The checkpoint is :mod:`~schedule_gym.baselines.ppo_vec`'s format (the critic kept at its initialisation:
imitation trains no value), so ``schedule-gym benchmark --policy`` and
:func:`~schedule_gym.benchmark.ppo_tuner.ppo_tuner` run it as they run a PPO policy::

    python -m schedule_gym.baselines.imitation --protocol v1 --budget-track 16 --iterations 8

writes ``<out>/<run>/model.safetensors`` with its sidecar (the last iteration's; ``model-<i>.safetensors`` keeps each
iteration's, for choosing on the validation split) and ``progress.csv`` (per iteration: the expert's share
of actions, the data set's size, the policy's agreement with the expert on the states it visited before the
update, the training loss, and the training episodes' mean regret against the best reachable config).
Only the training split's tasks are searched; the held-out and validation tasks are never seen.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from schedule_gym.baselines.networks import MASKED_LOGIT, network, sample_categorical
from schedule_gym.baselines.ppo_vec import arg, make_envs, save_checkpoint
from schedule_gym.benchmark.oracle import WalkExpert, all_latencies
from schedule_gym.benchmark.ppo_tuner import MULTITASK_ID, session_env_kwargs
from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.benchmark.synthetic import synthetic_layers
from schedule_gym.envs.vector_env import MultiTaskVectorEnv

__all__ = ["CSV_COLUMNS", "ImitationArgs", "ended_regrets", "expert_labels", "imitation_env_kwargs", "imitation_loss",
           "make_experts", "train"]

#: the largest tile space of a synthetic training layer: the experts score whole tables, so each layer costs its
#: space's size; 2**23 is about v1's largest held-out depthwise space and half its largest training space
SYNTHETIC_MAX_SPACE = 2**23

#: the observation each network reads
OBSERVATION_OF = {"Agent": "features", "MoveScorer": "move_features"}
CSV_COLUMNS = ["iteration", "wall_time_s", "expert_share", "samples", "agreement", "loss", "episodes",
               "train_regret"]


@dataclass
class ImitationArgs:
    """The run's settings, one flag each (``--budget-track 16`` ...)."""

    protocol: str = arg("v1", "the protocol whose training split is imitated on")
    budget_track: int = arg(16, "measurements per session (a budget track): the reach is budget - 1 moves")
    tolerance: float = arg(0.25, "good configs are at most 1 + tolerance times the best reachable one (0.25 "
                                 "beat 0.05 on v1's validation split: a wider target is a more general one)")
    iterations: int = arg(8, "DAgger iterations (a checkpoint each)")
    num_envs: int = arg(1024, "sub-environments of the vector environment")
    rollout_steps: int = arg(64, "steps per sub-environment per iteration")
    beta_decay: float = arg(0.5, "the expert acts with probability beta_decay ** iteration (iteration 0: always)")
    epochs: int = arg(4, "passes over the data set per iteration")
    minibatch_size: int = arg(4096, "states per optimiser step")
    learning_rate: float = arg(1e-3, "AdamW's learning rate")
    weight_decay: float = arg(0.0, "AdamW's weight decay")
    synthetic: int = arg(0, "synthetic layers of random shapes added to the training split, none held out "
                            "(schedule_gym.benchmark.synthetic; drawn with seed 0, the same for every training seed)")
    synthetic_depthwise: float = arg(0.0, "the share of depthwise convolutions among the synthetic layers")
    architecture: str = arg("Agent", "the policy network: Agent (MLPs over the 'features' observation) or MoveScorer "
                                     "(one scorer of every move's destination, on the 'move_features' observation)")
    hidden_size: int = arg(256, "units per hidden layer of the actor (and the untrained critic)")
    n_hidden_layers: int = arg(2, "hidden layers")
    max_samples: int = arg(2_000_000, "the data set's size past which the oldest iteration's states are dropped")
    seed: int = arg(1, "seeds torch, the expert's and the mixing draws, and the environments")
    torch_threads: int = arg(2, "torch.set_num_threads")
    out: str = arg("runs/imitation", "the run folder is <out>/imitation_<game>__<seed>__<unix time>")

    def check(self) -> None:
        if isinstance(self.synthetic, bool) or not isinstance(self.synthetic, int) or self.synthetic < 0:
            raise ValueError(f"synthetic must be a non-negative integer, got {self.synthetic!r}")
        if not 0.0 <= self.synthetic_depthwise <= 1.0:
            raise ValueError(f"synthetic_depthwise must be a share in [0, 1], got {self.synthetic_depthwise!r}")
        for name in ("budget_track", "iterations", "num_envs", "rollout_steps", "epochs", "minibatch_size",
                     "hidden_size", "n_hidden_layers", "max_samples", "torch_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 <= self.beta_decay <= 1.0:
            raise ValueError(f"beta_decay must be in [0, 1], got {self.beta_decay!r}")
        if not self.tolerance >= 0.0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance!r}")
        if not self.weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not self.learning_rate > 0.0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.architecture not in OBSERVATION_OF:
            raise ValueError(f"architecture must be one of {sorted(OBSERVATION_OF)}, got {self.architecture!r}")


def imitation_env_kwargs(protocol: str | Protocol, architecture: str, track: int | None = None, synthetic: int = 0,
                         depthwise: float = 0.0) -> dict[str, Any]:
    """The session game's arguments (:func:`~schedule_gym.benchmark.ppo_tuner.session_env_kwargs`) in the observation
    ``architecture`` reads: ``"features"``, or ``"move_features"`` for a ``MoveScorer``; with ``synthetic`` layers
    (a share ``depthwise`` of them depthwise, :func:`~schedule_gym.benchmark.synthetic.synthetic_layers`) added to
    the training split's tasks, each with at most :data:`SYNTHETIC_MAX_SPACE` configs."""
    kwargs = {**session_env_kwargs(protocol, track), "observation": OBSERVATION_OF[architecture]}
    if synthetic:
        protocol = get_protocol(protocol)
        kwargs["tasks"] = ([t.name for t in protocol.train_tasks()]
                           + synthetic_layers(protocol, synthetic, seed=0, depthwise=depthwise,
                                            max_space=SYNTHETIC_MAX_SPACE))
    return kwargs


def make_experts(envs: MultiTaskVectorEnv, budget: int, tolerance: float) -> list[WalkExpert]:
    """The expert of each of ``envs``' tasks, on the environment's own latency tables (scored whole here, so the
    rollouts then read them without scoring)."""
    core = envs.core
    return [WalkExpert(space, all_latencies(table, space.size), budget, tolerance)
            for space, table in zip(core.spaces, core.tables)]


def expert_labels(envs: MultiTaskVectorEnv, experts: list[WalkExpert]) -> np.ndarray:
    """``(N, n_actions)`` bool: in each sub-environment's config, the legal moves whose destination is nearest
    (fewest moves) to its task's good set; all False only where no move is legal."""
    core = envs.core
    nxt = core.neighbour_indices()
    legal = nxt >= 0
    far = np.iinfo(np.int32).max
    distance = np.full(nxt.shape, far, dtype=np.int32)
    for t in np.unique(core.task).tolist():
        rows = np.flatnonzero(core.task == t)
        sub, ok = nxt[rows], legal[rows]
        d = np.full(sub.shape, far, dtype=np.int32)
        d[ok] = experts[t].distance[sub[ok]]
        distance[rows] = d
    return legal & (distance == distance.min(axis=1, keepdims=True))


def ended_regrets(info: dict[str, Any], done: np.ndarray, experts: list[WalkExpert]) -> list[float]:
    """The regrets, against their tasks' best reachable config, of the sessions that ``done`` marks as ended on a
    vector step whose ``info`` is given (their best latencies are the final ones)."""
    best_s = np.array([experts[t].best_s for t in info["task"][done].tolist()])
    return (info["best_latency_s"][done] / best_s - 1.0).tolist()


def imitation_loss(agent: nn.Module, obs: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``-log sum_{a in labels} pi(a | obs)`` averaged over the rows: the likelihood of the expert's set of moves
    under the masked policy (rows without a label are not given)."""
    logp = agent.masked_logits(obs, mask).log_softmax(dim=1)
    return -logp.masked_fill(~labels, MASKED_LOGIT).logsumexp(dim=1).mean()


def _train_epochs(agent: nn.Module, optimizer: torch.optim.Optimizer, data: tuple[torch.Tensor, ...], epochs: int,
                  minibatch_size: int) -> float:
    obs, mask, labels = data
    n, losses = obs.shape[0], []
    for _ in range(epochs):
        order = torch.randperm(n)
        for start in range(0, n, minibatch_size):
            mb = order[start: start + minibatch_size]
            loss = imitation_loss(agent, obs[mb], mask[mb], labels[mb])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses[-max(1, len(losses) // epochs):]))  # the last epoch's mean


def train(args: ImitationArgs, envs: MultiTaskVectorEnv | None = None, env_kwargs: dict[str, Any] | None = None,
          experts: list[WalkExpert] | None = None) -> Path:
    """Run DAgger as ``args`` say (see the module docstring); returns the checkpoint's path.

    ``envs``: the session game to imitate on (default: made here from the protocol's training split at the budget
    track, :func:`~schedule_gym.benchmark.ppo_tuner.session_env_kwargs`, and closed); one given (made once for
    several seeds, or the tests' small tasks) comes with the ``env_kwargs`` it was made with (the checkpoint records
    them: a tuner plays the policy with them), must play sessions with a measurement budget, which the experts are
    built for, and is left open. ``experts``: those of a given ``envs``' tasks (:func:`make_experts`; default:
    made here)."""
    args.check()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(args.seed)
    if envs is None:
        protocol = get_protocol(args.protocol).at_budget(args.budget_track)
        env_kwargs = imitation_env_kwargs(protocol, args.architecture, synthetic=args.synthetic,
                                          depthwise=args.synthetic_depthwise)
        envs = own = make_envs(MULTITASK_ID, args.num_envs, env_kwargs)
        name = f"{protocol.name}_b{protocol.budget}"
    else:
        own, name = None, "given"
        if env_kwargs is None:
            raise ValueError("a given envs needs the env_kwargs it was made with (the checkpoint records them)")
        if (envs.num_envs != args.num_envs or envs.options.episode != "session"
                or envs.options.budget_measurements is None):
            raise ValueError(f"envs must have num_envs={args.num_envs} and session episodes of budget_measurements, got "
                             f"{envs.num_envs}, episode={envs.options.episode!r} and budget_measurements="
                             f"{envs.options.budget_measurements}")
    try:
        wanted = OBSERVATION_OF[args.architecture]
        if envs.options.observation != wanted:
            raise ValueError(f"architecture {args.architecture} reads observation={wanted!r}; envs observe "
                             f"{envs.options.observation!r}")
        started = time.perf_counter()
        if experts is None:
            experts = make_experts(envs, envs.options.budget_measurements, args.tolerance)
            print(f"experts of {len(experts)} training tasks in {time.perf_counter() - started:.0f} s: good configs "
                  f"{min(e.n_good for e in experts)}-{max(e.n_good for e in experts)} a task", flush=True)
        obs_size, n_actions = int(envs.single_observation_space.shape[0]), int(envs.single_action_space.n)
        agent = network(args.architecture, obs_size, n_actions, args.hidden_size, args.n_hidden_layers)
        optimizer = torch.optim.AdamW(agent.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
        run_dir = Path(args.out) / f"imitation_{name}__{args.seed}__{int(time.time())}"
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = {"architecture": {"class": args.architecture, "hidden_size": args.hidden_size,
                                 "n_hidden_layers": args.n_hidden_layers, "activation": "tanh"},
                "observation_size": obs_size, "n_actions": n_actions, "env_id": MULTITASK_ID, "env_kwargs": env_kwargs,
                "layout": envs.layout.to_dict(), "tasks": [t.to_dict() for t in envs.tasks],
                "args": asdict(args), "trainer": "imitation (DAgger on the oracle walker)", "run_name": run_dir.name}
        data: list[tuple[torch.Tensor, ...]] = []
        obs_np, info = envs.reset(seed=args.seed)
        valid = np.ones(args.num_envs, dtype=bool)  # False on a sub-environment's autoreset step (its action ignored)
        path = run_dir / "model.safetensors"
        with open(run_dir / "progress.csv", "w", newline="") as csv_file:
            log = csv.DictWriter(csv_file, fieldnames=CSV_COLUMNS)
            log.writeheader()
            for iteration in range(args.iterations):
                beta = args.beta_decay ** iteration
                fresh: list[tuple[np.ndarray, ...]] = []
                agree, regrets = [], []
                for _ in range(args.rollout_steps):
                    mask, labels = info["action_mask"], expert_labels(envs, experts)
                    keep = valid & labels.any(axis=1)
                    with torch.no_grad():
                        logits = agent.masked_logits(torch.from_numpy(obs_np), torch.from_numpy(mask))
                        drawn = sample_categorical(logits.softmax(dim=1)).numpy()
                    agree.append(labels[keep, logits.argmax(dim=1).numpy()[keep]])
                    expert_move = (rng.random(labels.shape) * labels).argmax(axis=1)
                    actions = np.where(rng.random(args.num_envs) < beta, expert_move, drawn)
                    fresh.append((obs_np[keep], mask[keep], labels[keep]))
                    obs_np, _, terminated, truncated, info = envs.step(actions)
                    done = terminated | truncated
                    regrets += ended_regrets(info, done, experts)
                    valid = ~done
                data.append(tuple(torch.from_numpy(np.concatenate(part)) for part in zip(*fresh)))
                while sum(d[0].shape[0] for d in data) - data[0][0].shape[0] >= args.max_samples:
                    data.pop(0)
                loss = _train_epochs(agent, optimizer, tuple(torch.cat(part) for part in zip(*data)), args.epochs,
                                     args.minibatch_size)
                row = {"iteration": iteration, "wall_time_s": round(time.perf_counter() - started, 1),
                       "expert_share": beta, "samples": sum(d[0].shape[0] for d in data),
                       "agreement": float(np.concatenate(agree).mean()), "loss": loss, "episodes": len(regrets),
                       "train_regret": float(np.mean(regrets)) if regrets else float("nan")}
                log.writerow(row)
                csv_file.flush()
                print(json.dumps(row), flush=True)
                save_checkpoint(agent, path, {**meta, "iteration": iteration})
                save_checkpoint(agent, run_dir / f"model-{iteration}.safetensors", {**meta, "iteration": iteration})
    finally:
        if own is not None:
            own.close()
    return path


def parse_args(argv: list[str] | None = None) -> ImitationArgs:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(ImitationArgs):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                            help=f.metadata["help"])
    args = ImitationArgs(**vars(parser.parse_args(argv)))
    try:
        args.check()
    except ValueError as exc:
        parser.error(str(exc))
    return args


if __name__ == "__main__":
    print(f"saved {train(parse_args())}  (pid {os.getpid()})")
