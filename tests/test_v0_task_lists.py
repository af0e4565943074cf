"""Protocol v0 and the ids MultiTask-v0 and Model-v0 resolve the task lists they had when they were defined
(tests/golden/v0-tasks.json, written from the code before any operator beyond conv2d, dense and batch matmul
joined the suites): names, keys, order and weights, so their observations, layouts and shipped policies hold."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest

import schedule_gym  # noqa: F401  (registers the ids)
from schedule_gym.benchmark import get_protocol

GOLDEN = json.loads((Path(__file__).parent / "golden" / "v0-tasks.json").read_text())


def test_protocol_v0_trains_and_holds_out_its_v0_tasks():
    protocol = get_protocol("v0")
    assert [[t.name, t.key] for t in protocol.train_tasks()] == GOLDEN["protocol-v0/train"]
    assert [[t.name, t.key] for t in protocol.held_out_tasks()] == GOLDEN["protocol-v0/held_out"]
    assert protocol.layout().to_dict() == GOLDEN["protocol-v0/layout"]


def test_multitask_v0_draws_from_its_v0_tasks():
    env = gymnasium.make("schedule_gym/MultiTask-v0").unwrapped
    assert [[t.name, t.key] for t in env.tasks] == GOLDEN["MultiTask-v0"]


def test_model_v0_visits_its_v0_tasks_with_their_weights():
    env = gymnasium.make("schedule_gym/Model-v0").unwrapped
    assert [[t.name, t.key, int(w)] for t, w in zip(env.tasks, env.weights)] == GOLDEN["Model-v0"]


@pytest.mark.parametrize("env_id, kwarg", [("schedule_gym/MultiTask-v0", "tasks"), ("schedule_gym/Model-v0", "model")])
def test_the_operator_filter_is_a_plain_registered_kwarg_that_can_be_lifted(env_id, kwarg):
    spec = gymnasium.spec(env_id)
    assert spec.kwargs["operators"] == "conv2d,dense,batch_matmul"
    everything = gymnasium.make(env_id, operators=None).unwrapped
    filtered = gymnasium.make(env_id).unwrapped
    pools = {t.key for t in everything.tasks} - {t.key for t in filtered.tasks}
    assert pools and {t.key for t in filtered.tasks} < {t.key for t in everything.tasks}
    assert {key.split("{")[0] for key in pools} == {"pool2d"}
    with pytest.raises(ValueError, match=r"unknown operator 'conv3d'; known operators: gemm, conv2d"):
        gymnasium.make(env_id, operators="conv2d,conv3d")
