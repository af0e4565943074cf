"""Stable-Baselines3 policies as tuners: train PPO, A2C, DQN or MaskablePPO on the environment, then tune.

Training (CleanRL-style script: arguments at the top, one run name ``{task}__{algo}__{seed}``)::

    python -m schedule_gym.baselines.sb3_tuner --algo maskable_ppo --task gemm-1024 --timesteps 50000
    python -m schedule_gym.baselines.sb3_tuner --algo ppo --table gemm-128-323-znver5-1t

trains on the mock backend (default) or a shipped real table (``--table``; ``--backend tvm`` works too,
slowly), writes TensorBoard logs to ``runs/sb3/<run>/tb`` and the model to ``runs/sb3/<run>/model.zip``.

Tuning: :class:`PolicyTunerAgent` (registered as ``"policy"``) loads such a model and tunes under the same
budget as every other agent: episodes of ``episode_steps`` moves from ``s0``, each action drawn from the
policy (stochastically, illegal moves masked out for MaskablePPO; an illegal action otherwise ends the
episode), each new config measured through the environment — so it appears in ``schedule-gym tune`` and
``schedule-gym compare`` like the search agents (``tune --agent policy --agent-param model=runs/sb3/<run>/model.zip``;
``compare --agents ... policy --agent-param policy.model=runs/sb3/<run>/model.zip``).
"""

from __future__ import annotations

import argparse
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.agents.base import Agent, check_positive
from schedule_gym.extras import require

__all__ = ["ALGOS", "PolicyTunerAgent", "TrainArgs", "load_checked", "load_model", "train"]

#: algorithm name -> (module, class)
ALGOS = {
    "ppo": ("stable_baselines3", "PPO"),
    "a2c": ("stable_baselines3", "A2C"),
    "dqn": ("stable_baselines3", "DQN"),
    "maskable_ppo": ("sb3_contrib", "MaskablePPO"),
}


def _algo_class(algo: str) -> Any:
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
    import importlib

    require(f"algorithm {algo!r}", "rl")

    module, cls = ALGOS[algo]
    return getattr(importlib.import_module(module), cls)


def _unpickler_reason(exc: BaseException) -> str:
    """The line of a refused ``torch.load(weights_only=True)`` that says what it refused."""
    found = re.search(r"WeightsUnpickler error:\s*(.+)", str(exc))
    reason = found.group(1) if found else str(exc).strip().splitlines()[0]
    return reason.split(". Please")[0].strip().rstrip(".")


def _refused_entry(content: str | Path | bytes) -> str:
    """The first weights entry (``*.pth``) of a saved model that ``torch.load(weights_only=True)`` refuses."""
    import pickle

    import torch

    with zipfile.ZipFile(io.BytesIO(content) if isinstance(content, bytes) else content) as archive:
        for entry in archive.namelist():
            if entry.endswith(".pth"):
                try:
                    torch.load(io.BytesIO(archive.read(entry)), map_location="cpu", weights_only=True)
                except pickle.UnpicklingError:
                    return f"its entry {entry!r}"
    return "a weights entry"


def load_checked(cls: Any, content: str | Path | bytes, name: object, **kwargs: Any) -> Any:
    """``cls.load`` (an SB3 algorithm) of a saved model's path or bytes, with what is wrong in the file as one
    ``ValueError`` naming ``name`` and the reason: a weights entry that is not plain tensors (SB3 reads them
    with ``torch.load(weights_only=True)``, which refuses to unpickle anything else), weights whose shapes do
    not fit the policy the file's ``data`` entry describes, entries missing."""
    import pickle

    try:
        return cls.load(io.BytesIO(content) if isinstance(content, bytes) else content, **kwargs)
    except pickle.UnpicklingError as exc:
        raise ValueError(f"{name}: {_refused_entry(content)} is not plain tensors ({_unpickler_reason(exc)}); "
                         "refusing to unpickle it") from None
    except RuntimeError as exc:
        if "state_dict" not in str(exc):
            raise
        lines = [line.strip().rstrip(".") for line in str(exc).splitlines()[1:] if line.strip()]
        raise ValueError(f"{name}: its weights do not fit the policy its 'data' entry describes ({len(lines)} "
                         f"mismatches; the first: {lines[0] if lines else str(exc).strip()})") from None
    except (ValueError, KeyError) as exc:  # SB3: entries missing or misnamed
        raise ValueError(f"{name}: not a loadable {cls.__name__} model ({exc})") from None


