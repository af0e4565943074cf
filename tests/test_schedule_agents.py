"""Composed Singular Prediction and its MDF baseline (Patabandi and Hall) on the schedule environment."""

import numpy as np
import pytest

from schedule_gym.agents import make_agent
from schedule_gym.agents.csp import ScheduleFeatures
from schedule_gym.backends import MockBackend
from schedule_gym.envs import ScheduleEnv, TilingEnv
from schedule_gym.spaces import ScheduleSpace
from schedule_gym.tasks import gemm, get_task


def env(task="gemm-256"):
    return ScheduleEnv(task, backend=MockBackend(profile="znver5-2core-fitted"))


def test_csp_trains_the_tile_model_through_the_permutation_model_and_composes():
    e = env()
    agent = make_agent("csp", seed=0, tile_schemes=3, predict_tiles=2, predict_orders=2)
    result = agent.run(e, 60)
    assert result.num_measurements <= 60
    cost = agent.data_cost
    assert cost["perm"]["measurements"] == 3 * 6  # D! = 6 orders of GEMM's intra-tile loops, every one
    assert cost["perm"]["measurements"] + cost["tile"]["measurements"] + len(agent.prediction) + 1 >= result.num_measurements
    intra = set(agent.features.orders)
    history = [row.config for row in result.history[1:]]  # s0 first
    assert all(s.order in intra for s in history)
    # the tile data: each scheme measured with the order the permutation model ranks first for it
    tile_rows = history[cost["perm"]["measurements"]: cost["perm"]["measurements"] + cost["tile"]["measurements"]]
    firsts = agent.best_orders([s.tiles for s in tile_rows], 1)[:, 0]
    assert [s.order for s in tile_rows] == [agent.features.orders[int(o)] for o in firsts]
    # the prediction: 2 tiles x their 2 best orders, measured
    assert len(agent.prediction) == 4 and all(r is not None and r.ok for _, r in agent.prediction)
    assert len({s.tiles for s, _ in agent.prediction}) == 2
    assert agent.predicted_best[1].latency_s == min(r.latency_s for _, r in agent.prediction)


def test_mdf_samples_the_product_and_predicts_from_one_model():
    e = env("resnet50/conv6")
    agent = make_agent("mdf", seed=0, predict_tiles=1, predict_orders=3, candidates=300, mdf_refine=4)
    result = agent.run(e, 40)
    assert result.num_measurements == 40
    assert agent.data_cost["product"]["measurements"] == 40 - 1 - 3
    assert len(agent.prediction) == 3 and len({s.tiles for s, _ in agent.prediction}) == 1


@pytest.mark.parametrize("name", ["csp", "mdf"])
def test_seeded_runs_repeat_exactly(name):
    runs = [make_agent(name, seed=3, candidates=200).run(env(), 30) for _ in range(2)]
    assert [r.config for r in runs[0].history] == [r.config for r in runs[1].history]
    assert runs[0].best_latency_s == runs[1].best_latency_s


def test_features_describe_orders_and_tiles():
    f = ScheduleFeatures(ScheduleSpace(get_task("resnet50/conv2")))
    assert len(f.orders) == 5040
    configs = [f.space.tiles.initial_config()] * 3
    x = f.orders_of(configs, np.array([0, 1, 5039]))
    d = 7
    assert x.shape == (3, d * d + d * (d - 1) // 2 + 3 * d)
    assert not np.array_equal(x[0], x[1])
    assert f.tiles(configs).shape == (3, sum(f.space.task.splits))


def test_bad_input_is_a_precise_error():
    with pytest.raises(TypeError, match="CSP and MDF predict schedules: run them on a ScheduleEnv"):
        make_agent("csp").run(TilingEnv(gemm(64, 64, 64), backend=MockBackend()), 40)
    with pytest.raises(ValueError, match=r"needs at least 8 measurements after s0 \(4 for the prediction\), has 5"):
        make_agent("csp", predict_tiles=2, predict_orders=2).run(env(), 6)
    with pytest.raises(ValueError, match="perm_share"):
        make_agent("csp", perm_share=1.5)


@pytest.mark.parametrize("inner", ["felix", "na2c"])
def test_tile_agents_choose_the_order_by_successive_halving(inner):
    e = env()
    agent = make_agent("orders", seed=0, inner=inner, candidates=4)
    result = agent.run(e, 48)
    assert result.num_measurements == 48 and result.stop_reason == "budget"
    candidates = set(agent.rounds[0])  # the four orders of the first round
    assert len(candidates) == 4 and e.space.orders.default_order in candidates
    assert [len(r) for r in agent.rounds] == [4, 2, 1]
    assert {row.config.order for row in result.history[1:]} <= candidates
    # the survivors of each round are the better half of the orders it tried
    first = agent.rounds[0]
    kept = set(agent.rounds[1])
    assert max(first[o] for o in kept) <= min(first[o] for o in set(first) - kept)
    assert result.best_latency_s == e.session.best.latency_s


def test_order_choice_bad_input():
    with pytest.raises(ValueError, match=r"inner must be a tile agent, one of .*got 'csp'"):
        make_agent("orders", inner="csp")
    with pytest.raises(TypeError, match="agent 'orders' tunes schedules: run it on a ScheduleEnv"):
        make_agent("orders", inner="random").run(TilingEnv(gemm(64, 64, 64), backend=MockBackend()), 20)
