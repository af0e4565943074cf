"""Censored measurements: "slower than a bound", never a best, measured again in full when asked.

The real-kernel tests use the untiled s0 of a 512^3 GEMM (tens of times slower than a register-tiled
config on every CPU we have met) against a bound of twice the fast config's latency, so a loaded machine
cannot move either side of the rule. The other tests build censored records by hand and replay them.
"""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from schedule_gym import TilingEnv, gemm
from schedule_gym.backends import MockBackend, ReplayBackend
from schedule_gym.errors import MissingRecordError
from schedule_gym.records import CENSORED_RECORD_SCHEMA, RECORD_SCHEMA, RecordStore
from schedule_gym.session import MeasureSession
from schedule_gym.types import MeasureResult

SMALL = gemm(8, 8, 8, 3, 2, 3)


# ------------------------------------------------------------------------------------- values
def test_a_censored_result_is_a_bound_and_nothing_else():
    config = ((8, 1, 1), (8, 1), (8, 1, 1))
    r = MeasureResult.censored_at(config, 0.5, build_s=0.1, run_s=0.6)
    assert r.ok and r.censored and not r.exact and not r.coarse and r.costs_s == () and r.latency_s == 0.5
    assert MeasureResult(config, 0.5).exact
    with pytest.raises(ValueError, match="a censored MeasureResult has a bound as latency_s and nothing else"):
        MeasureResult(config, 0.5, costs_s=(0.7,), censored=True)
    with pytest.raises(ValueError, match="coarse=True"):
        MeasureResult(config, 0.5, coarse=True, censored=True)
    with pytest.raises(ValueError, match="no error, not coarse, no costs_s; got error='x'"):
        MeasureResult(config, None, error="x", censored=True)


def test_bad_protocol_values_are_precise_errors():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.protocol import MeasureProtocol

    for ratio in (1, 0.5, True, math.inf, "10"):
        with pytest.raises(ValueError, match=r"MeasureProtocol.censor_ratio must be a finite number above 1 .* got "):
            MeasureProtocol(censor_ratio=ratio)
    for name in ("censor_floor_s", "warmup_s"):
        for value in (-0.1, math.nan, "1"):
            with pytest.raises(ValueError, match=f"MeasureProtocol.{name} must be a non-negative number, got"):
                MeasureProtocol(**{name: value})
    with pytest.raises(ValueError, match="MeasureProtocol.warmup_s must be at most 10 s, got 11"):
        MeasureProtocol(warmup_s=11)
    protocol = MeasureProtocol()
    assert (protocol.censor_ratio, protocol.censor_floor_s, protocol.warmup_s) == (5.0, 0.05, 0.2)
    assert protocol.censor_bound_s(None) is None  # nothing exact yet: nothing censored
    assert protocol.censor_bound_s(0.001) == 0.05 and protocol.censor_bound_s(0.05) == pytest.approx(0.25)
    assert MeasureProtocol(censor_ratio=None).censor_bound_s(1.0) is None
    assert MeasureProtocol.from_value(protocol.to_dict()) == protocol  # recorded with the protocol


# ------------------------------------------------------------------------------------ records
def _table(
    tmp_path, censor: set[int], name: str = "table.jsonl", factor: float = 2.0
) -> tuple[str, dict[int, MeasureResult]]:
    """Records of every config of SMALL from the mock (under the mock's own record context, so that a mock
    delegate can add to them); those in ``censor`` censored at ``factor`` times their latency."""
    mock, path = MockBackend(), tmp_path / name
    space = mock.space(SMALL)
    target, template = mock.record_context(SMALL)
    store = RecordStore(path, fsync=False)
    results = {}
    for i, result in enumerate(mock.measure(SMALL, [space.config(i) for i in range(space.size)])):
        if i in censor:
            result = MeasureResult.censored_at(result.config, factor * result.latency_s)
        store.append(SMALL, "mock", target, template, result, {"censor_ratio": 10.0})
        results[i] = result
    store.close()
    return str(path), results


