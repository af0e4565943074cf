import math
import time

import gymnasium
import numpy as np
import pytest
from gymnasium.envs.registration import registry
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import schedule_gym
from schedule_gym import MockBackend, TilingEnv, gemm
from schedule_gym.backends import LatencyBackend
from schedule_gym.envs.episode import PALETTE

SMALL = {"schedule_gym/Gemm-v0": {"m": 64, "k": 32, "n": 64}, "schedule_gym/GemmNoisy-v0": {"m": 64, "k": 32, "n": 64},
         "schedule_gym/Tiling-v0": {"task": "gemm-64"}, "schedule_gym/GemmTVM-v0": {"m": 64, "k": 32, "n": 64},
         "schedule_gym/GemmTable-v0": {}, "schedule_gym/Conv2dTable-v0": {},
         "schedule_gym/Conv2d-v0": {"h": 14, "w": 14, "ci": 16, "co": 32, "stride": 2},
         "schedule_gym/BatchMatmul-v0": {"b": 4, "m": 32, "k": 16, "n": 32},
         "schedule_gym/Dense-v0": {"m": 16, "k": 64, "n": 48}, "schedule_gym/Schedule-v0": {"task": "gemm-64"},
         "schedule_gym/Pool2d-v0": {"h": 14, "w": 14, "c": 16},
         "schedule_gym/MultiTask-v0": {"tasks": "resnet50/fc,bert-base/attn-pv"},
         "schedule_gym/Model-v0": {"model": "resnet18", "steps_per_task": 2}}
OUR_IDS = sorted(env_id for env_id in registry if env_id.startswith("schedule_gym/"))
# ids whose rollouts must repeat exactly: all but real measurements (the TVM one is checked in its own tests)
REPLAYABLE_IDS = [env_id for env_id in OUR_IDS if registry[env_id].kwargs.get("backend") != "tvm"]
INFO_KEYS = {
    "config", "latency_s", "gflops", "error", "error_kind", "coarse", "censored", "legal", "new_measurement",
    "best_latency_s", "best_gflops", "best_config", "num_measurements", "explored_fraction", "budget_exhausted", "action_mask",
}


def test_registry_holds_our_versioned_ids():
    assert set(OUR_IDS) == set(schedule_gym.ENV_IDS)
    for env_id in OUR_IDS:
        spec = registry[env_id]
        assert spec.version == 0 and spec.namespace == "schedule_gym"
        # every episode has a step limit; Model-v0's ends by itself after its last task
        assert spec.max_episode_steps or env_id == "schedule_gym/Model-v0"
        for value in spec.kwargs.values():  # plain data, so workers can rebuild the environment
            assert isinstance(value, (str, int, float, dict, bool))
    assert registry["schedule_gym/GemmNoisy-v0"].nondeterministic
    assert not registry["schedule_gym/Gemm-v0"].nondeterministic


@pytest.mark.parametrize("env_id", [pytest.param(e, marks=pytest.mark.tvm) if e not in REPLAYABLE_IDS else e for e in OUR_IDS])
def test_checkers_pass_without_warnings(env_id, recwarn):
    # each environment is closed, as a user must (a TVM backend's worker processes and files are released
    # by close(); left to the garbage collector, its files warn ResourceWarning as any unclosed file does)
    for check in (gym_check_env, lambda env: sb3_check_env(env, warn=True)):
        env = gymnasium.make(env_id, **SMALL[env_id])
        try:
            check(env.unwrapped)
        finally:
            env.close()
    assert [str(w.message) for w in recwarn] == []


def rollout(env_id, seed, steps=150, **kwargs):
    env = gymnasium.make(env_id, **{**SMALL[env_id], **kwargs})
    env.action_space.seed(seed)
    obs, info = env.reset(seed=seed)
    trace = [(obs.tolist(), None, info["config"], info["latency_s"])]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        trace.append((obs.tolist(), reward, info["config"], info["latency_s"]))
        if terminated or truncated:
            obs, info = env.reset()
    return trace


@pytest.mark.parametrize("env_id", REPLAYABLE_IDS)
def test_seeded_rollouts_repeat_exactly(env_id):
    a = rollout(env_id, seed=7, start="random")
    assert a == rollout(env_id, seed=7, start="random")
    assert a != rollout(env_id, seed=8, start="random")


