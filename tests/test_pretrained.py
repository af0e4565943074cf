"""Artefacts pretrained on a protocol's training split: Felix's cost models, the plain PPO policy."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from schedule_gym.agents.felix import FelixAgent, load_cost_model, save_cost_model
from schedule_gym.benchmark import get_protocol, run_protocol
from schedule_gym.benchmark.pretrained import check_training_tasks, pretrain_felix
from schedule_gym.envs import TilingEnv
from schedule_gym.spaces import TileSpace

LEADERBOARD = Path(__file__).resolve().parents[1] / "leaderboard"
FELIX_MODELS = [LEADERBOARD / f"v0-felix-cost-model-{op}.pt" for op in ("conv2d", "dense")]
SHIPPED_PPO = LEADERBOARD / "v0-ppo-8k.zip"
needs_felix_models = pytest.mark.skipif(not all(p.is_file() for p in FELIX_MODELS),
                                        reason="the pretrained v0 Felix models are not in this checkout")


class _CreatesFile:
    """Unpickling this calls ``open(path, "w")``: a file that would run code when loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# ------------------------------------------------------------------------------ the pretraining helper
def test_pretraining_refuses_a_held_out_task_even_renamed():
    protocol = get_protocol("v0")
    held = protocol.held_out_tasks()[0]
    with pytest.raises(ValueError, match=f"held-out tasks of protocol v0: {held.name}"):
        pretrain_felix("v0", tasks=[protocol.train_tasks()[0], held], n_samples=8, epochs=1, hidden_size=4)
    renamed = dataclasses.replace(held, name="not-held-out")
    with pytest.raises(ValueError, match=f"not-held-out \\(held-out task {held.name}\\)"):
        check_training_tasks(protocol, [renamed])
    assert check_training_tasks(protocol, protocol.train_tasks()) == protocol.train_tasks()


def test_pretraining_fits_one_model_per_operator_of_the_training_split():
    models = pretrain_felix("smoke", n_samples=16, epochs=1, hidden_size=4, seed=0)
    again = pretrain_felix("smoke", n_samples=16, epochs=1, hidden_size=4, seed=0)
    assert sorted(models) == ["gemm"]
    for key, value in models["gemm"].state_dict().items():
        assert torch.equal(value, again["gemm"].state_dict()[key])
    with pytest.raises(ValueError, match="no training task of protocol smoke has operator conv2d"):
        pretrain_felix("smoke", ops=["conv2d"], n_samples=16, epochs=1)
    with pytest.raises(TypeError, match="mock profile only"):
        pretrain_felix("smoke", backend="mock")


# ------------------------------------------------------------------------------ the shipped Felix models
@needs_felix_models
def test_the_shipped_felix_models_are_small_weights_only_files():
    for path in FELIX_MODELS:
        assert path.stat().st_size < 300_000
        data = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain containers only
        assert set(data) == {"format", "config", "state_dict"}
        load_cost_model(path)


@needs_felix_models
def test_the_shipped_felix_models_predict_finite_latencies_on_every_held_out_task():
    models = [load_cost_model(p) for p in FELIX_MODELS]
    rng = np.random.default_rng(0)
    for task in get_protocol("v0").held_out_tasks():
        fitting = []
        for model in models:
            try:
                fitting.append((model, model.featurizer(task)))
            except ValueError:
                continue
        assert fitting, f"no shipped model fits {task.name}"
        model, featurizer = fitting[0]
        space = TileSpace(task)
        with torch.no_grad():
            predicted = model(featurizer(featurizer.log_factors_of_indices(space, space.sample_indices(rng, 32))))
        assert predicted.shape == (32,) and bool(torch.isfinite(predicted).all()), task.name


@needs_felix_models
def test_felix_takes_a_list_of_models_and_uses_the_one_that_fits(tmp_path):
    tasks = {t.name: t for t in get_protocol("v0").held_out_tasks()}
    fast = {"n_seeds": 2, "n_steps": 3, "n_measure": 8, "train_steps": 2}
    agent = FelixAgent(seed=0, cost_model=[str(p) for p in FELIX_MODELS], **fast)
    assert agent.params()["cost_model"] == tuple(str(p) for p in FELIX_MODELS)
    for name in ("resnet18/fc", "mobilenetv2/conv1"):  # a dense layer and a depthwise convolution
        result = agent.run(TilingEnv(tasks[name], backend="mock"), 16)
        assert result.num_measurements == 16 and result.best_latency_s is not None
    only_dense = FelixAgent(seed=0, cost_model=[FELIX_MODELS[1]], **fast)
    with pytest.raises(ValueError, match="resnet18/conv2"):
        only_dense.run(TilingEnv(tasks["resnet18/conv2"], backend="mock"), 16)


def test_a_malicious_file_in_a_list_of_models_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad.pt"
    bad.write_bytes(pickle.dumps({"format": "x", "config": "{}", "state_dict": _CreatesFile(str(marker))}))
    good = tmp_path / "good.pt"
    save_cost_model(pretrain_felix("smoke", n_samples=16, epochs=1, hidden_size=4)["gemm"], good)
    with pytest.raises(ValueError, match="bad.pt"):
        FelixAgent(cost_model=[good, bad])
    assert not marker.exists()
    with pytest.raises(ValueError, match="at least one"):
        FelixAgent(cost_model=[])


# ------------------------------------------------------------------------------ plain PPO policies
def test_a_plain_ppo_policy_loads_as_ppo_without_unpickling_and_runs_unmasked(tmp_path, monkeypatch):
    import gymnasium as gym
    import stable_baselines3.common.save_util as save_util
    from stable_baselines3 import PPO

    from schedule_gym.benchmark import load_policy, policy_tuner

    protocol = get_protocol("smoke")
    env = gym.make("schedule_gym/MultiTask-v0", max_episode_steps=10, **protocol.env_kwargs("train"))
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=32)
    model.save(tmp_path / "ppo.zip")
    monkeypatch.setattr(save_util.cloudpickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    loaded = load_policy(tmp_path / "ppo.zip", protocol)
    assert type(loaded) is PPO and "Maskable" not in type(loaded.policy).__name__
    for key, value in model.policy.state_dict().items():
        assert torch.equal(loaded.policy.state_dict()[key], value)
    row = run_protocol(policy_tuner(tmp_path / "ppo.zip", protocol), protocol, "ppo")
    assert row["tasks"] == run_protocol(policy_tuner(loaded, protocol), protocol, "ppo")["tasks"]


@pytest.mark.skipif(not SHIPPED_PPO.is_file(), reason="the plain PPO v0 policy is not in this checkout")
def test_the_shipped_ppo_policy_loads_as_ppo_without_unpickling(monkeypatch):
    import stable_baselines3.common.save_util as save_util
    from stable_baselines3 import PPO

    from schedule_gym.benchmark import load_policy

    monkeypatch.setattr(save_util.cloudpickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    model = load_policy(SHIPPED_PPO, "v0")
    layout = get_protocol("v0").layout()
    assert type(model) is PPO and model.action_space.n == layout.max_actions
