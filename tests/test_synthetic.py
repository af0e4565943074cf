"""Synthetic training layers (schedule_gym.benchmark.synthetic): new computations only, none held out."""

from __future__ import annotations

import pytest

from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.protocol import computation_key
from schedule_gym.benchmark.synthetic import synthetic_layers
from schedule_gym.envs.multitask_env import resolve_tasks


def test_synthetic_layers_are_new_computations_in_the_protocols_layout():
    protocol = get_protocol("v1")
    names = synthetic_layers(protocol, 40, seed=3, depthwise=0.5)
    tasks = resolve_tasks(names)
    keys = [computation_key(t) for t in tasks]
    assert len(names) == 40 and len(set(keys)) == 40
    taken = {computation_key(t) for split in ("train", "held_out", "validation") for t in protocol.split_tasks(split)}
    assert not taken & set(keys)
    layout = protocol.layout()
    assert all(layout.fits(t) for t in tasks)
    assert synthetic_layers(protocol, 40, seed=3, depthwise=0.5) == names  # the seed fixes the draw


def test_the_depthwise_share_draws_one_group_per_channel():
    depthwise = [t for t in resolve_tasks(synthetic_layers("v1", 30, depthwise=1.0))]
    assert len(depthwise) == 30
    for task in depthwise:
        extents = {d.name: d.extent for d in task.dims}
        assert dict(task.params)["groups"] == extents["co"] > 1 and extents["rc"] == 1, task.name
    assert not any("-g" in name for name in synthetic_layers("v1", 30, depthwise=0.0))


def test_bad_requests_are_refused_by_name():
    with pytest.raises(ValueError, match="count must be a non-negative integer, got -1"):
        synthetic_layers("v1", -1)
    with pytest.raises(ValueError, match=r"depthwise must be a share in \[0, 1\], got 1.5"):
        synthetic_layers("v1", 3, depthwise=1.5)
    with pytest.raises(ValueError, match="drew only 0 of 2 synthetic layers"):
        synthetic_layers("smoke", 2)  # the smoke protocol's layout fits small GEMMs only
