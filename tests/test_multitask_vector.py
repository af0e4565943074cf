"""MultiTaskVectorEnv: trajectories equal N MultiTaskEnvs (SyncVectorEnv of MultiTask-v0), step by step."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.envs import MultiTaskVectorEnv
from schedule_gym.envs.features import N_NEST
from schedule_gym.envs.sb3_vec import SB3VecEnv

PROFILE = {"profile": "znver5-2core-fitted"}
TASKS = "resnet50/fc,bert-base/attn-pv,resnet18/conv3,mobilenetv2/conv2"


def _num(value: object) -> float:
    return math.nan if value is None else float(value)


def assert_same(vec: MultiTaskVectorEnv, ref: gym.vector.SyncVectorEnv, out: tuple, ref_out: tuple) -> None:
    *arrays, info = out
    *ref_arrays, ref_info = ref_out
    for got, want in zip(arrays, ref_arrays):
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(vec.action_masks(), np.stack([e.unwrapped.action_masks() for e in ref.envs]))
    present = ref_info["_latency_s"]
    np.testing.assert_array_equal(info["_latency_s"], present)
    for i in np.flatnonzero(present):
        assert vec.tasks[info["task"][i]].name == ref_info["task"][i]
        np.testing.assert_array_equal(info["latency_s"][i], _num(ref_info["latency_s"][i]))
        np.testing.assert_array_equal(info["best_latency_s"][i], _num(ref_info["best_latency_s"][i]))
        np.testing.assert_array_equal(info["action_mask"][i], ref_info["action_mask"][i])
        for key in ("legal", "new_measurement", "num_measurements", "budget_exhausted"):
            assert info[key][i] == ref_info[key][i], (key, i)
    if "final_obs" in ref_info:
        for i in np.flatnonzero(ref_info["_final_obs"]):
            np.testing.assert_array_equal(info["final_obs"][i], ref_info["final_obs"][i])
    else:
        assert "final_obs" not in info


def run_pair(num_envs: int, steps: int, seed: int, masked: bool, autoreset=AutoresetMode.NEXT_STEP, **kwargs) -> None:
    kwargs = {"tasks": TASKS, "backend_options": PROFILE, **kwargs}
    vec = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=num_envs, autoreset_mode=autoreset, **kwargs)
    assert isinstance(vec, MultiTaskVectorEnv)
    ref = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=num_envs, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": autoreset}, **kwargs)
    rng = np.random.default_rng(seed)
    assert_same(vec, ref, vec.reset(seed=seed), ref.reset(seed=seed))
    ends = 0
    for _ in range(steps):
        if masked:
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in vec.action_masks()])
        else:
            actions = rng.integers(vec.single_action_space.n, size=num_envs)
        out, ref_out = vec.step(actions), ref.step(actions)
        assert_same(vec, ref, out, ref_out)
        ends += int(np.sum(out[3]))
    assert ends > 0  # episodes ended and restarted on newly drawn tasks
    vec.close()
    ref.close()


@pytest.mark.parametrize("reward", ["log_speedup_prev", "inverse", "best_improvement:0.01"])
@pytest.mark.parametrize("start", ["s0", "random"])
def test_trajectories_equal_multitask_envs(reward: str, start: str) -> None:
    run_pair(4, 260, seed=1, masked=True, reward=reward, start=start)


@pytest.mark.parametrize("reward", ["log_speedup_prev", "inverse"])
def test_per_task_reward_scales_equal_between_single_and_vector(reward: str) -> None:
    run_pair(4, 150, seed=6, masked=True, reward=reward, reward_scale="task")


def test_per_task_scale_makes_the_optimum_worth_one() -> None:
    from schedule_gym.envs import TilingEnv

    plain = TilingEnv("bert-base/attn-pv", backend_options=PROFILE, reward="log_speedup_s0")
    scaled = TilingEnv("bert-base/attn-pv", backend_options=PROFILE, reward="log_speedup_s0", reward_scale="task")
    plain.reset(seed=0)
    scaled.reset(seed=0)
    action = int(np.flatnonzero(plain.action_masks())[0])
    r_plain, r_scaled = plain.step(action)[1], scaled.step(action)[1]
    scale = scaled._reward_scale
    assert scale > 1.0 and r_scaled == pytest.approx(r_plain / scale)
    with pytest.raises(ValueError, match="reward_scale must be one of"):
        TilingEnv("gemm-64", reward_scale="global")


def test_unmasked_actions_budgets_and_same_step_autoreset() -> None:
    run_pair(3, 150, seed=2, masked=False, budget_measurements=7, max_episode_steps=40)
    run_pair(5, 150, seed=3, masked=True, autoreset=AutoresetMode.SAME_STEP, budget_measurements=5,
             reward="log_speedup_s0")


def test_reset_options_pick_the_task_and_bad_ones_are_named() -> None:
    envs = MultiTaskVectorEnv(3, tasks=TASKS, backend_options=PROFILE)
    _, info = envs.reset(seed=0, options={"task": "bert-base/attn-pv"})
    assert [envs.tasks[t].name for t in info["task"]] == ["bert-base/attn-pv"] * 3
    with pytest.raises(ValueError, match="must be one of this environment's tasks"):
        envs.reset(options={"task": "resnet50/conv0"})
    with pytest.raises(ValueError, match=r"unknown reset options \['keep_session'\]"):
        envs.reset(options={"keep_session": True})
    n = int(envs.single_action_space.n)
    with pytest.raises(ValueError, match=rf"action {n} is out of range \[0, {n}\)"):
        envs.step(np.array([0, 0, n]))


def test_tasks_given_as_plain_data_are_the_same_tasks() -> None:
    """JSON environment arguments (an RLlib env_config, --env-kwargs) give tasks as Task.to_dict() dicts."""
    from schedule_gym.envs.multitask_env import resolve_tasks

    tasks = resolve_tasks(TASKS)
    assert resolve_tasks([t.to_dict() for t in tasks]) == tasks
    envs = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=2, tasks=[t.to_dict() for t in tasks],
                        backend_options=PROFILE)
    assert envs.tasks == tasks
    with pytest.raises(TypeError, match="a task is a Task, a task name, a suite name or a task's dict, got 3"):
        resolve_tasks([3])


def test_sb3_adapter_trains_on_the_multitask_vector_env() -> None:
    from sb3_contrib import MaskablePPO

    envs = SB3VecEnv.make("schedule_gym/MultiTask-v0", num_envs=8, tasks=TASKS, backend_options=PROFILE)
    model = MaskablePPO("MlpPolicy", envs, n_steps=16, batch_size=64, n_epochs=1, seed=0).learn(256)
    assert model.num_timesteps >= 256


@pytest.mark.parametrize("reward", ["best_improvement", "log_speedup_prev"])
def test_feature_observations_equal_between_single_and_vector(reward: str) -> None:
    """The "features" space (nest features, search state, measured neighbours) is computed by the same code for one
    config and for a batch: single and vector environments observe the same numbers, in session episodes too."""
    run_pair(3, 120, seed=5, masked=True, observation="features", reward=reward, episode="session",
             budget_measurements=6)


def test_features_of_a_mixed_batch_are_each_configs_own() -> None:
    """Tasks of one signature share a pass over their configs (FeatureTables.config_part): every row must be what its
    task's config gives alone, whatever else is in the batch and in whatever order."""
    from schedule_gym.backends.mock.backend import MockBackend
    from schedule_gym.envs.features import FeatureTables, machine_profile
    from schedule_gym.envs.multitask_env import resolve_tasks
    from schedule_gym.envs.observations import TaskLayout
    from schedule_gym.spaces import TileSpace

    tasks = resolve_tasks("resnet50/conv1,resnet50/conv2,resnet50/conv4,resnet50/conv5,bert-base/attn-pv,resnet50/fc")
    spaces = [TileSpace(t) for t in tasks]
    tables = FeatureTables(spaces, TaskLayout.of_tasks(tasks), machine_profile(MockBackend(**PROFILE)))
    assert len(set(tables._group.tolist())) < len(tasks)  # some tasks share a pass
    rng = np.random.default_rng(0)
    which = rng.integers(len(tasks), size=200)
    indices = np.array([rng.integers(spaces[t].size) for t in which])
    rows = np.zeros((200, max(len(s.dims) for s in spaces)), dtype=np.int64)
    for i, (t, index) in enumerate(zip(which, indices)):
        got = spaces[t].rows_of_index(int(index))
        rows[i, : len(got)] = got
    batch = tables.config_part(which, rows)
    for i in range(200):
        alone = tables.config_part(which[i: i + 1], rows[i: i + 1])
        np.testing.assert_array_equal(batch[i], alone[0])
        # and what the task's own nest computes from the config's index alone (no stacking, no grouping)
        np.testing.assert_array_equal(batch[i, tables.layout.size:], tables._nests[which[i]].config_part(indices[i: i + 1])[0])


