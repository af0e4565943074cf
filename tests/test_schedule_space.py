"""Loop orders next to tiles: the order space (legality, exact counts, ranks, swaps), schedules measured on
any backend, records of schedules, and the schedule environment."""

import itertools
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym import MockBackend
from schedule_gym.backends import ReplayBackend
from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.envs import ScheduleEnv
from schedule_gym.loopnest import LoopNest
from schedule_gym.records import RecordStore
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import OrderSpace, Schedule, ScheduleSpace, TileSpace
from schedule_gym.tasks import batch_matmul, conv2d, gemm, get_task

SMALL_TASKS = [
    gemm(8, 8, 8, d_m=2, d_k=2, d_n=2),
    gemm(12, 6, 10, d_m=3, d_k=1, d_n=2),
    batch_matmul(2, 4, 4, 4, splits=(1, 2, 2, 1)),
    conv2d(1, 4, 4, 2, 2, kernel=3, padding=1, splits=(1, 1, 1, 2, 1, 1, 1)),  # 8 loops: 8! brute force
]


def nested_by_brute_force(space: OrderSpace) -> set:
    """Every permutation of the loops that keeps each dimension's levels in order."""
    out = set()
    for perm in itertools.permutations(space.loops):
        levels = {}
        if all(levels.setdefault(d, -1) + 1 == lvl and not levels.update({d: lvl}) for d, lvl in perm):
            out.add(perm)
    return out


@pytest.mark.parametrize("task", SMALL_TASKS, ids=lambda t: t.name)
def test_order_counts_ranks_and_legality_match_brute_force(task):
    space = OrderSpace(task)
    legal = nested_by_brute_force(space)
    assert space.size == len(legal)  # the multinomial count is exact
    assert {o for o in itertools.permutations(space.loops) if space.is_legal(o)} == legal
    ranks = sorted(space.rank(o) for o in legal)
    assert ranks == list(range(space.size))
    assert all(space.unrank(space.rank(o)) == o for o in legal)
    assert list(space) == sorted(legal, key=space.rank)


@pytest.mark.parametrize("task", SMALL_TASKS, ids=lambda t: t.name)
def test_every_order_is_reachable_by_legal_swaps(task):
    space = OrderSpace(task)
    seen, frontier = {space.default_order}, [space.default_order]
    while frontier:
        order = frontier.pop()
        mask = space.action_mask(order)
        for p in range(space.n_actions):
            nxt = space.apply(order, p)
            assert (nxt is not None) == mask[p]
            if nxt is not None:
                assert space.is_legal(nxt)
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
    assert len(seen) == space.size


def test_sampling_is_uniform_over_legal_orders():
    space = OrderSpace(SMALL_TASKS[0])
    rng = np.random.default_rng(0)
    counts = np.bincount([space.rank(space.sample(rng)) for _ in range(18_000)], minlength=space.size)
    expected = 18_000 / space.size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert counts.min() > 0 and chi2 < 160  # 89 degrees of freedom: p ~ 1e-5 at 160


def test_space_sizes_of_the_paper_shapes_and_a_resnet_layer():
    gemm_space = ScheduleSpace(gemm(1024, 1024, 1024))
    assert gemm_space.orders.size == math.factorial(10) // (math.factorial(4) ** 2 * 2) == 3150
    assert gemm_space.mdf_size == 899_756 * 3150 and gemm_space.adf_size == 899_756 + 3150
    conv = ScheduleSpace(get_task("resnet50/conv2"))
    assert conv.orders.size == math.factorial(22) // (math.factorial(4) ** 4 * math.factorial(2) ** 3)
    assert conv.mdf_size == conv.tiles.size * conv.orders.size > 2**64  # beyond int64: Python ints
    rng = np.random.default_rng(1)
    index = conv.sample_index(rng)
    assert conv.index(conv.config(index)) == index


def test_intra_tile_orders_permute_the_innermost_level_of_every_dimension():
    space = OrderSpace(get_task("resnet50/conv2"))
    orders = space.intra_tile_orders()
    assert len(orders) == math.factorial(7) and len(set(orders)) == len(orders)
    inner = set(space.intra_tile_loops)
    assert inner == {(d.name, d.splits - 1) for d in space.task.dims}
    assert all(space.is_legal(o) and set(o[-7:]) == inner and o[:-7] == space.default_order[:-7] for o in orders)


@pytest.mark.parametrize(
    "order, message",
    [
        ("m0 n0", "must be a sequence of"),
        ([("m", 0)] * 10, "not a permutation of the task's loops"),
        ([("m", 0), ("n", 0), ("m", 1), ("n", 1), ("k", 0), ("m", 2), ("n", 2), ("k", 1), ("m", 3), ("x", 3)],
         r"names loops the task does not have: \[\('x', 3\)\]"),
        ([("m", 1), ("n", 0), ("m", 0), ("n", 1), ("k", 0), ("m", 2), ("n", 2), ("k", 1), ("m", 3), ("n", 3)],
         "m1 comes before m0; the levels of a dimension must stay nested"),
        ([("m", "0")], r"is not a \(dimension name, level\) pair"),
    ],
)
def test_bad_orders_are_precise_errors(order, message):
    with pytest.raises((TypeError, ValueError), match=message):
        OrderSpace(gemm(64, 64, 64)).validate(order)


def test_bad_swap_actions_are_precise_errors():
    space = OrderSpace(gemm(64, 64, 64))
    with pytest.raises(ValueError, match=r"swap action 9 is out of range \[0, 9\)"):
        space.apply(space.default_order, 9)
    with pytest.raises(ValueError, match=r"unknown swap action 'swap\[12\]'"):
        space.parse_action("swap[12]")
    assert space.apply(space.default_order, 0) is not None  # m0 <-> n0
    assert space.apply(space.loops, 0) is None  # m0 <-> m1: same dimension