def test_records_round_trip_censored_results_and_old_records_load(tmp_path):
    path, written = _table(tmp_path, {3})
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert lines[3]["schema"] == CENSORED_RECORD_SCHEMA and lines[3]["censored"] is True
    assert all(d["schema"] == RECORD_SCHEMA and "censored" not in d for i, d in enumerate(lines) if i != 3)
    store = RecordStore(path)
    loaded = {r.result.config: r.result for r in store}
    assert loaded[written[3].config] == written[3] and loaded[written[3].config].censored
    assert loaded[written[4].config] == written[4] and not loaded[written[4].config].censored
    # a record written before censoring existed: schema v1, no field
    old = dict(lines[4])
    old.pop("protocol")
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    (record,) = RecordStore(tmp_path / "old.jsonl")
    assert record.result == written[4] and not record.result.censored
    bad = dict(lines[3], censored="yes")
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(Exception, match="censored must be true or false, got 'yes'"):
        RecordStore(tmp_path / "bad.jsonl")


def test_replay_serves_censored_records_but_not_for_an_exact_request(tmp_path):
    path, written = _table(tmp_path, {3})
    config = written[3].config
    replay = ReplayBackend(path)
    (served,) = replay.measure(SMALL, [config])
    assert served.censored
    with pytest.raises(MissingRecordError, match="has only a censored record"):
        replay.measure_exact(SMALL, [config])
    # with a delegate the exact request is measured, appended, and replaces the censored record
    with ReplayBackend(path, delegate=MockBackend()) as backend:
        (exact,) = backend.measure_exact(SMALL, [config])
        assert exact.exact and exact.latency_s == pytest.approx(written[3].latency_s / 2)
        assert backend.measure(SMALL, [config])[0] == exact
    assert ReplayBackend(path).measure_exact(SMALL, [config])[0] == exact


# ------------------------------------------------------------------------ session, env, agents
def test_session_never_keeps_a_censored_best_and_measures_it_again_when_asked(tmp_path):
    # the censored config's bound is below every other latency (a bound no backend would give: it is
    # only there to show that a censored result is never the best, whatever its number)
    space = MockBackend().space(SMALL)
    mock_latency = MockBackend().measure(SMALL, [space.config(i) for i in range(space.size)])
    fastest = min(range(space.size), key=lambda i: mock_latency[i].latency_s)
    path, written = _table(tmp_path, {fastest}, factor=0.5)
    assert written[fastest].latency_s < min(r.latency_s for i, r in written.items() if i != fastest)
    session = MeasureSession(SMALL, ReplayBackend(path, delegate=MockBackend()))
    seen = []
    session.measure(range(space.size), on_result=lambda i, r: seen.append((i, r.censored)))
    assert session.best is not None and session.best.exact and session.best_index != fastest
    assert (fastest, True) in seen
    count = session.num_measurements
    (again,) = session.measure([fastest], on_result=lambda i, r: seen.append((i, r.censored)), exact=True)
    assert again.exact and again.latency_s == mock_latency[fastest].latency_s
    assert session.result(fastest) == again and seen[-1] == (fastest, False)
    assert session.num_measurements == count  # counted once
    assert session.best.latency_s == again.latency_s  # now that it is exact, it is (level with) the best
    assert session.measure([fastest], exact=True)[0] == again  # exact results are not measured again


@pytest.mark.parametrize("reward", ["inverse", "log_speedup_s0", "log_speedup_prev"])
def test_env_rewards_a_censored_config_at_its_bound(tmp_path, reward):
    env = TilingEnv(SMALL, backend=ReplayBackend(_table(tmp_path, set())[0]))
    # censor the first config a step from s0 reaches
    env.reset(seed=0)
    action = int(np.flatnonzero(env.action_masks())[0])
    _, _, _, _, info = env.step(action)
    target = env.space.index(info["config"])
    path, written = _table(tmp_path, {target}, "censored.jsonl")
    env = TilingEnv(SMALL, backend=ReplayBackend(path), reward=reward)
    _, info0 = env.reset(seed=0)
    s0 = info0["latency_s"]
    _, reward_value, _, _, info = env.step(action)
    bound = written[target].latency_s
    assert info["censored"] and info["latency_s"] == bound
    expected = {"inverse": s0 / bound, "log_speedup_s0": math.log(s0 / bound), "log_speedup_prev": math.log(s0 / bound)}
    assert reward_value == pytest.approx(expected[reward])
    assert "latency: > " in env.render_text()