def test_step_info_and_observation():
    env = TilingEnv(gemm(64, 32, 64))
    obs, info = env.reset(seed=0)
    assert set(info) == INFO_KEYS
    assert info["config"] == ((64, 1, 1, 1), (32, 1), (64, 1, 1, 1))
    assert info["num_measurements"] == 1 and info["new_measurement"]
    assert info["gflops"] == pytest.approx(2 * 64 * 32 * 64 / info["latency_s"] * 1e-9)
    assert obs.dtype == np.float32 and obs.tolist() == [1, 0, 0, 0, 1, 0, 1, 0, 0, 0]
    obs, reward, terminated, truncated, info = env.step(env.space.parse_action("m: 2x[2] /2[0]"))
    assert info["config"] == ((32, 1, 2, 1), (32, 1), (64, 1, 1, 1))
    assert obs[:4].tolist() == pytest.approx([5 / 6, 0, 1 / 6, 0])
    assert not terminated and not truncated
    assert np.array_equal(info["action_mask"], env.action_masks())
    assert info["explored_fraction"] == pytest.approx(2 / env.space.size)


def test_observation_options():
    env = TilingEnv(gemm(64, 32, 64), observation="log2", include_shape=True)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (13,)
    assert obs.tolist() == pytest.approx([6 / 24, 0, 0, 0, 5 / 24, 0, 6 / 24, 0, 0, 0, 6 / 24, 5 / 24, 6 / 24])
    for config in [env.space.config(i) for i in range(0, env.space.size, 501)]:
        obs, _ = TilingEnv(gemm(64, 32, 64)).reset(options={"config": config})
        assert [obs[0:4].sum(), obs[4:6].sum(), obs[6:10].sum()] == pytest.approx([1, 1, 1])


def test_illegal_action_leaves_state_penalises_and_measures_nothing():
    env = TilingEnv(gemm(64, 32, 64), illegal_action_penalty=-2.5)
    obs0, info0 = env.reset(seed=0)
    illegal = int(np.flatnonzero(~info0["action_mask"])[0])
    obs, reward, terminated, truncated, info = env.step(illegal)
    assert reward == -2.5 and info["legal"] is False and not info["new_measurement"]
    assert info["config"] == info0["config"] and np.array_equal(obs, obs0)
    assert info["num_measurements"] == 1 and not terminated and not truncated


class CountingBackend(LatencyBackend):
    name = "counting"
    deterministic = True

    def __init__(self, delay_s=0.0):
        self.inner, self.measured, self.delay_s = MockBackend(), [], delay_s

    def measure(self, task, configs, on_result=None):
        self.measured.extend(configs)
        time.sleep(self.delay_s * len(configs))
        return self.inner.measure(task, configs)


def test_revisits_are_free_and_never_remeasured():
    backend = CountingBackend()
    env = TilingEnv(gemm(64, 32, 64), backend=backend, reward="log_speedup_prev")
    env.reset(seed=0)
    there, back = env.space.parse_action("n: 2x[3] /2[0]"), env.space.parse_action("n: 2x[0] /2[3]")
    _, _, _, _, info = env.step(there)
    assert info["new_measurement"] and info["num_measurements"] == 2
    for _ in range(5):
        _, r1, _, _, info = env.step(back)
        _, r2, _, _, info = env.step(there)
        assert not info["new_measurement"]
        assert r1 == pytest.approx(-r2)
    assert info["num_measurements"] == 2 and len(backend.measured) == 2
    # a new session (reset with a seed) reuses the cache: nothing is measured again
    env.reset(seed=1)
    _, _, _, _, info = env.step(there)
    assert info["num_measurements"] == 2 and len(backend.measured) == 2


def test_measurement_budget_truncates_and_spent_budget_moves_nothing():
    env = TilingEnv(gemm(64, 32, 64), budget_measurements=3)
    env.reset(seed=0)
    space = env.space
    _, _, _, truncated, info = env.step(space.parse_action("n: 2x[3] /2[0]"))
    assert not truncated and info["num_measurements"] == 2
    _, _, _, truncated, info = env.step(space.parse_action("m: 2x[3] /2[0]"))
    assert truncated and info["budget_exhausted"] and info["num_measurements"] == 3
    before = info["config"]
    _, reward, _, truncated, info = env.step(space.parse_action("k: 2x[1] /2[0]"))
    assert truncated and reward == 0.0 and info["config"] == before and info["num_measurements"] == 3
    # configs already measured stay reachable
    _, _, _, _, info = env.step(space.parse_action("m: 2x[0] /2[3]"))
    assert info["config"] == ((64, 1, 1, 1), (32, 1), (32, 1, 1, 2)) and info["num_measurements"] == 3