def test_tiling_vector_env_features_equal_tiling_envs() -> None:
    kwargs = {"task": "resnet50/conv6", "backend_options": PROFILE, "observation": "features",
              "budget_measurements": 15, "start": "random"}
    vec = gym.make_vec("schedule_gym/Tiling-v0", num_envs=3, **kwargs)
    ref = gym.make_vec("schedule_gym/Tiling-v0", num_envs=3, vectorization_mode="sync", **kwargs)
    rng = np.random.default_rng(0)
    out, ref_out = vec.reset(seed=1), ref.reset(seed=1)
    np.testing.assert_array_equal(out[0], ref_out[0])
    for _ in range(80):
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in vec.action_masks()])
        out, ref_out = vec.step(actions), ref.step(actions)
        for got, want in zip(out[:4], ref_out[:4]):
            np.testing.assert_array_equal(got, want)
    assert vec.single_observation_space.shape == ref.single_observation_space.shape


def test_move_features_equal_between_single_and_vector():
    run_pair(3, 120, seed=7, masked=True, observation="move_features", reward="best_improvement", episode="session",
             budget_measurements=6)


def test_each_moves_features_are_those_of_the_config_it_leads_to():
    """Entry a of the move part is the nest part of the "features" observation of a's destination; 0 if a is illegal."""
    kwargs = {"tasks": TASKS, "backend_options": PROFILE, "start": "random"}
    moves = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=6, observation="move_features", **kwargs)
    plain = gym.make_vec("schedule_gym/MultiTask-v0", num_envs=6, observation="features", **kwargs)
    obs, info = moves.reset(seed=2)
    plain_obs, _ = plain.reset(seed=2)
    core = moves.core
    features = core.features
    A = moves.single_action_space.n
    assert obs.shape == (6, plain_obs.shape[1] + A * N_NEST)
    np.testing.assert_array_equal(obs[:, : plain_obs.shape[1]], plain_obs)
    nest = slice(features.config_size - N_NEST, features.config_size)
    for e in range(6):
        space = core.spaces[core.task[e]]
        part = obs[e, plain_obs.shape[1]:].reshape(A, N_NEST)
        legal = info["action_mask"][e]
        assert legal.any() and not part[~legal].any()
        for a in np.flatnonzero(legal).tolist():
            to = space.step_rows(space.rows_of_index(int(core.index[e])), a)
            rows = np.zeros((1, core.rows.shape[1]), dtype=np.int64)
            rows[0, : len(to)] = to
            want = features.config_part(core.task[e: e + 1], rows)[0, nest]
            np.testing.assert_array_equal(part[a], want)
    moves.close()
    plain.close()


