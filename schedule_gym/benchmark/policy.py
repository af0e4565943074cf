"""Load a MaskablePPO (or plain PPO) policy saved by SB3's ``save`` without unpickling anything from the file.

An SB3 zip is not free of pickles: its ``data`` entry is JSON, but the policy class, the observation and
action spaces, the schedules, the rollout buffer class and a few buffers are stored as base64 cloudpickle
strings, which ``MaskablePPO.load`` unpickles (and unpickling can run any code). :func:`load_policy` passes
every such entry as a ``custom_objects`` replacement built here, so SB3 unpickles none of them: the
policy class is sb3-contrib's ``MaskableActorCriticPolicy`` (SB3's ``ActorCriticPolicy`` for a file whose
stored policy class is from ``stable_baselines3.common.policies``: a plain PPO model, loaded as ``PPO``, which
runs without action masks), the spaces are the protocol layout's, the schedules constants (they only matter for training). A file with a pickled entry this function does not
know is refused, naming it. What loading then executes is SB3's own code: ``json.loads`` of ``data``,
``torch.load(..., weights_only=True)`` of the ``.pth`` weights (tensors only), and the policy constructor
with the file's ``policy_kwargs`` (plain JSON: layer sizes, activation names are not accepted as pickles). A
weights entry that is not plain tensors, or weights that do not fit that policy, are a ``ValueError`` naming the
file and the reason in one line (:func:`~schedule_gym.baselines.sb3_tuner.load_checked`).
"""

from __future__ import annotations

import collections
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from schedule_gym.baselines.sb3_tuner import load_checked
from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.extras import require

__all__ = ["load_policy"]


def _constant(value: float) -> Any:
    return lambda _progress: value


def load_policy(path: str | Path | bytes, protocol: str | Protocol) -> Any:
    """A MaskablePPO model (a PPO model if the file is plain PPO's) for ``protocol``'s layout (on the CPU),
    unpickling nothing, from the file at ``path`` or from a file's bytes (what a Ray worker is given:
    :class:`~schedule_gym.benchmark.PolicyTuner`)."""
    require("loading a trained policy", "rl")
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer
    from stable_baselines3.common.policies import ActorCriticPolicy

    content = path if isinstance(path, bytes) else None
    name: Any = "the policy (given as bytes)" if content is not None else Path(path)

    def source() -> Any:  # the file, or a fresh stream of the bytes (each reader reads from the start)
        return name if content is None else io.BytesIO(content)

    if (content is None and not name.is_file()) or not zipfile.is_zipfile(source()):
        raise ValueError(f"{name} is not a saved Stable-Baselines3 model (a .zip file)")
    with zipfile.ZipFile(source()) as archive:
        try:
            data = json.loads(archive.read("data"))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{name} has no readable SB3 'data' entry: {exc}") from None
    layout = get_protocol(protocol).layout()
    observation_space = gym.spaces.Box(0.0, 1.0, shape=(layout.size,), dtype=np.float32)
    action_space = gym.spaces.Discrete(layout.max_actions)
    stored_shape = str(data.get("observation_space", {}).get("_shape", ""))
    stored_n = str(data.get("action_space", {}).get("n", ""))
    if stored_shape != f"[{layout.size}]" or stored_n != str(layout.max_actions):
        raise ValueError(f"{name} was trained with observations {stored_shape} and {stored_n} actions; protocol "
                         f"{get_protocol(protocol).name} has observations [{layout.size}] and {layout.max_actions} actions")
    # the stored class's module is a plain string of the JSON (the class itself is a pickle, never read)
    stored_class = data.get("policy_class")
    plain_ppo = isinstance(stored_class, dict) and stored_class.get("__module__") == ActorCriticPolicy.__module__
    replacements: dict[str, Any] = {
        "policy_class": ActorCriticPolicy if plain_ppo else MaskableActorCriticPolicy,
        "observation_space": observation_space,
        "action_space": action_space,
        "lr_schedule": _constant(0.0),
        "learning_rate": 0.0,
        "clip_range": 0.2,
        "rollout_buffer_class": RolloutBuffer if plain_ppo else MaskableRolloutBuffer,
        "_last_obs": None,
        "_last_episode_starts": None,
        "_last_original_obs": None,
        "ep_info_buffer": collections.deque(maxlen=100),
        "ep_success_buffer": collections.deque(maxlen=100),
    }
    pickled = [k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v]
    unknown = [k for k in pickled if k not in replacements]
    if unknown:
        raise ValueError(f"{name} holds pickled entries this loader does not replace: {', '.join(unknown)}; "
                         "refusing to unpickle them")
    custom = {k: replacements[k] for k in pickled}
    if data.get("policy_kwargs") and not all(isinstance(v, (int, float, str, bool, list, dict, type(None)))
                                             for v in data["policy_kwargs"].values()):
        raise ValueError(f"{name} has policy_kwargs that are not plain values")
    return load_checked(PPO if plain_ppo else MaskablePPO, content if content is not None else name, name,
                        device="cpu", custom_objects=custom)
