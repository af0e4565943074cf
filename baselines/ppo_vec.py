"""PPO with invalid-action masking on a native vector environment (CleanRL's single-file ``ppo.py``).

Read top to bottom: arguments, checkpoints and the inference policy, the advantage estimate, then :func:`train`
(environment, rollout, update, logging); the networks (CleanRL's ``Agent``, and ``MoveScorer``) are in
:mod:`~schedule_gym.baselines.networks`. Training calls the vector environment's ``reset`` and
``step`` on arrays, with no Gymnasium wrapper between them and the learner; every id with a native vector
environment works (``MultiTask-v0``, ``Gemm-v0``, ``Conv2d-v0``, the table ids...)::

    python -m schedule_gym.baselines.ppo_vec --env-id schedule_gym/Gemm-v0 \\
        --env-kwargs '{"m": 64, "k": 64, "n": 64, "reward": "log_speedup_s0"}' --total-timesteps 1000000

writes ``<out>/<run>/`` (``run = {env}__{exp_name}__{seed}__{unix time}``): ``progress.csv``, TensorBoard
events, and the checkpoint ``model.safetensors`` with its sidecar ``model.json``.

* **Masking**: the logits of illegal actions are set to ``MASKED_LOGIT`` before the categorical, so an
  illegal action has probability 0; the rollout's masks are stored and reused in the update.
* **Autoreset and truncation**: the environment runs Gymnasium's ``AutoresetMode.NEXT_STEP``. The
  observation returned with ``truncated`` is the episode's final observation, so the value the agent
  computes for it on the next step is the bootstrap value; that next step is the autoreset (its action is
  ignored, its reward 0): it is left out of the update and :func:`compute_gae` cuts the advantage there.
* **Checkpoints** hold tensors only (safetensors, no pickle) and a JSON sidecar with the architecture, the
  sizes, the environment id and arguments and the task layout: :func:`load_checkpoint` rebuilds the
  :class:`PPOPolicy`, and refuses any other file with one ``ValueError`` naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import nn

from schedule_gym.baselines.networks import MASKED_LOGIT, NETWORKS, Agent, network, sample_categorical
from schedule_gym.envs.resolve import json_object
from schedule_gym.envs.vector_env import EpisodesVectorEnv, MultiTaskVectorEnv
from schedule_gym.tasks.task import Task

__all__ = ["CHECKPOINT_FORMAT", "MASKED_LOGIT", "Agent", "Args", "PPOPolicy", "check_temperature", "compute_gae",
           "load_checkpoint", "args_parser", "make_envs", "parse_args", "sample_categorical", "save_checkpoint", "train"]

#: the sidecar's ``format`` entry (its ``version`` is :data:`CHECKPOINT_VERSION`)
CHECKPOINT_FORMAT = "schedule-gym/ppo_vec"
CHECKPOINT_VERSION = 1
#: the columns of ``progress.csv``, one row per update
CSV_COLUMNS = ["global_step", "wall_time_s", "steps_per_s", "episodic_return", "episodic_length", "episodes",
               "update_steps", "learning_rate", "value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl",
               "clip_fraction", "explained_variance"]
#: TensorBoard tags of the CSV's columns (CleanRL's; the other columns go under ``losses/``)
TB_TAGS = {"steps_per_s": "charts/SPS", "episodic_return": "charts/episodic_return",
           "episodic_length": "charts/episodic_length", "episodes": "charts/episodes",
           "learning_rate": "charts/learning_rate", "update_steps": "charts/update_steps"}


# ---------------------------------------------------------------------------------------------- arguments
def arg(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """The run's settings, one flag each (:func:`args_parser`). The defaults are chosen for throughput on two
    cores: a batch of 1024 x 16 steps makes every environment and torch call serve 1024 rows, 2 epochs of 4
    minibatches of 4096 keep the update (the learner's largest cost, in proportion to epochs) short, and
    64-unit layers keep each row's products small."""

    exp_name: str = arg("ppo_vec", "the experiment's name, part of the run name")
    seed: int = arg(1, "seeds torch, and the environments as seed + i")
    torch_threads: int = arg(1, "torch.set_num_threads (1: the small products gain little from a second thread, "
                                "whose every operation waits for a core that may be busy)")
    env_id: str = arg("schedule_gym/MultiTask-v0", "an environment id with a native vector environment")
    env_kwargs: str = arg("{}", "the environment's arguments as JSON (tasks: names or a list of Task dicts; "
                                "MultiTask-v0's default tasks: resnet50,bert-base)")
    total_timesteps: int = arg(20_000_000, "environment steps in total (autoreset steps included)")
    learning_rate: float = arg(2.5e-4, "Adam's learning rate")
    anneal_lr: bool = arg(True, "anneal the learning rate linearly to 0")
    num_envs: int = arg(1024, "sub-environments of the vector environment (many: each step's fixed costs are shared)")
    num_steps: int = arg(16, "steps per sub-environment per rollout (the batch is num_envs * num_steps; "
                             "short: fresh data, and GAE bootstraps the rest)")
    gamma: float = arg(0.99, "the discount (1 for session episodes: a tuner is scored on its best config, whose "
                             "log speed-up is the undiscounted sum of best_improvement rewards)")
    gae_lambda: float = arg(0.95, "GAE's lambda")
    num_minibatches: int = arg(4, "minibatches per epoch (few: large products, few optimiser steps)")
    update_epochs: int = arg(2, "passes over the batch per update (the update's cost grows with them)")
    norm_adv: bool = arg(True, "normalise advantages per minibatch")
    clip_coef: float = arg(0.2, "the surrogate's clipping coefficient")
    clip_vloss: bool = arg(True, "clip the value loss as the surrogate")
    ent_coef: float = arg(0.01, "the entropy bonus' coefficient")
    vf_coef: float = arg(0.5, "the value loss' coefficient")
    max_grad_norm: float = arg(0.5, "the gradient's largest norm")
    target_kl: float = arg(0.0, "stop an update's epochs when the approximate KL passes this (0: never)")
    hidden_size: int = arg(64, "units per hidden layer of the actor and of the critic")
    n_hidden_layers: int = arg(2, "hidden layers of the actor and of the critic")
    architecture: str = arg("Agent", "the policy network (networks.NETWORKS): Agent, MLPs over the observation; "
                                     "MoveScorer, one scorer of every move's destination (observation move_features)")
    out: str = arg("runs/ppo_vec", "the run folder is <out>/<run name>")
    checkpoint_every: int = arg(0, "also write the checkpoint every this many updates (0: at the end only)")
    keep_checkpoints: bool = arg(False, "keep each periodic checkpoint as model-<global step>.safetensors beside "
                                        "the last (for learning curves), not only the latest as model.safetensors")
    tensorboard: bool = arg(True, "write TensorBoard events beside the CSV")
    init_from: str = arg("", "start from this checkpoint (ppo_vec's format, as imitation's; of this run's sizes)")
    critic_warmup: int = arg(0, "updates at the start that train the critic alone: a policy started from "
                                "--init-from keeps its moves until the critic, new, values them (0: none)")


def args_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The command line of :class:`Args`: one flag per field (``--no-<flag>`` turns a bool off)."""
    parser = argparse.ArgumentParser(description=description or __doc__.splitlines()[0])
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"])
    return parser


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> tuple[Args, dict[str, Any]]:
    """``(args, rest)``: the checked :class:`Args` of the command line, and the values of any flags ``parser``
    (default :func:`args_parser`) adds beyond them."""
    parser = parser or args_parser()
    values = vars(parser.parse_args(argv))
    names = {f.name for f in fields(Args)}
    args = Args(**{k: v for k, v in values.items() if k in names})
    try:
        check_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args, {k: v for k, v in values.items() if k not in names}


def check_args(args: Args) -> dict[str, Any]:
    """The environment's arguments (decoded from ``args.env_kwargs``), after checking every value of ``args``."""
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "hidden_size",
                 "n_hidden_layers", "torch_threads"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name in ("checkpoint_every", "critic_warmup"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if args.architecture not in NETWORKS:
        raise ValueError(f"architecture must be one of {sorted(NETWORKS)}, got {args.architecture!r}")
    env_kwargs = json_object(args.env_kwargs, "env_kwargs")
    for key in ("num_envs", "autoreset_mode"):
        if key in env_kwargs:
            raise ValueError(f"env_kwargs may not set {key!r}: the trainer sets it")
    return env_kwargs


def make_envs(env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> EpisodesVectorEnv:
    """The native vector environment of ``env_id`` in ``NEXT_STEP`` autoreset; a ``task`` given as a Task dict
    (:meth:`~schedule_gym.tasks.task.Task.to_dict`) is rebuilt (``tasks`` take dicts as they are)."""
    kwargs = dict(env_kwargs)
    if isinstance(kwargs.get("task"), dict):
        kwargs["task"] = Task.from_dict(kwargs["task"])
    if gym.spec(env_id).vector_entry_point is None:
        raise ValueError(f"{env_id} has no native vector environment (no vector_entry_point)")
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        autoreset_mode=AutoresetMode.NEXT_STEP, **kwargs)
    if not isinstance(envs, EpisodesVectorEnv):
        raise ValueError(f"{env_id}'s vector environment is a {type(envs).__name__}, not a native one")
    return envs


# ------------------------------------------------------------------------------ checkpoints and inference
class PPOPolicy:
    """A trained agent and its sidecar (``meta``): acts on observations of the environment it was trained on.

    ``layout``: the :class:`~schedule_gym.envs.TaskLayout` dict of a multi-task policy (None: a single-task one).
    """

    def __init__(self, agent: nn.Module, meta: dict[str, Any]) -> None:
        self.agent = agent.eval()
        self.meta = meta
        self.observation_size = int(meta["observation_size"])
        self.n_actions = int(meta["n_actions"])
        self.layout: dict[str, Any] | None = meta.get("layout")

    @torch.no_grad()
    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = False,
            generator: torch.Generator | None = None, temperature: float = 1.0) -> np.ndarray:
        """Actions for ``obs`` ``(N, observation_size)`` (or one observation) and their legal-action masks:
        the most probable legal action (``deterministic``), else one drawn with ``generator`` from the policy's
        distribution at ``temperature`` (its logits divided by it: below 1 sharper, 1 the trained policy)."""
        check_temperature(temperature)
        x, m = torch.as_tensor(np.asarray(obs, dtype=np.float32)), torch.as_tensor(np.asarray(mask, dtype=bool))
        one = x.ndim == 1
        if x.shape[-1:] != (self.observation_size,) or m.shape != x.shape[:-1] + (self.n_actions,):
            raise ValueError(f"this policy acts on observations of size {self.observation_size} with masks of "
                             f"{self.n_actions} actions, got shapes {tuple(x.shape)} and {tuple(m.shape)}")
        x, m = x.reshape(-1, self.observation_size), m.reshape(-1, self.n_actions)
        if deterministic:
            actions = self.agent.masked_logits(x, m).argmax(dim=1)
        else:  # scaled before the mask, so a masked action keeps probability 0 at any temperature
            logits = (self.agent.logits(x) / temperature).masked_fill(~m, MASKED_LOGIT)
            actions = sample_categorical(logits.softmax(dim=1), generator)
        return actions.numpy()[0] if one else actions.numpy()


def check_temperature(temperature: float) -> float:
    """``temperature`` as a float, or a ``ValueError`` naming it: a finite positive number (0 would be the
    argmax: ``deterministic``)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not 0 < temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number > 0 (use deterministic for the argmax), "
                         f"got {temperature!r}")
    return float(temperature)


def save_checkpoint(agent: nn.Module, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write ``path`` (``.safetensors``: tensors only) and its sidecar ``path.with_suffix('.json')``, each
    written beside and renamed over, so a reader never sees half a file."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"a checkpoint's name ends in .safetensors, got {path}")
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **meta}
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    save_file({k: v.detach().contiguous() for k, v in agent.state_dict().items()}, str(tmp))
    tmp.replace(path)
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    tmp.replace(path.with_suffix(".json"))
    return path


def load_checkpoint(path: str | Path, weights: bytes | None = None, meta: dict[str, Any] | None = None) -> PPOPolicy:
    """The :class:`PPOPolicy` of a checkpoint: ``path`` (``.safetensors``) and its ``.json`` sidecar, or the
    weights' bytes and the sidecar's dict given (``path`` then only names them in errors). Nothing is
    unpickled: a file that is not a safetensors checkpoint of this format (a pickle, a truncated file, a
    sidecar or tensors that do not match) is one ``ValueError`` naming the file and the reason."""
    from safetensors import SafetensorError
    from safetensors.torch import load as load_bytes

    path = Path(path)
    sidecar = path.with_suffix(".json")
    if meta is None:
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{sidecar} is not a readable checkpoint sidecar (JSON): {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{sidecar} is not a {CHECKPOINT_FORMAT} version {CHECKPOINT_VERSION} sidecar")
    try:
        arch = meta["architecture"]
        sizes = [int(meta["observation_size"]), int(meta["n_actions"]), int(arch["hidden_size"]),
                 int(arch["n_hidden_layers"])]
        name = str(arch.get("class", "Agent"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{sidecar} lacks the architecture or sizes of the policy ({exc!r})") from None
    if any(s < 1 for s in sizes):
        raise ValueError(f"{sidecar} gives sizes that are not positive: {sizes}")
    if name not in NETWORKS:
        raise ValueError(f"{sidecar} names the architecture {name!r}; known: {sorted(NETWORKS)}")
    try:
        tensors = load_bytes(path.read_bytes() if weights is None else weights)
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc}") from None
    except SafetensorError as exc:
        raise ValueError(f"{path} is not a safetensors file ({exc})") from None
    try:
        agent = network(name, *sizes)
    except ValueError as exc:
        raise ValueError(f"{sidecar}: {exc}") from None
    expected = {k: tuple(v.shape) for k, v in agent.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in tensors.items()}
    if found != expected or any(v.dtype != torch.float32 for v in tensors.values()):
        wrong = sorted(set(expected) ^ set(found)) or sorted(k for k in expected if found[k] != expected[k])
        raise ValueError(f"{path} does not hold the policy its sidecar describes (sizes {sizes}): tensors "
                         f"{wrong[:4] or 'of another dtype than float32'} differ")
    agent.load_state_dict(tensors)
    return PPOPolicy(agent, meta)


# ------------------------------------------------------------------------------------- advantage estimate
def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_value: torch.Tensor, terminated: torch.Tensor,
                dones: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of a ``(T, N)`` rollout. ``values[t]`` is the value of the observation at
    step ``t``, ``next_value`` that of the observation after the last step; ``dones[t]``: the episode
    ended at step ``t`` (terminated or truncated). A truncated step bootstraps from ``values[t + 1]``, the
    value of its final observation (NEXT_STEP autoreset), a terminated one from nothing; either way the
    advantage does not flow back across the end."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        following = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        delta = rewards[t] + gamma * following * (1.0 - terminated[t]) - values[t]
        last = delta + gamma * gae_lambda * (1.0 - dones[t]) * last
        advantages[t] = last
    return advantages, advantages + values


# ------------------------------------------------------------------------------------------------ training
def train(args: Args, envs: EpisodesVectorEnv | None = None) -> Path:
    """Train as ``args`` say; returns the checkpoint's path (see the module docstring for what is written).

    ``envs``: the vector environment to train on, made by :func:`make_envs` from ``args`` (default: made and
    closed here); one given is left open, so its latency tables, scored as episodes reach them, serve again."""
    env_kwargs = check_args(args)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    with contextlib.ExitStack() as cleanup:
        # ---- environment
        if envs is None:
            envs = make_envs(args.env_id, args.num_envs, env_kwargs)
            cleanup.callback(envs.close)
        elif envs.num_envs != args.num_envs or envs.autoreset_mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"envs must have num_envs={args.num_envs} and NEXT_STEP autoreset (make_envs), got "
                             f"{envs.num_envs} and {envs.autoreset_mode}")
        obs_size, n_actions = int(envs.single_observation_space.shape[0]), int(envs.single_action_space.n)
        N, T = args.num_envs, args.num_steps
        num_iterations = max(1, args.total_timesteps // (N * T))
        run_name = f"{args.env_id.split('/')[-1]}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = Path(args.out) / run_name
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = {  # what load_checkpoint rebuilds the policy from, and what a tuner plays it with
            "architecture": {"class": args.architecture, "hidden_size": args.hidden_size,
                             "n_hidden_layers": args.n_hidden_layers, "activation": "tanh"},
            "observation_size": obs_size, "n_actions": n_actions, "env_id": args.env_id, "env_kwargs": env_kwargs,
            "layout": envs.layout.to_dict() if isinstance(envs, MultiTaskVectorEnv) else None,
            "tasks": [t.to_dict() for t in (envs.tasks if isinstance(envs, MultiTaskVectorEnv) else [envs.task])],
            "args": asdict(args), "run_name": run_name}

        # ---- agent
        agent = network(args.architecture, obs_size, n_actions, args.hidden_size, args.n_hidden_layers)
        if args.init_from:  # load_checkpoint refuses by name a file that is not a checkpoint
            start = load_checkpoint(args.init_from).agent.state_dict()
            if {k: v.shape for k, v in start.items()} != {k: v.shape for k, v in agent.state_dict().items()}:
                raise ValueError(f"init_from {args.init_from} holds a policy of other sizes than this run's")
            agent.load_state_dict(start)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

        # ---- logging
        writer = None
        if args.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(run_dir))
            cleanup.callback(writer.close)
            writer.add_text("hyperparameters",
                            "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()))
        csv_file = cleanup.enter_context(open(run_dir / "progress.csv", "w", newline=""))
        log = csv.DictWriter(csv_file, fieldnames=CSV_COLUMNS)
        log.writeheader()

        # ---- rollout storage: valid[t] is False on a sub-environment's autoreset step (left out of the update)
        obs, masks = torch.zeros((T, N, obs_size)), torch.zeros((T, N, n_actions), dtype=torch.bool)
        actions = torch.zeros((T, N), dtype=torch.long)
        logprobs, rewards, values = torch.zeros((T, N)), torch.zeros((T, N)), torch.zeros((T, N))
        dones, terminateds = torch.zeros((T, N)), torch.zeros((T, N))
        valid = torch.zeros((T, N), dtype=torch.bool)

        global_step, start_time = 0, time.perf_counter()
        next_obs_np, info = envs.reset(seed=args.seed)
        next_obs, next_mask = torch.from_numpy(next_obs_np), torch.from_numpy(info["action_mask"])
        next_valid = torch.ones(N, dtype=torch.bool)
        ep_return, ep_length = np.zeros(N), np.zeros(N, dtype=np.int64)
        path = run_dir / "model.safetensors"
        for iteration in range(1, num_iterations + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
            finished_returns, finished_lengths = [], []

            # ---- rollout
            for step in range(T):
                global_step += N
                obs[step], masks[step], valid[step] = next_obs, next_mask, next_valid
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs, next_mask)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                next_obs_np, reward, terminated, truncated, info = envs.step(action.numpy())
                done = terminated | truncated
                rewards[step] = torch.from_numpy(reward)
                terminateds[step] = torch.from_numpy(terminated)
                dones[step] = torch.from_numpy(done)
                next_obs, next_mask = torch.from_numpy(next_obs_np), torch.from_numpy(info["action_mask"])
                live = next_valid.numpy()
                ep_return += reward  # 0 on an autoreset step
                ep_length += live
                if done.any():
                    ended = np.flatnonzero(done)
                    finished_returns.extend(ep_return[ended].tolist())
                    finished_lengths.extend(ep_length[ended].tolist())
                    ep_return[ended], ep_length[ended] = 0.0, 0
                next_valid = torch.from_numpy(~done)

            # ---- advantages (the step after a truncation holds the final observation: its value bootstraps)
            with torch.no_grad():
                next_value = agent.get_value(next_obs).flatten()
                advantages, returns = compute_gae(rewards, values, next_value, terminateds, dones, args.gamma,
                                                  args.gae_lambda)

            # ---- update, over the valid steps only
            keep = torch.nonzero(valid.reshape(-1)).squeeze(1)
            b_obs, b_masks = obs.reshape(-1, obs_size)[keep], masks.reshape(-1, n_actions)[keep]
            b_actions, b_logprobs = actions.reshape(-1)[keep], logprobs.reshape(-1)[keep]
            b_advantages, b_returns, b_values = advantages.reshape(-1)[keep], returns.reshape(-1)[keep], values.reshape(-1)[keep]
            n = keep.numel()
            minibatch_size = max(1, -(-n // args.num_minibatches))
            clipfracs: list[float] = []
            nan = torch.tensor(math.nan)  # what is logged of an update without a valid step
            v_loss = pg_loss = entropy_loss = old_approx_kl = approx_kl = nan
            for _epoch in range(args.update_epochs):
                order = torch.randperm(n)
                for start in range(0, n, minibatch_size):
                    mb = order[start:start + minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_masks[mb], b_actions[mb])
                    logratio = newlogprob - b_logprobs[mb]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
                    mb_advantages = b_advantages[mb]
                    if args.norm_adv and mb.numel() > 1:
                        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                    pg_loss = torch.max(-mb_advantages * ratio,
                                        -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                    newvalue = newvalue.view(-1)
                    if args.clip_vloss:
                        v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                        v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (v_clipped - b_returns[mb]) ** 2).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
                    entropy_loss = entropy.mean()
                    if iteration <= args.critic_warmup:  # the actor gets no gradient: Adam leaves it as it is
                        loss = v_loss * args.vf_coef
                    else:
                        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()
                if args.target_kl > 0 and approx_kl > args.target_kl:
                    break
            y_pred, y_true = b_values.numpy(), b_returns.numpy()
            var_y = np.var(y_true) if n else 0.0
            explained_var = math.nan if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)

            # ---- logging
            wall_s = time.perf_counter() - start_time
            row = {"global_step": global_step, "wall_time_s": round(wall_s, 3), "steps_per_s": round(global_step / wall_s),
                   "episodic_return": float(np.mean(finished_returns)) if finished_returns else math.nan,
                   "episodic_length": float(np.mean(finished_lengths)) if finished_lengths else math.nan,
                   "episodes": len(finished_returns), "update_steps": n, "learning_rate": optimizer.param_groups[0]["lr"],
                   "value_loss": v_loss.item(), "policy_loss": pg_loss.item(), "entropy": entropy_loss.item(),
                   "old_approx_kl": old_approx_kl.item(), "approx_kl": approx_kl.item(),
                   "clip_fraction": float(np.mean(clipfracs)) if clipfracs else math.nan,
                   "explained_variance": explained_var}
            log.writerow(row)
            csv_file.flush()
            if writer is not None:
                for key, value in row.items():
                    if key not in ("global_step", "wall_time_s") and not (isinstance(value, float) and math.isnan(value)):
                        writer.add_scalar(TB_TAGS.get(key, "losses/" + key), value, global_step)
            if args.checkpoint_every and iteration % args.checkpoint_every == 0:
                save_checkpoint(agent, path, {**meta, "global_step": global_step})
                if args.keep_checkpoints:
                    save_checkpoint(agent, run_dir / f"model-{global_step}.safetensors", {**meta, "global_step": global_step})
        save_checkpoint(agent, path, {**meta, "global_step": global_step})
    return path


if __name__ == "__main__":
    print(f"saved {train(parse_args()[0])}")
