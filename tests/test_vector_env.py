"""TilingVectorEnv: trajectories equal N TilingEnvs (SyncVectorEnv of the registered env), checks, errors."""

from __future__ import annotations

import functools
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.backends import LatencyBackend, MeasureResult, MissingRecordError, MockBackend, ReplayBackend
from schedule_gym.data import get_table
from schedule_gym.envs import TilingEnv, TilingVectorEnv, core
from schedule_gym.records import RecordStore
from schedule_gym.registration import ENV_IDS
from schedule_gym.tasks import Task, gemm

SMALL_GEMM = dict(m=64, k=64, n=64)  # 100 x 7 x 100 configs: episodes revisit configs, budgets bind


def _expected(value: object) -> float:
    return math.nan if value is None else float(value)


def assert_same_step(vec: TilingVectorEnv, ref: SyncVectorEnv, out: tuple, ref_out: tuple) -> None:
    """One vector step (or reset) against SyncVectorEnv's: observations, rewards, flags, masks, infos."""
    *arrays, info = out
    *ref_arrays, ref_info = ref_out
    for got, want in zip(arrays, ref_arrays):
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)
    masks = np.stack([e.unwrapped.action_masks() for e in ref.envs])
    np.testing.assert_array_equal(vec.action_masks(), masks)
    assert vec.configs() == [e.unwrapped.config for e in ref.envs]
    present = ref_info["_latency_s"]
    np.testing.assert_array_equal(info["_latency_s"], present)
    for i in np.flatnonzero(present):
        assert info["index"][i] == vec.space.index(ref_info["config"][i])
        np.testing.assert_array_equal(info["latency_s"][i], _expected(ref_info["latency_s"][i]))
        np.testing.assert_array_equal(info["best_latency_s"][i], _expected(ref_info["best_latency_s"][i]))
        np.testing.assert_array_equal(info["action_mask"][i], ref_info["action_mask"][i])
        for key in ("legal", "new_measurement", "num_measurements", "budget_exhausted"):
            assert info[key][i] == ref_info[key][i], (key, i)
    if "final_obs" in ref_info:
        np.testing.assert_array_equal(info["_final_obs"], ref_info["_final_obs"])
        for i in np.flatnonzero(ref_info["_final_obs"]):
            np.testing.assert_array_equal(info["final_obs"][i], ref_info["final_obs"][i])
            np.testing.assert_array_equal(info["final_info"]["latency_s"][i],
                                          _expected(ref_info["final_info"]["latency_s"][i]))
    else:
        assert "final_obs" not in info


def run_pair(vec: TilingVectorEnv, ref: SyncVectorEnv, steps: int, seed: int, masked: bool) -> None:
    """Step both with the same random actions (legal ones if ``masked``) and compare every step."""
    rng = np.random.default_rng(seed)
    assert_same_step(vec, ref, vec.reset(seed=seed), ref.reset(seed=seed))
    ends = 0
    for _ in range(steps):
        if masked:
            masks = vec.action_masks()
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        else:
            actions = rng.integers(vec.single_action_space.n, size=vec.num_envs)
        out, ref_out = vec.step(actions), ref.step(actions)
        assert_same_step(vec, ref, out, ref_out)
        ends += int(np.sum(out[3]))
    assert ends > 0  # the run went through autoresets


def make_pair(env_id: str, num_envs: int, autoreset: AutoresetMode = AutoresetMode.NEXT_STEP, /, **kwargs):
    vec = gym.make_vec(env_id, num_envs=num_envs, autoreset_mode=autoreset, **kwargs)
    assert isinstance(vec, TilingVectorEnv)
    ref = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", vector_kwargs={"autoreset_mode": autoreset},
                       **kwargs)
    return vec, ref


@functools.lru_cache(maxsize=1)
def gemm_table() -> tuple[Task, ReplayBackend]:
    """GemmTable-v0's task and records, read once (reading the table takes seconds) and shared."""
    entry = get_table("gemm-128-323-znver5-1t")
    return entry.task, ReplayBackend(str(entry.path))


def backend_pair(backend: str, num_envs: int, autoreset: AutoresetMode = AutoresetMode.NEXT_STEP, /,
                 max_episode_steps: int = 100, **kwargs):
    """The vector env and SyncVectorEnv of TimeLimit(TilingEnv) on the mock (through make_vec) or the shipped
    GEMM table (one ReplayBackend shared by all; GemmTable-v0 itself is checked in test_make_vec_...)."""
    if backend == "mock":
        return make_pair("schedule_gym/Gemm-v0", num_envs, autoreset, max_episode_steps=max_episode_steps,
                         **SMALL_GEMM, **kwargs)
    task, replay = gemm_table()
    vec = TilingVectorEnv(num_envs, task=task, backend=replay, max_episode_steps=max_episode_steps,
                          autoreset_mode=autoreset, **kwargs)
    ref = SyncVectorEnv([lambda: gym.wrappers.TimeLimit(TilingEnv(task, backend=replay, **kwargs), max_episode_steps)
                         for _ in range(num_envs)], autoreset_mode=autoreset)
    return vec, ref