def _run_schedule_pair(num_envs: int, steps: int, seed: int, masked: bool, autoreset=AutoresetMode.NEXT_STEP,
                       **kwargs) -> None:
    from schedule_gym.envs.schedule_vector import ScheduleVectorEnv

    kwargs = {"backend_options": PROFILE, **kwargs}
    vec = gym.make_vec("schedule_gym/Schedule-v0", num_envs=num_envs, autoreset_mode=autoreset, **kwargs)
    assert isinstance(vec, ScheduleVectorEnv)
    ref = gym.make_vec("schedule_gym/Schedule-v0", num_envs=num_envs, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": autoreset}, **kwargs)
    rng = np.random.default_rng(seed)
    out, ref_out = vec.reset(seed=seed), ref.reset(seed=seed)
    ends = 0
    for step in range(steps + 1):
        *arrays, info = out
        *ref_arrays, ref_info = ref_out
        for got, want in zip(arrays, ref_arrays):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(vec.action_masks(), np.stack([e.unwrapped.action_masks() for e in ref.envs]))
        assert vec.configs() == [e.unwrapped.schedule for e in ref.envs]
        for i in np.flatnonzero(ref_info["_latency_s"]):
            np.testing.assert_array_equal(info["latency_s"][i], _num(ref_info["latency_s"][i]))
            np.testing.assert_array_equal(info["best_latency_s"][i], _num(ref_info["best_latency_s"][i]))
            for key in ("legal", "new_measurement", "num_measurements", "budget_exhausted"):
                assert info[key][i] == ref_info[key][i], (key, i, step)
        if step == steps:
            break
        if masked:
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in vec.action_masks()])
        else:
            actions = rng.integers(vec.single_action_space.n, size=num_envs)
        out, ref_out = vec.step(actions), ref.step(actions)
        ends += int(np.sum(out[3]))
    assert ends > 0


@pytest.mark.parametrize("reward", ["inverse", "log_speedup_prev", "best_improvement:0.02"])
def test_schedule_vector_env_equals_schedule_envs(reward: str) -> None:
    _run_schedule_pair(3, 140, seed=2, masked=True, task="gemm-64", reward=reward, start="random",
                       max_episode_steps=30)


def test_schedule_vector_env_on_a_convolution_with_budgets_and_same_step_autoreset() -> None:
    _run_schedule_pair(3, 120, seed=4, masked=False, task="resnet50/conv6", budget_measurements=9)
    _run_schedule_pair(2, 80, seed=5, masked=True, autoreset=AutoresetMode.SAME_STEP, task="gemm-64",
                       episode="session", budget_measurements=6, reward="log_speedup_s0")


@pytest.mark.parametrize("kwargs", [{"observation": "log2"}, {"include_shape": True}])
def test_multitask_environments_refuse_observations_their_layout_cannot_hold(kwargs) -> None:
    from schedule_gym.envs import MultiTaskEnv

    for make in (lambda: MultiTaskEnv(tasks=TASKS, **kwargs), lambda: MultiTaskVectorEnv(2, tasks=TASKS, **kwargs)):
        with pytest.raises(ValueError, match="multi-task environments observe observation='fraction'"):
            make()
