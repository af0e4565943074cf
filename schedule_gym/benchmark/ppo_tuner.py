"""PPO checkpoints of :mod:`schedule_gym.baselines.ppo_vec` on a protocol: trained on its training split,
run as a tuner on its held-out tasks.

Training on a protocol's training split, in the protocol's layout (so the policy also runs on the held-out
tasks), on its mock profile; every other flag is ``ppo_vec``'s::

    python -m schedule_gym.benchmark.ppo_tuner --protocol v0 --total-timesteps 20000000 \\
        --env-kwargs '{"reward": "log_speedup_prev", "max_episode_steps": 100}'

:func:`ppo_tuner` makes the tuner :func:`~schedule_gym.benchmark.run_protocol` runs: the game every policy
tuner plays (:func:`~schedule_gym.benchmark.tuners.run_policy_session`: episodes of ``episode_steps`` moves from ``s0`` within one
measurement session of ``budget`` unique configs), actions drawn from the masked policy with a generator
seeded by the run's seed. The tuner holds the checkpoint's bytes and sidecar, so it pickles as plain data
and a Ray worker rebuilds the policy from them (``portable``); loading unpickles nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.benchmark.tuners import run_policy_search, run_policy_session
from schedule_gym.tasks import Task

__all__ = ["SESSION_SETTINGS", "PPOTuner", "main", "ppo_tuner", "protocol_env_kwargs", "session_env_kwargs"]

#: what :func:`main` trains on: the multi-task environment, a task drawn per episode
MULTITASK_ID = "schedule_gym/MultiTask-v0"
#: the environment arguments a protocol fixes (:func:`protocol_env_kwargs`)
PROTOCOL_ENV_KEYS = ("tasks", "layout", "backend", "backend_options")


def protocol_env_kwargs(protocol: str | Protocol) -> dict[str, Any]:
    """``MultiTask-v0``'s arguments (plain JSON) on ``protocol``'s training split, in its layout and mock profile."""
    protocol = get_protocol(protocol)
    tasks = protocol.train if isinstance(protocol.train, str) else [t.to_dict() for t in protocol.train_tasks()]
    return {"tasks": tasks, "layout": protocol.layout().to_dict(), "backend_options": {"profile": protocol.profile}}


#: the game a policy is trained on to be scored at a budget track: feature observations, one measurement session
#: per episode from ``s0``, rewarded for improving its best config (less a cost per new measurement)
SESSION_SETTINGS = {"observation": "features", "reward": "best_improvement:0.005", "episode": "session", "start": "s0"}


def session_env_kwargs(protocol: str | Protocol, track: int | None = None) -> dict[str, Any]:
    """``MultiTask-v0``'s arguments (plain JSON) for training on ``protocol``'s training split as its tuners are
    scored at the budget track ``track`` (default: the protocol's budget): :data:`SESSION_SETTINGS`, sessions of
    ``track`` measurements cut at ``4 * track`` moves, and :func:`protocol_env_kwargs`."""
    protocol = get_protocol(protocol).at_budget(track)
    return {**SESSION_SETTINGS, "budget_measurements": protocol.budget, "max_episode_steps": 4 * protocol.budget,
            **protocol_env_kwargs(protocol)}


class PPOTuner:
    """A tuner running a ``ppo_vec`` checkpoint (see :func:`ppo_tuner`); pickles as the checkpoint's bytes,
    its sidecar, the protocol and its settings, never as the loaded policy (``portable``)."""

    portable = True

    def __init__(self, weights: bytes, meta: dict[str, Any], protocol: Protocol, name: str = "checkpoint",
                 episode_steps: int = 100, max_steps_factor: int = 20, deterministic: bool = False,
                 beam_width: int = 0, proposals: int = 2, random_starts: int = 0, policy_share: float = 0.0,
                 temperature: float = 1.0) -> None:
        self.weights, self.meta, self.protocol, self.name = weights, meta, protocol, name
        self.episode_steps, self.max_steps_factor, self.deterministic = episode_steps, max_steps_factor, deterministic
        self.beam_width, self.proposals, self.random_starts = beam_width, proposals, random_starts
        self.policy_share, self.temperature = policy_share, temperature
        self._policy: Any = None

    @property
    def policy(self) -> Any:
        if self._policy is None:
            from schedule_gym.baselines.ppo_vec import load_checkpoint

            self._policy = load_checkpoint(self.name, self.weights, self.meta)
        return self._policy

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_policy": None}

    def artefacts(self) -> tuple[Path, ...]:
        """The checkpoint file (its ``.meta.json`` sidecar, where there is one, is checked by ``run_protocol``
        against the protocol's held-out tasks)."""
        return (Path(self.name),) if Path(self.name).is_file() else ()

    def __call__(self, task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        import torch

        policy, generator = self.policy, torch.Generator().manual_seed(seed)

        def act(obs: np.ndarray, mask: np.ndarray) -> int:
            return int(policy.act(obs, mask, deterministic=self.deterministic, generator=generator,
                                  temperature=self.temperature))

        if self.beam_width:
            def probabilities(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:  # the masked policy's, 0 if illegal
                with torch.no_grad():
                    logits = policy.agent.masked_logits(torch.as_tensor(obs[None], dtype=torch.float32),
                                                        torch.as_tensor(mask[None]))
                return np.where(mask, logits.softmax(dim=1)[0].numpy(), 0.0)

            return run_policy_search(probabilities, task, self.protocol.layout(), backend, seed, budget,
                                     self.beam_width, self.proposals, self.random_starts, self.env_options,
                                     act=act, lead=round(self.policy_share * budget))
        return run_policy_session(act, task, self.protocol.layout(), backend, seed, budget, self.episode_steps,
                                  self.max_steps_factor, self.env_options)

    @property
    def env_options(self) -> dict[str, Any]:
        """The options of the environment the policy was trained on, less what the protocol fixes (tasks, layout,
        backend) and the budget (each run's own)."""
        kwargs = dict(self.meta.get("env_kwargs") or {})
        drop = set(PROTOCOL_ENV_KEYS) | {"budget_measurements", "budget_fraction", "max_episode_steps", "autoreset_mode"}
        return {k: v for k, v in kwargs.items() if k not in drop}


def ppo_tuner(path: str | os.PathLike, protocol: str | Protocol, episode_steps: int = 100, max_steps_factor: int = 20,
              deterministic: bool = False, beam_width: int = 0, proposals: int = 2, random_starts: int = 0,
              policy_share: float = 0.0, temperature: float = 1.0) -> PPOTuner:
    """A :class:`PPOTuner` of the checkpoint at ``path`` (``.safetensors`` with its ``.json`` sidecar), loaded
    here (unpickling nothing); a bad file, or a policy trained in another layout than ``protocol``'s (which
    could not read its held-out tasks), is a ``ValueError`` naming the file and the reason.

    ``beam_width`` 0 plays the policy (:func:`~schedule_gym.benchmark.tuners.run_policy_session`); a positive
    one runs the policy-guided beam search (:func:`~schedule_gym.benchmark.tuners.run_policy_search`), taking
    ``proposals`` moves of each beam config a round, from ``s0`` and ``random_starts`` random configs;
    ``policy_share`` (0 to 1) of each run's budget is first played by the policy alone, the beam starting from the
    fastest configs it measured (the search's ``lead``). Where the policy plays, it draws its moves at
    ``temperature`` (:meth:`~schedule_gym.baselines.ppo_vec.PPOPolicy.act`; 1: as trained); the beam's proposals
    are its most probable moves, which no temperature reorders."""
    for key, value, least in (("beam_width", beam_width, 0), ("proposals", proposals, 1), ("random_starts", random_starts, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{key} must be an integer >= {least}, got {value!r}")
    if isinstance(policy_share, bool) or not isinstance(policy_share, (int, float)) or not 0 <= policy_share <= 1:
        raise ValueError(f"policy_share must be a number from 0 to 1, got {policy_share!r}")
    if policy_share and not beam_width:
        raise ValueError(f"policy_share={policy_share} hands the rest of the budget to the beam search: it needs "
                         "beam_width >= 1 (with beam_width 0 the policy plays the whole budget)")
    from schedule_gym.baselines.ppo_vec import check_temperature, load_checkpoint

    temperature = check_temperature(temperature)
    protocol = get_protocol(protocol)
    path = Path(path)
    policy = load_checkpoint(path)
    expected = protocol.layout().to_dict()
    if policy.layout != expected:
        raise ValueError(f"{path} was trained in the layout {policy.layout} ({policy.meta.get('env_id')}); protocol "
                         f"{protocol.name} needs {expected}: train it with python -m schedule_gym.benchmark.ppo_tuner "
                         f"--protocol {protocol.name}")
    tuner = PPOTuner(path.read_bytes(), policy.meta, protocol, str(path), episode_steps, max_steps_factor, deterministic,
                     beam_width, proposals, random_starts, float(policy_share), temperature)
    tuner._policy = policy
    return tuner


def main(argv: Sequence[str] | None = None) -> None:
    """Train a ``ppo_vec`` policy on a protocol's training split (the module docstring's command)."""
    from schedule_gym.baselines.ppo_vec import Args, args_parser, parse_args, train

    parser = args_parser(__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="v0", help="the protocol whose training split is trained on (default v0)")
    args, rest = parse_args(None if argv is None else list(argv), parser)
    try:
        protocol = get_protocol(rest["protocol"])
    except ValueError as exc:
        parser.error(str(exc))
    fixed = sorted(set(json.loads(args.env_kwargs)) & set(PROTOCOL_ENV_KEYS))
    if fixed or args.env_id != MULTITASK_ID:
        parser.error(f"protocol {protocol.name} sets the environment ({MULTITASK_ID}) and its "
                     f"{', '.join(PROTOCOL_ENV_KEYS)}: do not pass --env-id, nor {', '.join(fixed) or 'them'} in --env-kwargs")
    args.env_kwargs = json.dumps({**json.loads(args.env_kwargs), **protocol_env_kwargs(protocol)})
    if args.exp_name == Args.exp_name:
        args.exp_name = f"ppo_vec_{protocol.name}"
    path = train(args)
    print(f"saved {path}; its tuner: schedule_gym.benchmark.ppo_tuner.ppo_tuner({str(path)!r}, {protocol.name!r})")


if __name__ == "__main__":
    main()