BACKENDS = ("mock", "table")


@pytest.mark.parametrize("reward", ["inverse", "log_speedup_prev", "log_speedup_s0"])
@pytest.mark.parametrize("start", ["s0", "random"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("masked", [True, False])
def test_trajectories_equal_tiling_envs(reward: str, start: str, backend: str, masked: bool) -> None:
    vec, ref = backend_pair(backend, 4, reward=reward, start=start, max_episode_steps=9)
    run_pair(vec, ref, 40, seed=3, masked=masked)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reward", ["inverse", "log_speedup_prev"])
def test_same_step_autoreset_and_budget(backend: str, reward: str) -> None:
    vec, ref = backend_pair(backend, 5, AutoresetMode.SAME_STEP, reward=reward, start="random", max_episode_steps=6,
                            budget_measurements=7)
    assert vec.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    run_pair(vec, ref, 40, seed=11, masked=False)
    assert (vec.num_measurements == 7).all()  # sessions outlive autoresets: the budget binds


@pytest.mark.parametrize("kwargs", [dict(budget_fraction=0.002, start="random"), dict(reward_ref_latency_s=1e-3)])
def test_budget_fraction_and_fixed_reference(kwargs: dict) -> None:
    vec, ref = make_pair("schedule_gym/Gemm-v0", 3, reward="log_speedup_s0", max_episode_steps=8, **SMALL_GEMM,
                         **kwargs)
    run_pair(vec, ref, 30, seed=5, masked=True)


def test_reset_mask_seed_list_and_options() -> None:
    vec, ref = make_pair("schedule_gym/Gemm-v0", 4, start="random", max_episode_steps=5, **SMALL_GEMM)
    run_pair(vec, ref, 7, seed=1, masked=True)
    mask = np.array([True, False, True, False])
    seeds = [20, None, None, 23]
    assert_same_step(vec, ref, vec.reset(seed=seeds, options={"reset_mask": mask.copy()}),
                     ref.reset(seed=seeds, options={"reset_mask": mask.copy()}))
    for options in ({"start": "s0"}, {"config": 123}, {"config": ((1, 8, 8, 1), (8, 8), (64, 1, 1, 1))}):
        assert_same_step(vec, ref, vec.reset(options=dict(options)), ref.reset(options=dict(options)))
        actions = np.array([23, 0, 5, 14])
        assert_same_step(vec, ref, vec.step(actions), ref.step(actions))


def _failing_table(tmp_path, fail_s0: bool) -> str:
    """Records of every GEMM 8^3 (3/2/3) config from the mock, a fifth of them (and maybe s0) failed."""
    task = gemm(8, 8, 8, 3, 2, 3)
    mock, path = MockBackend(), tmp_path / "table.jsonl"
    store = RecordStore(path, fsync=False)
    space = mock.space(task)
    s0 = space.index(space.initial_config())
    for i, result in enumerate(mock.measure(task, [space.config(i) for i in range(space.size)])):
        if i % 5 == 0 or (fail_s0 and i == s0):
            result = MeasureResult(result.config, None, error="run: crashed", error_kind="crash")
        store.append(task, "mock", "mock:test", "mock-cpu-v2", result)
    store.close()
    return str(path)


@pytest.mark.parametrize("fail_s0", [False, True])
@pytest.mark.parametrize("reward", ["inverse", "log_speedup_prev", "log_speedup_s0"])
def test_failed_records_give_the_failure_penalty(tmp_path, fail_s0: bool, reward: str) -> None:
    path = _failing_table(tmp_path, fail_s0)
    kwargs = dict(task=gemm(8, 8, 8, 3, 2, 3), backend="replay", backend_options={"records": path}, reward=reward,
                  failure_penalty=-2.5, start="random")
    vec = TilingVectorEnv(3, max_episode_steps=6, **kwargs)
    ref = SyncVectorEnv([lambda: gym.wrappers.TimeLimit(TilingEnv(**kwargs), 6) for _ in range(3)])
    run_pair(vec, ref, 40, seed=2, masked=False)


@pytest.mark.parametrize("reward", ["inverse", "log_speedup_prev", "log_speedup_s0"])
def test_censored_records_are_rewarded_at_their_bound_and_never_best(tmp_path, reward: str) -> None:
    """A table where the fastest configs (and others) are censored below every latency: rewards, latencies and
    bests match TilingEnv's step by step (a censored record is never a best); a censored s0 is refused."""
    task = gemm(8, 8, 8, 3, 2, 3)
    mock, path = MockBackend(), tmp_path / "censored.jsonl"
    space = mock.space(task)
    s0 = space.index(space.initial_config())
    results = mock.measure(task, [space.config(i) for i in range(space.size)])
    fastest = min(r.latency_s for r in results)
    store = RecordStore(path, fsync=False)
    for i, result in enumerate(results):
        if i != s0 and (i % 4 == 0 or result.latency_s == fastest):
            result = MeasureResult.censored_at(result.config, fastest / 2)  # below every latency: tempting
        store.append(task, "mock", "mock:test", "mock-cpu-v2", result)
    store.close()
    kwargs = dict(task=task, backend="replay", backend_options={"records": str(path)}, reward=reward, start="random")
    vec = TilingVectorEnv(3, max_episode_steps=6, **kwargs)
    ref = SyncVectorEnv([lambda: gym.wrappers.TimeLimit(TilingEnv(**kwargs), 6) for _ in range(3)])
    run_pair(vec, ref, 40, seed=2, masked=False)
    assert np.all(vec.step(np.zeros(3, dtype=np.int64))[-1]["best_latency_s"] > fastest / 2)
    store = RecordStore(path, fsync=False)
    store.append(task, "mock", "mock:test", "mock-cpu-v2", MeasureResult.censored_at(space.config(s0), 1.0))
    store.close()
    if reward != "log_speedup_prev":
        with pytest.raises(MissingRecordError, match="has only a censored record"):
            TilingVectorEnv(3, max_episode_steps=6, **kwargs).reset(seed=0)


def test_make_vec_picks_the_vector_env_where_registered() -> None:
    vectorised = {"Gemm-v0", "Tiling-v0", "Conv2d-v0", "BatchMatmul-v0", "Dense-v0", "Pool2d-v0", "GemmTable-v0",
                  "Conv2dTable-v0", "MultiTask-v0", "Schedule-v0"}
    for env_id in ENV_IDS:
        spec = gym.spec(env_id)
        assert (spec.vector_entry_point is not None) == (env_id.split("/")[1] in vectorised), env_id
    for env_id in ("schedule_gym/Conv2d-v0", "schedule_gym/BatchMatmul-v0", "schedule_gym/Dense-v0",
                   "schedule_gym/Pool2d-v0", "schedule_gym/Tiling-v0"):
        envs = gym.make_vec(env_id, num_envs=2)
        single = gym.make(env_id)
        assert isinstance(envs, TilingVectorEnv) and envs.max_episode_steps == 100
        assert envs.single_observation_space == single.observation_space
        assert envs.single_action_space == single.action_space
        obs, _ = envs.reset(seed=0)
        np.testing.assert_array_equal(obs[0], single.reset(seed=0)[0])
        envs.close()
        single.close()
    vec, ref = make_pair("schedule_gym/GemmTable-v0", 2, max_episode_steps=4)
    run_pair(vec, ref, 10, seed=0, masked=True)
    noisy = gym.make_vec("schedule_gym/GemmNoisy-v0", num_envs=2)
    assert isinstance(noisy, gym.vector.SyncVectorEnv)


def test_spaces_dtypes_and_seeding() -> None:
    def rollout(seed: int) -> list:
        envs = gym.make_vec("schedule_gym/Gemm-v0", num_envs=8, start="random", **SMALL_GEMM)
        envs.action_space.seed(seed)
        obs, info = envs.reset(seed=seed)
        assert obs.dtype == np.float32 and obs.shape == (8, 10) and envs.observation_space.contains(obs)
        assert envs.action_masks().dtype == np.bool_ and envs.action_masks().shape == (8, 26)
        out = [obs]
        for _ in range(120):
            actions = envs.action_space.sample()
            obs, rewards, terminated, truncated, info = envs.step(actions)
            assert envs.observation_space.contains(obs)
            assert rewards.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
            assert rewards.shape == terminated.shape == truncated.shape == (8,)
            out += [obs, rewards, truncated]
        return out

    first, again, other = rollout(4), rollout(4), rollout(5)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


class _SlowBackend(LatencyBackend):
    name = "slow"
    deterministic = False

    def record_context(self, task):  # pragma: no cover - never reached
        return ("x", "y")

    def measure(self, task, configs, on_result=None):  # pragma: no cover - never reached
        raise AssertionError


def test_bad_input_errors() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        TilingVectorEnv(0)
    with pytest.raises(ValueError, match="budget_seconds"):
        TilingVectorEnv(2, budget_seconds=1.0)
    with pytest.raises(ValueError, match="deterministic.*noise=0.05.*vectorization_mode='sync'"):
        TilingVectorEnv(2, backend="mock", backend_options={"noise": 0.05})
    with pytest.raises(TypeError, match="vectorisable backend.*'slow'"):
        TilingVectorEnv(2, backend=_SlowBackend())
    with pytest.raises(ValueError, match="autoreset_mode"):
        TilingVectorEnv(2, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="reward must be one of"):
        TilingVectorEnv(2, reward="speed")
    with pytest.raises(ValueError, match="max_episode_steps"):
        TilingVectorEnv(2, max_episode_steps=0)
    envs = TilingVectorEnv(3, task=gemm(64, 64, 64))
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(3, dtype=np.int64))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(TypeError, match="integers"):
        envs.step(np.zeros(3))
    with pytest.raises(ValueError, match="action 26 is out of range"):
        envs.step(np.array([0, 26, 1]))
    with pytest.raises(ValueError, match="one seed per environment"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="unknown reset options"):
        envs.reset(options={"shape": 1})
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": [True, False, True]})
    with pytest.raises(ValueError, match="start must be one of"):
        envs.reset(options={"start": "best"})


def test_sb3_adapter_equals_dummy_vec_env_and_trains() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from schedule_gym.envs.sb3_vec import SB3VecEnv

    kwargs = dict(start="random", max_episode_steps=5, **SMALL_GEMM)
    adapter = SB3VecEnv.make("schedule_gym/Gemm-v0", 3, **kwargs)
    dummy = DummyVecEnv([lambda: gym.make("schedule_gym/Gemm-v0", **kwargs) for _ in range(3)])
    adapter.seed(7)
    dummy.seed(7)
    np.testing.assert_array_equal(adapter.reset(), dummy.reset())
    rng = np.random.default_rng(0)
    for _ in range(12):
        masks = get_action_masks(adapter)
        np.testing.assert_array_equal(masks, np.stack(dummy.env_method("action_masks")))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, rewards, dones, infos = adapter.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = dummy.step(actions)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(rewards, ref_rewards)
        np.testing.assert_array_equal(dones, ref_dones)
        for info, ref_info in zip(infos, ref_infos):
            assert ("terminal_observation" in info) == ("terminal_observation" in ref_info)
            if "terminal_observation" in info:
                np.testing.assert_array_equal(info["terminal_observation"], ref_info["terminal_observation"])
                assert info["TimeLimit.truncated"] == ref_info["TimeLimit.truncated"]

    PPO("MlpPolicy", adapter, n_steps=8, batch_size=12, n_epochs=1, seed=0).learn(48)
    model = MaskablePPO("MlpPolicy", adapter, n_steps=8, batch_size=12, n_epochs=1, seed=0).learn(48)
    adapter.reset()
    actions, _ = model.predict(adapter.reset(), action_masks=get_action_masks(adapter))
    assert get_action_masks(adapter)[np.arange(3), actions].all()
    with pytest.raises(ValueError, match="SAME_STEP"):
        SB3VecEnv(TilingVectorEnv(2, task=gemm(64, 64, 64)))


def test_key_sets_agree_with_python_sets_through_growth_and_drops() -> None:
    from schedule_gym.envs.keysets import KeySets

    rng = np.random.default_rng(3)
    size, n = 5_000, 64
    sets, reference = KeySets(size), [set() for _ in range(n)]
    for step in range(400):  # about 20,000 keys: the table grows several times
        envs = np.flatnonzero(rng.random(n) < 0.8)
        indices = rng.integers(0, 50 if step % 2 else size, envs.size)  # revisits and new configs
        sets.reserve(envs.size)
        keys, found, slots = sets.find(envs, indices)
        np.testing.assert_array_equal(found, [i in reference[e] for e, i in zip(envs.tolist(), indices.tolist())])
        sets.insert(keys[~found], slots[~found])
        for e, i in zip(envs[~found].tolist(), indices[~found].tolist()):
            reference[e].add(i)
        if step % 100 == 99:
            dropped = rng.choice(n, 5, replace=False)
            sets.drop(dropped)
            for e in dropped.tolist():
                reference[e].clear()
        assert len(sets) == sum(map(len, reference))
    assert sorted(sets.keys().tolist()) == sorted(e * size + i for e, s in enumerate(reference) for i in s)
    sets.clear()
    assert len(sets) == 0 and not sets.find(np.arange(n), np.zeros(n, dtype=np.int64))[1].any()


@pytest.mark.parametrize("hash_table_envs", [1, 10**9])  # both session stores: the NumPy hash table, the Python set
def test_both_session_stores_give_the_same_trajectories(monkeypatch, hash_table_envs: int) -> None:
    monkeypatch.setattr(core, "HASH_TABLE_ENVS", hash_table_envs)
    test_same_step_autoreset_and_budget("mock", "inverse")
    test_reset_mask_seed_list_and_options()
    vec, ref = backend_pair("table", 6, start="random", max_episode_steps=9)
    run_pair(vec, ref, 40, seed=4, masked=False)