def test_schedules_are_measured_as_configs_of_the_task_in_their_order():
    task = gemm(256, 256, 256)
    space = ScheduleSpace(task)
    mock = MockBackend(profile="znver5-2core-fitted")
    session = MeasureSession(task, ScheduleBackend(mock), space)
    rng = np.random.default_rng(0)
    schedules = [space.sample(rng) for _ in range(12)]
    results = session.measure(schedules)
    for s, r in zip(schedules, results):
        assert r.config == s
        (direct,) = mock.measure(task.with_order(s.order), [s.tiles])
        assert r.latency_s == direct.latency_s
    # the order matters to the model: one tile config in many orders spans a wide latency range
    tiles = ((8, 4, 1, 8), (64, 4), (4, 2, 1, 32))
    spread = [r.latency_s for r in session.measure([Schedule(tiles, space.orders.sample(rng)) for _ in range(40)])]
    assert max(spread) > 3 * min(spread)


def test_the_nest_follows_the_order():
    task = gemm(256, 256, 256)
    space = OrderSpace(task)
    k_inner = space.apply(space.default_order, 7)  # k1 <-> m3
    assert LoopNest.cpu(task, k_inner).describe().endswith("m3 k1 n3(vector)")
    k_innermost = space.apply(k_inner, 8)  # k1 <-> n3
    nest = LoopNest.cpu(task, k_innermost)
    assert nest.vector is None and nest.describe().endswith("m3 n3(unroll) k1")  # a reduction innermost: no vector


def test_records_of_schedules_round_trip_and_replay(tmp_path):
    task = gemm(64, 32, 64)
    space = ScheduleSpace(task)
    path = tmp_path / "orders.jsonl"
    rng = np.random.default_rng(3)
    schedules = [space.sample(rng) for _ in range(8)] + [space.initial_config()]
    with ReplayBackend(path, delegate=MockBackend(profile="znver5-2core-fitted")) as recorder:
        measured = ScheduleBackend(recorder).measure(task, schedules)
    store = RecordStore(path)
    assert len(store) == len(set(schedules))
    assert {tuple(r.task.loop_order) for r in store} == {s.order for s in schedules}
    with ReplayBackend(path) as replay:  # no delegate: every schedule must come from the records
        replayed = ScheduleBackend(replay).measure(task, schedules)
    assert [r.latency_s for r in replayed] == [r.latency_s for r in measured]


def test_schedule_env_passes_the_checkers_and_reruns_identically():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("schedule_gym/Schedule-v0", task="gemm-256")
    check_env(env.unwrapped)
    sb3_check_env(ScheduleEnv("gemm-256"))

    def rollout():
        e = gym.make("schedule_gym/Schedule-v0", task="gemm-256", start="random")
        obs, _ = e.reset(seed=7)
        out = [obs]
        rng = np.random.default_rng(0)
        for _ in range(60):
            a = int(rng.choice(np.flatnonzero(e.unwrapped.action_masks())))
            obs, reward, *_ = e.step(a)
            out += [obs, np.array([reward])]
        return np.concatenate(out)

    np.testing.assert_array_equal(rollout(), rollout())


def test_schedule_env_swaps_masks_and_observation():
    env = ScheduleEnv("gemm-256")
    obs, info = env.reset(seed=0)
    space = env.space
    assert env.action_space.n == space.tiles.n_actions + 9
    assert info["order"] == "m0 n0 m1 n1 k0 m2 n2 k1 m3 n3"
    n_tile_obs = sum(space.tiles.task.splits)
    positions = obs[n_tile_obs:] * 9
    assert [space.orders.loops[i] for i in np.argsort(positions)] == list(space.orders.default_order)
    mask = env.action_masks()
    assert mask[space.n_tile_actions:].tolist() == [True] * 9  # default order: neighbours all differ
    obs, reward, _, _, info = env.step(space.parse_action("swap[8]"))  # m3 <-> n3: m3 vectorised
    assert info["legal"] and info["order"].endswith("k1 n3 m3") and info["new_measurement"] and reward > 0
    obs, reward, _, _, info = env.step(space.parse_action("swap[8]"))  # back: cached, not re-measured
    assert info["order"].endswith("k1 m3 n3") and not info["new_measurement"]
    # m0 n0 ... after swapping n0 and m1 positions 1..2 twice: m0 m1 then an illegal m0 <-> m1 swap
    env.step(space.parse_action("swap[1]"))
    assert not env.action_masks()[space.n_tile_actions + 0]
    _, reward, _, _, info = env.step(space.parse_action("swap[0]"))
    assert not info["legal"] and reward == env.illegal_action_penalty


def test_schedule_env_bad_input():
    env = ScheduleEnv("gemm-64")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 35 is out of range \[0, 35\)"):
        env.step(35)
    with pytest.raises(ValueError, match="must stay nested"):
        env.reset(options={"config": (env.space.tiles.initial_config(), list(reversed(env.space.orders.loops)))})
    with pytest.raises(TypeError, match=r"a schedule must be a \(tile config, loop order\) pair"):
        env.reset(options={"config": env.space.tiles.initial_config()})


def test_search_agents_run_on_the_schedule_space():
    from schedule_gym.agents import make_agent

    env = ScheduleEnv("gemm-256", backend=MockBackend(profile="znver5-2core-fitted"))
    for name in ("random", "gbfs"):
        result = make_agent(name, seed=0).run(env, 60)
        assert result.num_measurements == 60
        assert isinstance(result.best_config, tuple) and env.space.is_legal(result.best_config)
        assert result.best_latency_s <= result.s0_latency_s