def test_env_reference_is_never_censored(tmp_path):
    space = MockBackend().space(SMALL)
    s0 = space.index(space.initial_config())
    path, written = _table(tmp_path, {s0})
    with pytest.raises(MissingRecordError, match="has only a censored record"):
        TilingEnv(SMALL, backend=ReplayBackend(path)).reset(seed=0)
    env = TilingEnv(SMALL, backend=ReplayBackend(path, delegate=MockBackend()))
    _, info = env.reset(seed=0)
    assert not info["censored"] and info["latency_s"] == pytest.approx(written[s0].latency_s / 2)


def test_agents_mark_censored_rows_and_never_report_them_best(tmp_path):
    from schedule_gym.agents import make_agent

    space = MockBackend().space(SMALL)
    latency = MockBackend().measure(SMALL, [space.config(i) for i in range(space.size)])
    fastest = min(range(space.size), key=lambda i: latency[i].latency_s)
    path, _ = _table(tmp_path, {fastest}, factor=0.5)
    result = make_agent("random", seed=0).run(MeasureSession(SMALL, ReplayBackend(path)), budget=space.size)
    rows = {row.index: row for row in result.history}
    assert rows[fastest].censored and not any(r.censored for i, r in rows.items() if i != fastest)
    assert result.best_config != space.config(fastest)
    assert result.to_dict()["history"][result.history.index(rows[fastest])]["censored"] is True


# ------------------------------------------------------------------------------ real kernels
FAST = ((4, 4, 4, 8), (32, 16), (1, 4, 4, 32))
S0 = ((512, 1, 1, 1), (512, 1), (512, 1, 1, 1))


@pytest.mark.tvm
def test_a_slow_kernel_is_stopped_censored_never_best_and_measured_in_full_when_asked():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend
    from schedule_gym.backends.tvm.runner import runner_facts
    from schedule_gym.backends.tvm.workers import zygote_pid

    task = gemm(512, 512, 512)
    backend = TVMBackend(protocol={"censor_ratio": 2.0, "censor_floor_s": 0.0, "min_repeat_ms": 5, "run_timeout_s": 20.0})
    try:
        session = MeasureSession(task, backend)
        (fast,) = session.measure([FAST])
        assert fast.exact and not fast.coarse, fast
        runner_pid = backend._runner._pid
        (slow,) = session.measure([S0])
        assert slow.ok and slow.censored and slow.costs_s == () and not slow.coarse
        assert slow.latency_s == pytest.approx(2.0 * fast.latency_s)  # the bound, no figure of its own
        assert backend._runner._pid != runner_pid  # the runner was killed at the bound and replaced
        # the replacement was forked with the task's inputs and reference (made once, in the zygote), made
        # ready without a warm-up (the killed kernel kept the cores busy), and runs OpenBLAS on one thread;
        # nothing in it (nor in the zygote it was forked from) asked torch about CUDA, which would leave a
        # forked runner unable to use a GPU
        facts = backend._runner.call(runner_facts, (), 30.0)
        assert facts["pid"] == backend._runner._pid and facts["inputs_key"] == task.key
        assert facts["inputs_made_by"] not in (facts["pid"], os.getpid()) and facts["warm"]
        assert facts["inputs_made_by"] == zygote_pid()  # the zygote, which the RPC soak does not count as leaked
        assert facts["OPENBLAS_NUM_THREADS"] == "1" and facts["asked_torch_about_cuda"] is False
        assert session.best == fast and backend._best_s[task.key] == fast.latency_s
        # a later exact request measures it in full: far slower than the bound
        (exact,) = session.measure([S0], exact=True)
        assert exact.exact and exact.latency_s > slow.latency_s and session.result(S0) == exact
        assert session.best == fast
        # and the runner (replaced after the kill) still checks and times kernels
        (again,) = backend.measure_exact(task, [FAST])
        assert again.exact and not again.coarse, again
    finally:
        backend.close()