def load_model(path: str | Path, algo: str | None = None) -> Any:
    """A saved SB3 model; ``algo`` is read from the file name's run directory if not given."""
    path = Path(path)
    if not path.is_file() or not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a saved Stable-Baselines3 model (a .zip file)")
    if algo is None:
        meta = path.parent / "algo.txt"
        if not meta.is_file():
            raise ValueError(f"say which algorithm saved {path}: algo= one of {', '.join(ALGOS)}")
        algo = meta.read_text().strip()
    return load_checked(_algo_class(algo), path, path, device="cpu"), algo


class PolicyTunerAgent(Agent):
    """Tune with a trained SB3 policy: stochastic episodes from ``s0``, every new config measured."""

    name = "policy"
    needs_env = True  # reads observations from the environment

    def __init__(self, seed: int = 0, model: str | None = None, algo: str | None = None, episode_steps: int = 100) -> None:
        super().__init__(seed)
        if not isinstance(model, (str, Path)):
            raise ValueError(f"the policy tuner needs model= the path of a saved SB3 model, got {model!r}")
        self.model = str(model)
        self.algo = algo
        self.episode_steps = check_positive(episode_steps, "episode_steps", integer=True)
        self._policy, self.algo = load_model(self.model, algo)

    def search(self) -> None:
        space, env, policy = self.space, self.env, self._policy
        assert env is not None  # needs_env
        expected = policy.observation_space.shape
        if env.observation_space.shape != expected:
            raise ValueError(f"the policy in {self.model} expects observations of shape {expected}, the environment gives {env.observation_space.shape}")
        policy.set_random_seed(self.seed)
        masked = self.algo == "maskable_ppo"
        start = space.rows(space.initial_config())
        idle = 0
        while True:
            rows = start
            found = False
            for _ in range(self.episode_steps):
                obs = env.observation_of_rows(rows)
                mask = space.action_mask_of_rows(rows)
                if masked:
                    action, _ = policy.predict(obs, deterministic=False, action_masks=mask)
                else:
                    action, _ = policy.predict(obs, deterministic=False)
                nxt = space.step_rows(rows, int(action))
                if nxt is None:
                    break
                rows = nxt
                index = space.index_of_rows(rows)
                if self.is_new(index):
                    self.measure([index])
                    found = True
            idle = 0 if found else idle + 1
            if idle >= 20:  # the policy only revisits measured configs: explore at random instead
                legal = np.flatnonzero(space.action_mask_of_rows(rows))
                start = space.rows(space.sample(self.rng)) if not len(legal) else space.step_rows(rows, int(self.rng.choice(legal)))
                index = space.index_of_rows(start)
                if self.is_new(index):
                    self.measure([index])
                self.check_budget()


@dataclass
class TrainArgs:
    algo: str = "maskable_ppo"
    task: str = "gemm-1024"
    table: str | None = None
    backend: str = "mock"
    timesteps: int = 50_000
    seed: int = 0
    episode_steps: int = 100
    out: str = "runs/sb3"


def train(args: TrainArgs) -> Path:
    """Train and save; returns the model's path. Rewards: ``log_speedup_prev`` (its sum is the log speed-up)."""
    import gymnasium
    from stable_baselines3.common.monitor import Monitor

    from schedule_gym.envs import TilingEnv, table_env
    from schedule_gym.tasks import get_task

    cls = _algo_class(args.algo)
    if args.table:
        env = table_env(args.table, reward="log_speedup_prev")
        name = f"table-{args.table}"
    else:
        task = get_task(args.task)
        env = TilingEnv(task=task, backend=args.backend, reward="log_speedup_prev")
        name = task.name
    env = Monitor(gymnasium.wrappers.TimeLimit(env, args.episode_steps))
    run = Path(args.out) / f"{name}__{args.algo}__{args.seed}"
    run.mkdir(parents=True, exist_ok=True)
    model = cls("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, tensorboard_log=str(run / "tb"))
    model.learn(total_timesteps=args.timesteps)
    model.save(run / "model.zip")
    (run / "algo.txt").write_text(args.algo + "\n")
    env.close()
    return run / "model.zip"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = TrainArgs()
    parser.add_argument("--algo", default=defaults.algo, choices=list(ALGOS))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--task", default=defaults.task)
    where.add_argument("--table", default=None)
    parser.add_argument("--backend", default=defaults.backend)
    parser.add_argument("--timesteps", type=int, default=defaults.timesteps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--episode-steps", type=int, default=defaults.episode_steps)
    parser.add_argument("--out", default=defaults.out)
    ns = parser.parse_args(argv)
    path = train(TrainArgs(**vars(ns)))
    print(f"saved {path}; tune with: schedule-gym tune --agent policy --agent-param model={path} ...")


if __name__ == "__main__":
    main()