def test_fraction_budget():
    env = TilingEnv(gemm(8, 4, 8), budget_fraction=0.01)  # 20 * 3 * 20 = 1200 configs: 12 allowed
    env.reset(seed=0)
    results = env.session.measure([env.space.config(i) for i in range(20)])
    assert sum(r is not None for r in results) == 11  # s0 took the first of 12
    assert env.session.num_measurements == 12 and env.session.budget_exhausted()


def test_seconds_budget_counts_backend_wall_time():
    env = TilingEnv(gemm(8, 4, 8), backend=CountingBackend(delay_s=0.02), budget_seconds=0.1)
    env.reset(seed=0)
    truncated, steps = False, 0
    rng = np.random.default_rng(0)
    while not truncated and steps < 100:
        _, _, _, truncated, info = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        steps += 1
    assert truncated and env.session.measure_wall_s >= 0.1 and info["num_measurements"] <= 7


def test_evaluate_measures_new_configs_in_one_batch():
    backend = CountingBackend()
    env = TilingEnv(gemm(64, 32, 64), backend=backend, reward="log_speedup_prev")
    env.reset(seed=0)
    configs = [env.space.config(i) for i in (5, 17, 5, 99)]
    results = env.session.measure(configs)
    assert results[0] is results[2] and all(r.ok for r in results)
    assert len(backend.measured) == 1 + 3  # s0, then one batch of three distinct configs
    assert env.session.num_measurements == 4
    assert env.session.best.latency_s == min(r.latency_s for r in results + [env.session.result(env.space.initial_config())])


def test_reward_modes():
    task = gemm(64, 32, 64)
    actions = [TilingEnv(task).space.parse_action(a) for a in ("n: 2x[3] /2[0]", "n: 2x[3] /2[0]", "m: 2x[3] /2[0]")]
    traces = {}
    for mode in ("inverse", "log_speedup_prev", "log_speedup_s0"):
        env = TilingEnv(task, reward=mode)
        _, info = env.reset(seed=0)
        ref = info["latency_s"]
        rewards, latencies = [], []
        for a in actions:
            _, r, _, _, info = env.step(a)
            rewards.append(r)
            latencies.append(info["latency_s"])
        traces[mode] = (ref, rewards, latencies)
    ref, rewards, latencies = traces["inverse"]
    assert rewards == pytest.approx([ref / lat for lat in latencies])
    ref, rewards, latencies = traces["log_speedup_s0"]
    assert rewards == pytest.approx([math.log(ref / lat) for lat in latencies])
    ref, rewards, latencies = traces["log_speedup_prev"]
    assert sum(rewards) == pytest.approx(math.log(ref / latencies[-1]))


def test_inverse_reward_reference_is_s0_even_from_a_random_start():
    env = TilingEnv(gemm(64, 32, 64), start="random")
    _, info = env.reset(seed=3)
    s0 = env.session.result(env.space.initial_config())
    assert s0 is not None and info["num_measurements"] == 2
    assert env.reset(options={"start": "s0"})[1]["latency_s"] == s0.latency_s


def test_failed_measurements_are_penalised_results(scripted_backend):
    backend = scripted_backend(lambda config: config[2][3] == 2, kind="run")
    env = TilingEnv(gemm(64, 32, 64), backend=backend, failure_penalty=-3.0, render_mode="ansi")
    _, info0 = env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(env.space.parse_action("n: 2x[3] /2[0]"))
    assert reward == -3.0 and info["error"] == "scripted run failure" and info["latency_s"] is None
    assert info["gflops"] is None and info["config"][2] == (32, 1, 1, 2)  # the agent moved there
    assert info["best_config"] == info0["config"] and not terminated and not truncated
    assert "latency: failed (run: scripted run failure)" in env.render()
    _, reward, _, _, info = env.step(env.space.parse_action("n: 2x[3] /2[0]"))
    assert info["error"] is None and reward > 0


