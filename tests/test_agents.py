"""The search agents on the mock and replay backends: budgets, optima, seeds, failures, the paper's claim."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import gymnasium
import numpy as np
import pytest

from schedule_gym.agents import SELF_CONTAINED, Budget, make_agent
from schedule_gym.agents.base import HistoryRow
from schedule_gym.backends import LatencyBackend, MeasureResult, MockBackend
from schedule_gym.envs import TilingEnv, gemm_env
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import gemm

NAMES = list(SELF_CONTAINED)
#: small-space settings under which each agent must visit the whole space (G-BFS: every neighbour)
EXHAUSTIVE = {"gbfs": {"rho": None}}


def history_key(result) -> list[tuple]:
    return [(r.index, r.latency_s, r.error_kind) for r in result.history]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("budget", [40, "0.005%"])
def test_agent_spends_exactly_its_budget(name: str, budget) -> None:
    env = gemm_env(1024, 1024, 1024)
    result = make_agent(name, seed=0).run(env, budget)
    expected = 40 if budget == 40 else math.floor(0.00005 * env.space.size)
    assert result.num_measurements == expected == env.session.num_measurements
    assert result.stop_reason == "budget"
    assert len({r.index for r in result.history}) == expected  # unique configs
    assert [r.n for r in result.history] == list(range(1, expected + 1))
    assert result.history[0].config == env.space.initial_config()  # every run measures s0 first
    assert result.s0_latency_s == result.history[0].latency_s
    best = np.minimum.accumulate([r.latency_s for r in result.history])
    assert [r.best_latency_s for r in result.history] == pytest.approx(list(best))
    assert result.best_latency_s == best[-1]
    assert env.session.max_measurements is None  # the environment's own budget is restored


@pytest.mark.parametrize("name", NAMES)
def test_agent_finds_exact_optimum_of_small_space(name: str) -> None:
    task = gemm(32, 16, 32, d_m=2, d_k=2, d_n=2)
    space = TileSpace(task)
    latencies = [r.latency_s for r in MockBackend().measure(task, list(space))]
    optimum = min(latencies)
    env = TilingEnv(task=task)
    result = make_agent(name, seed=3, **EXHAUSTIVE.get(name, {})).run(env, space.size)
    assert result.best_latency_s == optimum
    assert result.best_config == list(space)[int(np.argmin(latencies))]
    assert result.num_measurements == space.size
    assert result.stop_reason == "space_exhausted"


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_run_other_seed_other_run(name: str) -> None:
    runs = [make_agent(name, seed=s).run(gemm_env(512, 512, 512), 60) for s in (7, 7, 8)]
    assert history_key(runs[0]) == history_key(runs[1])
    assert runs[0].best_config == runs[1].best_config
    if name != "grid":  # grid search draws nothing at random
        assert history_key(runs[0]) != history_key(runs[2])


@pytest.mark.parametrize("name", NAMES)
def test_agent_runs_through_wrappers_and_on_the_real_table(name: str) -> None:
    env = gymnasium.make("schedule_gym/GemmTable-v0")
    result = make_agent(name, seed=1).run(env, 30)
    assert result.num_measurements == 30
    assert result.backend == "replay"
    assert all(r.latency_s is not None for r in result.history)
    env.close()


class FlakyBackend(LatencyBackend):
    """The mock model, except that configs with an innermost n factor of 4 fail to build."""

    name = "flaky"
    deterministic = True

    def __init__(self) -> None:
        self.mock = MockBackend()

    def measure(self, task, configs: Sequence, on_result=None) -> list[MeasureResult]:
        out = []
        for position, config in enumerate(configs):
            if config[-1][-1] == 4:
                result = MeasureResult.failure(config, "injected build failure", kind="build")
            else:
                (result,) = self.mock.measure(task, [config])
            out.append(result)
            if on_result is not None:
                on_result(position, result)
        return out


@pytest.mark.parametrize("name", NAMES)
def test_failed_measurements_are_history_rows_not_exceptions(name: str) -> None:
    env = TilingEnv(task=gemm(256, 256, 256), backend=FlakyBackend())
    result = make_agent(name, seed=0).run(env, 120)
    assert result.num_measurements == 120
    failed = [r for r in result.history if r.latency_s is None]
    assert failed and all(r.error_kind == "build" for r in failed)
    assert result.best_config[-1][-1] != 4


@pytest.mark.parametrize("name", NAMES)
def test_ctrl_c_returns_the_run_so_far(name: str) -> None:
    def interrupt(row: HistoryRow, limit: int | None) -> None:
        assert limit == 500
        if row.n == 25:
            raise KeyboardInterrupt

    result = make_agent(name, seed=0).run(gemm_env(1024, 1024, 1024), 500, progress=interrupt)
    assert result.stop_reason == "interrupted"
    assert 25 <= result.num_measurements < 500
    assert result.best_latency_s is not None


def test_time_budget_stops_the_run() -> None:
    result = make_agent("random", seed=0, batch_size=4).run(gemm_env(2048, 2048, 2048), "0.3s")
    assert result.stop_reason == "time"
    assert 1 < result.num_measurements < TileSpace(gemm(2048, 2048, 2048)).size


def test_gbfs_queue_empties_on_a_tiny_space_with_small_rho() -> None:
    env = TilingEnv(task=gemm(8, 8, 8, d_m=2, d_k=1, d_n=2))
    result = make_agent("gbfs", seed=0, rho=1).run(env, 1000)
    assert result.stop_reason in ("converged", "space_exhausted")
    assert result.num_measurements <= env.space.size


def test_paper_claim_gbfs_and_na2c_beat_random_at_a_tenth_of_a_percent() -> None:
    """Zhang et al., Fig. 8(a): at 0.1% of 1024^3, G-BFS and N-A2C find faster configs than random."""
    env = gemm_env(1024, 1024, 1024)
    best = {name: [make_agent(name, seed=s).run(env, "0.1%").best_latency_s for s in range(5)] for name in ("random", "gbfs", "na2c")}
    assert np.median(best["gbfs"]) < np.median(best["random"])
    assert np.median(best["na2c"]) < np.median(best["random"])


def test_result_serialises_to_json(tmp_path) -> None:
    result = make_agent("random", seed=0).run(gemm_env(256, 256, 256), 10)
    path = tmp_path / "result.json"
    result.save_json(path)
    data = json.loads(path.read_text())
    assert data["agent"] == "random" and data["num_measurements"] == 10
    assert len(data["history"]) == 10
    assert data["best_latency_s"] == result.best_latency_s
    assert data["budget"] == {"measurements": 10}
    assert data["params"] == {"batch_size": 16}


@pytest.mark.parametrize(
    ("text", "budget"),
    [("900", Budget(measurements=900)), ("0.1%", Budget(fraction=0.001)), ("90s", Budget(seconds=90.0)),
     ("1.5m", Budget(seconds=90.0)), ("2h", Budget(seconds=7200.0)), (12, Budget(measurements=12))],
)
def test_budget_parse(text, budget) -> None:
    assert Budget.parse(text) == budget


@pytest.mark.parametrize(
    ("text", "message"),
    [("lots", "budget 'lots' is not a count"), ("0", "budget '0' must be positive"),
     ("12.5", "budget '12.5': a measurement count must be a whole number"),
     ("200%", "budget '200%' is more than the whole space (at most 100%)"), ("0s", "budget '0s' must be positive"),
     # a sign is read: a negative budget is not positive (it is a count, a share or a time)
     ("-1", "budget '-1' must be positive"), ("-5s", "budget '-5s' must be positive"), ("-0.1%", "budget '-0.1%' must be positive")],
)
def test_bad_budgets_are_named(text, message) -> None:
    with pytest.raises(ValueError, match=None) as info:
        Budget.parse(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [("nope", {}, "unknown agent 'nope'; known agents: random, gbfs, na2c, felix, nn, xgb, rnn, grid, policy, csp, mdf, orders, transfer"),
     ("gbfs", {"rho": 0}, "rho must be a positive integer or None (all neighbours), got 0"),
     ("gbfs", {"start": "middle"}, "start must be 's0', 'random' or a config, got 'middle'"),
     ("na2c", {"epsilon": 1.5}, "epsilon must be a number in [0.0, 1.0], got 1.5"),
     ("na2c", {"steps": 0}, "steps must be a positive integer, got 0"),
     ("nn", {"sample": 1.5}, "sample as a fraction of the space must be in (0, 1), got 1.5"),
     ("nn", {"target": "speed"}, "target must be 'log' or 'time', got 'speed'"),
     ("random", {"batch_size": 0}, "batch_size must be a positive integer, got 0"),
     ("random", {"seed": -1}, "seed must be a non-negative integer, got -1")],
)
def test_bad_agent_parameters_are_named(name, params, message) -> None:
    with pytest.raises(ValueError) as info:
        make_agent(name, **params)
    assert message in str(info.value)


def test_unknown_agent_parameter_is_named() -> None:
    with pytest.raises(TypeError, match="bad parameters {'rhoo': 3} for agent 'gbfs'"):
        make_agent("gbfs", rhoo=3)


def test_agents_refuse_what_is_not_a_tiling_env() -> None:
    with pytest.raises(TypeError, match="agent 'random' tunes a schedule_gym TilingEnv .* or a MeasureSession, got"):
        make_agent("random").run(gymnasium.make("CartPole-v1"), 10)


@pytest.mark.parametrize("name", NAMES)
def test_agents_drive_a_bare_measurement_session_as_they_drive_an_environment(name: str) -> None:
    task = gemm(64, 64, 64)
    on_env = make_agent(name, seed=3).run(TilingEnv(task), 25)
    session = MeasureSession(task, MockBackend())
    on_session = make_agent(name, seed=3).run(session, 25)
    assert history_key(on_session) == history_key(on_env) and len(on_env.history) == 25
    assert session.num_measurements == 25 and session.best.latency_s == on_env.best_latency_s
    assert session.max_measurements is None  # the session's own budget is restored


def test_gbfs_start_config_is_measured_second() -> None:
    start = ((4, 4, 8, 8), (64, 16), (8, 2, 4, 16))
    result = make_agent("gbfs", seed=0, start=start).run(gemm_env(1024, 1024, 1024), 20)
    assert result.history[1].config == start
