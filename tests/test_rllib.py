"""RLlib on the environment (schedule_gym.baselines.rllib_masking, examples/ray_rllib_ppo.py): the Dict
observation carries exactly the environment's observation and mask, the masking RLModule gives illegal actions
probability 0, and PPO trains through RLlib's vectorisation of the native vector environment on a local Ray
instance. Skipped without RLlib (``pip install -c constraints.txt -e '.[rllib]'``; ``make test-ray``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ray.rllib", reason="RLlib is an optional extra: pip install 'schedule-gym[rllib]' (make test-ray)")

import ray  # noqa: E402
import torch  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig  # noqa: E402
from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # noqa: E402

from schedule_gym.baselines.rllib_masking import (  # noqa: E402
    ActionMaskObservation, ActionMaskVectorObservation, MaskedPPOTorchRLModule, rllib_env_creator,
)
from schedule_gym.envs import TilingEnv  # noqa: E402
from schedule_gym.envs.vector_env import MultiTaskVectorEnv, TilingVectorEnv  # noqa: E402

GEMM = {"m": 256, "k": 256, "n": 256}

pytestmark = pytest.mark.filterwarnings(
    # each RLlib env runner registers its creator as this Gymnasium id; a second algorithm in one process warns
    "ignore:.*Overriding environment rllib-single-agent-env-v0 already in registry:UserWarning"
)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    try:
        import ray_rllib_ppo
    finally:
        sys.path.pop(0)
    return ray_rllib_ppo


# ------------------------------------------------------------------------------- Dict observation
def test_the_dict_observation_is_the_base_environments_observation_and_mask() -> None:
    base = gym.make("schedule_gym/Gemm-v0", max_episode_steps=20, **GEMM)
    masked = ActionMaskObservation(gym.make("schedule_gym/Gemm-v0", max_episode_steps=20, **GEMM))
    assert masked.observation_space == gym.spaces.Dict({
        "action_mask": gym.spaces.Box(0.0, 1.0, (26,), np.float32), "observations": base.observation_space})
    rng = np.random.default_rng(0)
    (obs, info), (base_obs, base_info) = masked.reset(seed=3), base.reset(seed=3)
    illegal = 0
    for _ in range(50):  # two episodes and a half: resets included
        assert masked.observation_space.contains(obs)
        np.testing.assert_array_equal(obs["observations"], base_obs)
        np.testing.assert_array_equal(obs["action_mask"], base.unwrapped.action_masks().astype(np.float32))
        np.testing.assert_array_equal(obs["action_mask"], base_info["action_mask"])
        action = int(rng.integers(26))
        illegal += not obs["action_mask"][action]
        obs, reward, terminated, truncated, info = masked.step(action)
        base_obs, base_reward, base_terminated, base_truncated, base_info = base.step(action)
        assert (reward, terminated, truncated, info["config"]) == (base_reward, base_terminated, base_truncated,
                                                                   base_info["config"])
        if truncated:
            (obs, info), (base_obs, base_info) = masked.reset(), base.reset()
    assert illegal > 0  # the walk took illegal actions, so masks of both kinds were compared


def test_the_vector_dict_observation_is_the_native_vector_environments_observation_and_masks() -> None:
    kwargs = dict(num_envs=3, vectorization_mode="vector_entry_point", max_episode_steps=7, **GEMM)
    base = gym.make_vec("schedule_gym/Gemm-v0", **kwargs)
    masked = ActionMaskVectorObservation(gym.make_vec("schedule_gym/Gemm-v0", **kwargs))
    assert masked.single_observation_space["observations"] == base.single_observation_space
    rng = np.random.default_rng(1)
    (obs, _), (base_obs, _) = masked.reset(seed=5), base.reset(seed=5)
    illegal = 0
    for _ in range(20):  # autoresets (NEXT_STEP) after steps 7 and 15
        assert masked.observation_space.contains(obs)
        np.testing.assert_array_equal(obs["observations"], base_obs)
        np.testing.assert_array_equal(obs["action_mask"], base.unwrapped.action_masks().astype(np.float32))
        actions = rng.integers(26, size=3)
        obs, rewards, _, _, info = masked.step(actions)
        base_obs, base_rewards, _, _, base_info = base.step(actions)
        np.testing.assert_array_equal(rewards, base_rewards)
        np.testing.assert_array_equal(obs["action_mask"], base_info["action_mask"])
        illegal += int((~info["legal"]).sum())
    assert illegal > 0


def test_the_wrappers_refuse_what_they_cannot_mask() -> None:
    with pytest.raises(TypeError, match="no action_masks"):
        ActionMaskObservation(gym.make("CartPole-v1"))
    same_step = gym.make_vec("schedule_gym/Gemm-v0", num_envs=2, vectorization_mode="vector_entry_point",
                             autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, **GEMM)
    with pytest.raises(ValueError, match="needs autoreset_mode NEXT_STEP"):
        ActionMaskVectorObservation(same_step)


def test_the_creator_gives_the_native_vector_environment_when_rllib_asks_for_num_envs() -> None:
    config = {"id": "schedule_gym/Gemm-v0", **GEMM}
    vector = rllib_env_creator({**config, "num_envs": 4})
    assert isinstance(vector, ActionMaskVectorObservation) and isinstance(vector.unwrapped, TilingVectorEnv)
    assert vector.num_envs == 4
    single = rllib_env_creator(config)
    assert isinstance(single, ActionMaskObservation) and isinstance(single.unwrapped, TilingEnv)
    plain = rllib_env_creator({**config, "mask": False, "num_envs": 2})
    assert type(plain) is TilingVectorEnv


# ------------------------------------------------------------------------------------ RLModule
def test_the_masked_module_gives_illegal_actions_probability_zero() -> None:
    env = ActionMaskObservation(gym.make("schedule_gym/Gemm-v0", **GEMM))
    torch.manual_seed(0)
    module = RLModuleSpec(module_class=MaskedPPOTorchRLModule, observation_space=env.observation_space,
                          action_space=env.action_space, model_config=DefaultModelConfig()).build()
    rng = np.random.default_rng(0)
    observations = torch.from_numpy(rng.random((64, 10), dtype=np.float32))
    masks = rng.random((64, 26)) < 0.3
    masks[np.arange(64), rng.integers(26, size=64)] = True  # at least one legal action a row
    masks[0] = False
    masks[0, 25] = True  # one row with a single legal action
    mask_t = torch.from_numpy(masks.astype(np.float32))

    def batch(mask: torch.Tensor) -> dict:  # a new dict each call: the module pops the mask out of it
        return {Columns.OBS: {"action_mask": mask.clone(), "observations": observations.clone()}}

    with torch.no_grad():
        logits = module.forward_exploration(batch(mask_t))[Columns.ACTION_DIST_INPUTS]
        unmasked = module.forward_exploration(batch(torch.ones_like(mask_t)))[Columns.ACTION_DIST_INPUTS]
        greedy = module.forward_inference(batch(mask_t))[Columns.ACTION_DIST_INPUTS]
    np.testing.assert_array_equal(logits.numpy()[masks], unmasked.numpy()[masks])  # legal logits untouched
    assert (logits.numpy()[~masks] < -1e38).all()
    probs = torch.softmax(logits, dim=-1).numpy()
    assert (probs[~masks] == 0).all() and probs[0, 25] == 1
    dist = module.get_exploration_action_dist_cls().from_logits(logits)
    samples = torch.stack([dist.sample() for _ in range(200)]).numpy()  # (200, 64)
    assert masks[np.arange(64), samples].all()
    assert masks[np.arange(64), greedy.argmax(-1).numpy()].all()


# ------------------------------------------------------------------------------- PPO on Ray
def _args(example, **kwargs):
    return example.Args(iterations=1, num_envs=2, train_batch_size=200, minibatch_size=100, num_epochs=1,
                        max_episode_steps=25, **kwargs)


def _one_iteration(example, args) -> tuple[dict, type]:
    algo = example.build(args)
    try:
        env = algo.env_runner.env
        return algo.train(), type(env.unwrapped)
    finally:
        algo.stop()


def test_masked_ppo_trains_through_the_native_vector_env_and_takes_no_illegal_action(local_ray, example) -> None:
    """And its episodes are those of RLlib's own (sync) vectorisation of single environments."""
    native, native_type = _one_iteration(example, _args(example))
    assert native_type is TilingVectorEnv
    runners = native["env_runners"]
    assert native["training_iteration"] == 1
    assert runners["num_env_steps_sampled"] == runners["num_actions"] == 200
    assert runners["num_illegal_actions"] == 0
    assert runners["num_episodes_ended"] == 8  # 2 environments x 100 steps / 25 steps an episode
    assert np.isfinite(native["learners"]["default_policy"]["total_loss"])
    sync, sync_type = _one_iteration(example, _args(example, vectorize="sync"))
    assert sync_type is gym.vector.SyncVectorEnv
    summary = example.summary(native)
    assert summary == example.summary(sync) and summary["illegal_fraction"] == 0