def test_reset_options_choose_the_start():
    env = TilingEnv(gemm(64, 32, 64))
    config = ((4, 4, 2, 2), (8, 4), (2, 2, 1, 16))
    assert env.reset(options={"config": config})[1]["config"] == config
    index = env.space.index(config)
    assert env.reset(options={"config": index})[1]["config"] == config
    starts = {env.reset(seed=s, options={"start": "random"})[1]["config"] for s in range(5)}
    assert len(starts) == 5
    assert env.reset(seed=11, options={"start": "random"})[1]["config"] == TilingEnv(gemm(64, 32, 64), start="random").reset(seed=11)[1]["config"]


def test_time_limit_truncates_registered_envs():
    env = gymnasium.make("schedule_gym/Gemm-v0", m=64, k=32, n=64, max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(0)[3] for _ in range(5)]
    assert flags == [False] * 4 + [True]


def test_ansi_render_shows_the_tile_table():
    env = TilingEnv(gemm(64, 32, 64), render_mode="ansi")
    env.reset(seed=0)
    env.step(env.space.parse_action("n: 2x[3] /2[0]"))
    text = env.render()
    assert "n         64   [32  1  1  2]" in text
    assert "loop order: m0 n0 m1 n1 k0 m2 n2 k1 m3 n3" in text and "GFLOP/s" in text
    assert TilingEnv(gemm(8, 8, 8)).render() is None


def test_rgb_render_draws_one_bar_per_dimension():
    env = TilingEnv(gemm(64, 32, 64), render_mode="rgb_array")
    env.reset(options={"config": ((8, 8, 1, 1), (32, 1), (2, 2, 2, 8))})
    image = env.render()
    assert image.dtype == np.uint8 and image.shape == (3 * 32 + 8, 256, 3)
    m_row, k_row, n_row = image[8 + 12], image[40 + 12], image[72 + 12]
    palette = PALETTE
    assert (m_row[:128] == palette[0]).all() and (m_row[128:] == palette[1]).all()  # log 8 = half of log 64
    assert (k_row == palette[0]).all()
    assert (n_row[:43] == palette[0]).all() and (n_row[-128:] == palette[3]).all()


def test_gymnasium_vector_envs():
    for mode in ("sync", "async"):
        envs = gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=2, vectorization_mode=mode, m=64, k=32, n=64)
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (2, 10)
        obs, rewards, terminated, truncated, infos = envs.step(np.array([3, 6]))
        assert rewards.shape == (2,) and infos["config"][0][0] == (32, 2, 1, 1)
        envs.close()


def test_sb3_vec_envs():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    # "module:id" makes subprocess workers (spawned, so nothing imported) import schedule_gym first
    for cls in (DummyVecEnv, SubprocVecEnv):
        venv = make_vec_env("schedule_gym:schedule_gym/Gemm-v0", n_envs=2, seed=0, vec_env_cls=cls, env_kwargs={"m": 64, "k": 32, "n": 64})
        obs = venv.reset()
        obs, rewards, dones, infos = venv.step(np.array([3, 6]))
        assert obs.shape == (2, 10) and rewards.shape == (2,)
        assert infos[0]["config"][0] == (32, 2, 1, 1)
        venv.close()


@pytest.mark.parametrize("observation", ["fraction", "log2"])
def test_observations_and_masks_from_padded_tables_equal_the_per_dimension_tables(observation):
    env = TilingEnv(gemm(96, 64, 360), observation=observation, include_shape=True, start="random")
    tables, masks = env._obs.tables, [d.masks for d in env.space.dims]
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = env._rows
        want_obs = np.concatenate([t[r] for t, r in zip(tables, rows)] + env._obs.shape_part)
        obs = env.observation_of_rows(rows)
        assert obs.dtype == want_obs.dtype and obs.shape == want_obs.shape
        np.testing.assert_array_equal(obs, want_obs)
        mask = env.action_masks()
        np.testing.assert_array_equal(mask, np.concatenate([m[r] for m, r in zip(masks, rows)]))
        obs[:] = 0.5  # callers own what they get
        mask[:] = False
        np.testing.assert_array_equal(env.observation_of_rows(rows), want_obs)
        assert env.action_masks().any()
        env.step(int(rng.integers(env.action_space.n)))


