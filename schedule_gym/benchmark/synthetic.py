"""Synthetic training layers: random shapes added to a protocol's training split, none of them held out.

A learner trained on a protocol's training split alone sees only the operators of its networks: v1's
(ResNet-50 and BERT-base) hold no depthwise convolution, so a policy meets its first one on the held-out
split. :func:`synthetic_layers` draws extra training tasks of random shapes, Procgen-style, with a fixed seed:
convolutions (3x3 or 1x1, stride 1 or 2), depthwise convolutions (3x3 or 5x5, stride 1 or 2, one group per
channel), dense layers and attention-score batch matmuls. A drawn layer is kept only if its computation
(:func:`~schedule_gym.benchmark.protocol.computation_key`) is in neither the protocol's held-out nor its
validation split, is not a training task's or an earlier draw's, and fits the protocol's layout: the split's
leak check (:func:`~schedule_gym.benchmark.pretrained.check_artefact`) passes for anything trained on them.
"""

from __future__ import annotations

import numpy as np

from schedule_gym.benchmark.protocol import Protocol, computation_key, get_protocol
from schedule_gym.envs.multitask_env import resolve_tasks
from schedule_gym.spaces import TileSpace

__all__ = ["CHANNELS", "DEPTHWISE_CHANNELS", "synthetic_layers"]

#: channel counts of the convolutions and dense sizes drawn
CHANNELS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: channel counts of the depthwise convolutions (those of MobileNet- and EfficientNet-style inverted bottlenecks)
DEPTHWISE_CHANNELS = (16, 24, 32, 48, 64, 96, 120, 144, 192, 240, 288, 384, 480, 576, 672, 720, 960, 1152)


def synthetic_layers(protocol: str | Protocol, count: int, seed: int = 0, depthwise: float = 0.0,
                     max_space: int | None = None) -> list[str]:
    """``count`` task names of random shapes drawn with ``seed``: a share ``depthwise`` of depthwise convolutions,
    the rest 60% convolutions, 25% dense layers and 15% batch matmuls (with ``depthwise=0`` the draws of
    earlier releases, which had no depthwise kind). ``max_space``: keep only layers whose tile space has at most
    that many configs (a learner that scores whole tables pays for every config). See the module docstring for
    what else is kept."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    if not 0.0 <= depthwise <= 1.0:
        raise ValueError(f"depthwise must be a share in [0, 1], got {depthwise!r}")
    if max_space is not None and (isinstance(max_space, bool) or not isinstance(max_space, int) or max_space < 1):
        raise ValueError(f"max_space must be a positive integer or None, got {max_space!r}")
    protocol = get_protocol(protocol)
    layout = protocol.layout()
    avoid = {computation_key(t) for t in protocol.held_out_tasks() + protocol.validation_tasks()}
    known = {computation_key(t) for t in protocol.train_tasks()}
    rng = np.random.default_rng(seed)
    names: list[str] = []
    for _ in range(1000 * count):
        if len(names) == count:
            break
        if depthwise and rng.random() < depthwise:
            hw, k, s = int(rng.choice([7, 14, 28, 56, 112])), int(rng.choice([3, 5])), int(rng.choice([1, 1, 2]))
            c = int(rng.choice(DEPTHWISE_CHANNELS))
            name = f"conv2d-1x{hw}x{hw}x{c}-{c}-k{k}-s{s}-p{k // 2}-g{c}"
        else:
            u = rng.random()
            if u < 0.6:
                hw, k, s = int(rng.choice([7, 14, 28, 56, 112])), int(rng.choice([1, 3])), int(rng.choice([1, 1, 2]))
                ci, co = (int(rng.choice(CHANNELS)) for _ in range(2))
                if hw * hw * ci * co * k * k > 2**31:
                    continue
                name = f"conv2d-1x{hw}x{hw}x{ci}-{co}-k{k}-s{s}-p{k // 2}"
            elif u < 0.85:
                m = int(rng.choice([1, 16, 32, 64, 128, 256, 512]))
                k, n = (int(rng.choice([256, 512, 768, 1024, 1536, 2048, 3072, 4096])) for _ in range(2))
                name = f"dense-{m}x{k}x{n}"
            else:
                b = int(rng.choice([2, 4, 8, 12, 16]))
                m, n = (int(rng.choice([64, 128, 256, 384, 512])) for _ in range(2))
                k = int(rng.choice([32, 64, 128]))
                name = f"bmmNT-{b}x{m}x{k}x{n}"
        task = resolve_tasks([name])[0]
        key = computation_key(task)
        if key in avoid or key in known or not layout.fits(task):
            continue
        if max_space is not None and TileSpace(task).size > max_space:
            continue
        known.add(key)
        names.append(name)
    if len(names) < count:
        raise ValueError(f"drew only {len(names)} of {count} synthetic layers that are new and fit protocol "
                         f"{protocol.name}'s layout; ask for fewer")
    return names