def test_plain_ppo_takes_illegal_actions_through_the_native_vector_env(local_ray, example) -> None:
    result, env_type = _one_iteration(example, _args(example, mask=False))
    assert env_type is TilingVectorEnv
    assert 0 < result["env_runners"]["num_illegal_actions"] < 200


def test_masked_ppo_trains_on_a_protocols_split_through_the_multitask_vector_env(local_ray, example) -> None:
    """--protocol: MultiTask-v0's native vector environment on the training split, masked throughout."""
    result, env_type = _one_iteration(example, _args(example, protocol="smoke"))
    assert env_type is MultiTaskVectorEnv
    runners = result["env_runners"]
    assert runners["num_env_steps_sampled"] == runners["num_actions"] == 200
    assert runners["num_illegal_actions"] == 0
    assert runners["num_episodes_ended"] == 8
    assert np.isfinite(result["learners"]["default_policy"]["total_loss"])


@pytest.mark.parametrize(("values", "message"), [
    ({"env_kwargs": "[1]"}, "--env-kwargs must be a JSON object, got '[1]'"),
    ({"env_kwargs": "{m: 1}"}, "--env-kwargs must be a JSON object, got '{m: 1}'"),
    ({"protocol": "v9"}, "unknown protocol 'v9'"),
])
def test_bad_environment_arguments_are_named(example, values, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        example.env_config(example.Args(**values))


def test_a_protocol_sets_the_multitask_environment_of_its_training_split(example) -> None:
    config = example.env_config(example.Args(protocol="smoke", env_kwargs='{"observation": "features"}'))
    assert config["id"] == "schedule_gym/MultiTask-v0" and config["observation"] == "features"
    assert [t["name"] for t in config["tasks"]] == ["smoke-train-32", "smoke-train-64x16x64"]