@pytest.mark.parametrize("observation", ["fraction", "log2"])
def test_returned_observations_and_masks_follow_the_state(observation):
    """What reset and step return (the observation, info["action_mask"], action_masks()) is the per-dimension
    tables' concatenation in the current state, through moves, illegal actions, a spent budget and resets of
    every kind; a caller that writes into what it got changes nothing."""
    env = TilingEnv(gemm(96, 64, 360), observation=observation, include_shape=True, budget_measurements=60)
    tables, masks = env._obs.tables, [d.masks for d in env.space.dims]

    def check(obs, info):
        rows = env.space.rows(info["config"])
        np.testing.assert_array_equal(obs, np.concatenate([t[r] for t, r in zip(tables, rows)] + env._obs.shape_part))
        want_mask = np.concatenate([m[r] for m, r in zip(masks, rows)])
        np.testing.assert_array_equal(info["action_mask"], want_mask)
        np.testing.assert_array_equal(env.action_masks(), want_mask)
        obs[:] = 0.25
        info["action_mask"][:] = True

    rng = np.random.default_rng(3)
    check(*env.reset(seed=0))
    resets = [{"seed": 1}, {"options": {"start": "random"}}, {"options": {"config": 7}},
              {"options": {"config": env.space.config(env.space.size - 1)}}, {}]
    illegal = exhausted = 0
    for step in range(1, 600):
        obs, _, _, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        illegal += not info["legal"]
        exhausted += info["budget_exhausted"]
        check(obs, info)
        if step % 100 == 0:
            check(*env.reset(**resets.pop()))
    assert illegal and exhausted and not resets


BAD_ACTIONS = [(1.5, TypeError), ("3", TypeError), (True, TypeError), (np.float32(1.0), TypeError), (None, TypeError),
               (np.array([1]), TypeError), (np.array(1.0), TypeError), (-1, ValueError), (10**6, ValueError)]


@pytest.mark.parametrize("env_id", REPLAYABLE_IDS)
def test_every_id_validates_actions_and_reset_options_alike(env_id):
    env = gymnasium.make(env_id, **SMALL[env_id]).unwrapped
    env.reset(seed=0)
    for action, exc in BAD_ACTIONS:
        with pytest.raises(exc, match="action"):
            env.step(action)
    env.step(np.int64(int(np.flatnonzero(env.action_masks())[0])))  # a NumPy integer is an action
    with pytest.raises(TypeError, match="reset options must be a dict or None, got 'x'"):
        env.reset(options="x")
    with pytest.raises(ValueError, match=r"unknown reset options \['nonsense'\]"):
        env.reset(options={"nonsense": 1})


@pytest.mark.parametrize("env_id", OUR_IDS)
def test_every_id_declares_the_same_render_modes(env_id):
    assert registry[env_id].entry_point is not None
    env = gymnasium.make(env_id, **SMALL[env_id], render_mode="rgb_array") if env_id in REPLAYABLE_IDS else None
    if env is not None:
        env.reset(seed=0)
        image = env.render()
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
        assert env.unwrapped.metadata["render_modes"] == ["ansi", "rgb_array"]
        env.close()


@pytest.mark.parametrize("vec_env_cls", ["dummy", "subproc"])
def test_every_id_works_with_sb3_make_vec_env(vec_env_cls):
    """SB3's make_vec_env passes render_mode="rgb_array" and falls back only on TypeError: every id must take it,
    in-process and in worker processes (which start without schedule_gym imported: Gymnasium's "module:id" form
    imports it there)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    cls = DummyVecEnv if vec_env_cls == "dummy" else SubprocVecEnv
    for env_id in REPLAYABLE_IDS:
        name = env_id if cls is DummyVecEnv else f"schedule_gym:{env_id}"
        envs = make_vec_env(name, n_envs=2, seed=0, env_kwargs=SMALL[env_id], vec_env_cls=cls)
        try:
            obs = envs.reset()
            assert obs.shape == (2, *envs.observation_space.shape)
            masks = np.stack(envs.env_method("action_masks"))
            actions = np.array([int(np.flatnonzero(m)[0]) for m in masks])
            obs, rewards, dones, infos = envs.step(actions)
            assert rewards.shape == (2,) and len(infos) == 2
        finally:
            envs.close()
