"""Re-timing each task's finalists after tuning (``schedule_gym.models.finalists``, ``tune_model(finalists=...)``):
the pick is the lowest median of fresh timings, a failing round is left out, and nothing is re-timed where there
is no hardware to time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from schedule_gym.backends import LatencyBackend, MockBackend
from schedule_gym.models.finalists import retime_finalists
from schedule_gym.tasks import gemm
from schedule_gym.types import Config, MeasureResult


class Scripted(LatencyBackend):
    """Hardware whose fresh timings are scripted per config: a list of latencies (None: the run fails) served in
    turn; every call's order is kept."""

    name = "scripted"
    measures_hardware = True

    def __init__(self, script: dict[Config, list[float | None]]) -> None:
        self.script = {c: list(v) for c, v in script.items()}
        self.calls: list[list[Config]] = []

    def measure(self, task, configs: Sequence[Config], on_result=None) -> list[MeasureResult]:
        self.calls.append(list(configs))
        out = []
        for config in configs:
            latency = self.script[config].pop(0)
            out.append(MeasureResult(config, latency) if latency is not None
                       else MeasureResult.failure(config, "run failed: scripted", "run"))
        return out


TASK = gemm(64, 64, 64)
A, B, C = (((1, 1, 64), (1, 64), (1, 1, 64)), ((1, 2, 32), (1, 64), (1, 1, 64)), ((1, 4, 16), (1, 64), (1, 1, 64)))


def tuned(*pairs: tuple[Config, float]) -> list[MeasureResult]:
    return [MeasureResult(config, latency) for config, latency in pairs]


def test_the_pick_is_the_lowest_median_of_the_rounds_taken_in_rotated_order() -> None:
    # A was fastest in tuning (a lucky moment); timed again it is the slowest; C fails one round
    backend = Scripted({A: [3.0, 3.1, 2.9], B: [2.0, 2.2, 1.9], C: [None, 1.8, 2.5]})
    (table,) = retime_finalists(backend, [(TASK, tuned((A, 1.0), (B, 1.1), (C, 1.2)))], rounds=3)
    assert [f.config for f in table] == [B, A, C]  # the pick, then the others in their tuned order
    assert [f.retimed_s for f in table] == [2.0, 3.0, pytest.approx(2.15)]  # C's failed round is left out
    assert [f.tuned_s for f in table] == [1.1, 1.0, 1.2]
    assert table[2].rounds_s == [None, 1.8, 2.5]
    assert backend.calls == [[A, B, C], [B, C, A], [C, A, B]]  # no config always first
    assert table[0].to_dict() == {"config": [list(f) for f in B], "tuned_s": 1.1, "rounds_s": [2.0, 2.2, 1.9],
                                  "retimed_s": 2.0}


def test_rounds_go_over_every_task_before_the_next_round() -> None:
    other = gemm(32, 32, 32)
    a, b = ((1, 1, 32), (1, 32), (1, 1, 32)), ((1, 2, 16), (1, 32), (1, 1, 32))
    backend = Scripted({A: [1.0, 1.0], B: [2.0, 2.0], a: [1.5, 1.0], b: [1.2, 1.2]})
    tables = retime_finalists(backend, [(TASK, tuned((A, 1.0), (B, 1.0))), (other, tuned((a, 1.0), (b, 1.1)))],
                              rounds=2)
    assert backend.calls == [[A, B], [a, b], [B, A], [b, a]]
    assert [f.config for f in tables[0]] == [A, B]
    assert [f.config for f in tables[1]] == [b, a]  # b: 1.2; a: median of 1.5 and 1.0 = 1.25


def test_equal_medians_keep_the_tuned_order_and_failing_finalists_keep_the_tuned_pick() -> None:
    backend = Scripted({A: [2.0], B: [2.0], C: [None]})
    ties, failing = retime_finalists(backend, [(TASK, tuned((A, 1.0), (B, 1.1))), (gemm(64, 64, 32), tuned((C, 1.0)))],
                                     rounds=1)
    assert [f.config for f in ties] == [A, B]
    assert [f.config for f in failing] == [C] and failing[0].retimed_s is None


@pytest.mark.parametrize("rounds", [0, -1, 1.5, True])
def test_bad_rounds_are_named(rounds) -> None:
    with pytest.raises(ValueError, match=f"rounds must be a positive number.*{rounds!r}"):
        retime_finalists(Scripted({}), [], rounds=rounds)


class SlowWhenTimedAgain(LatencyBackend):
    """The mock as hardware, whose timings of configs it measured before read every task's fastest config 10 times
    slower (a measurement taken in a quiet moment that timing it again does not confirm)."""

    name = "slow-when-timed-again"
    measures_hardware = True

    def __init__(self) -> None:
        self.mock = MockBackend()
        self.fastest: dict[str, tuple[float, Config]] = {}
        self.seen: set[tuple[str, Config]] = set()
        self.retimed = 0

    def measure(self, task, configs, on_result=None):
        if all((task.key, c) in self.seen for c in configs):  # timed again
            self.retimed += len(configs)
            return [MeasureResult(r.config, r.latency_s * (10 if r.config == self.fastest[task.key][1] else 1))
                    for r in self.mock.measure(task, configs)]
        results = self.mock.measure(task, configs, on_result)
        for r in results:
            self.seen.add((task.key, r.config))
            if r.exact and (task.key not in self.fastest or r.latency_s < self.fastest[task.key][0]):
                self.fastest[task.key] = (r.latency_s, r.config)
        return results


def test_tune_model_builds_the_re_timed_picks_and_reports_them() -> None:
    pytest.importorskip("torch")
    from schedule_gym.models.pipeline import load_model
    from schedule_gym.models.tuning import tune_model

    mapped = load_model("tiny-cnn").mapped
    backend = SlowWhenTimedAgain()
    plain = tune_model(mapped, 48, agent="random", backend=backend, round_measurements=8, finalists=0)
    assert backend.retimed == 0 and all(not t.finalists and t.tuned_config == t.best_config for t in plain.tasks)
    backend = SlowWhenTimedAgain()
    result = tune_model(mapped, 48, agent="random", backend=backend, round_measurements=8, finalist_rounds=2)
    assert result.measurements == 48  # the re-timing measures no new config
    assert backend.retimed == 2 * sum(len(t.finalists) for t in result.tasks)
    for task, before in zip(result.tasks, plain.tasks):
        assert len(task.finalists) == 3 and all(len(f.rounds_s) == 2 for f in task.finalists)
        assert task.tuned_config == before.best_config  # the same search (seeded); its fastest is now refuted
        assert task.best_config == task.finalists[0].config != task.tuned_config
        assert task.best_latency_s == task.finalists[0].retimed_s
        assert task.to_dict()["finalists"][0]["config"] == [list(f) for f in task.best_config]
    assert result.estimated_latency_s == pytest.approx(sum(t.weight * t.best_latency_s for t in result.tasks))
    assert result.changed_picks == [t.name for t in result.tasks] and plain.changed_picks == []
    assert result.tuned_configs == plain.configs
    # the mock is no hardware: nothing to time again
    mock = tune_model(mapped, 48, agent="random", backend="mock", round_measurements=8)
    assert all(not t.finalists for t in mock.tasks)
    with pytest.raises(ValueError, match="finalists must be a non-negative.*-1"):
        tune_model(mapped, 48, backend="mock", finalists=-1)
    with pytest.raises(ValueError, match="finalist_rounds must be a positive.*0"):
        tune_model(mapped, 48, backend="mock", finalist_rounds=0)


def test_a_resumed_run_with_a_smaller_budget_takes_the_records_fastest_for_tasks_without_a_round(tmp_path) -> None:
    """A task the resumed run's budget gives no round keeps what the records hold (not the mock's untuned pick),
    and its finalists, on hardware, are the records' fastest."""
    pytest.importorskip("torch")
    from schedule_gym.backends.replay import ReplayBackend
    from schedule_gym.models.pipeline import load_model
    from schedule_gym.models.tuning import tune_model
    from schedule_gym.records import RecordStore

    mapped = load_model("tiny-cnn").mapped
    records = tmp_path / "records.jsonl"
    full = tune_model(mapped, 48, agent="random", backend="mock", records=str(records), round_measurements=8)
    assert all(t.best_config is not None for t in full.tasks)
    lines = records.read_text().splitlines()
    small = tune_model(mapped, 8, agent="random", backend="mock", records=str(records), round_measurements=8)
    assert records.read_text().splitlines() == lines  # nothing measured again
    without_round = [t for t in small.tasks if t.measurements == 0]
    assert without_round and small.configs.keys() == full.configs.keys()
    store = RecordStore(records)
    for task, model_task in ((t, next(m for m in mapped.tasks if m.task.name == t.name)) for t in without_round):
        exact = [r.result for r in store.records_of(model_task.task) if r.result.exact]
        fastest = min(exact, key=lambda r: r.latency_s)
        assert task.best_config == fastest.config and task.best_latency_s == fastest.latency_s
    # on hardware (a backend that measures it), those tasks' finalists are the records' fastest, timed again
    class RecordedByTheMock(SlowWhenTimedAgain):  # its measurements are the mock's: so are its records' context
        def record_context(self, task):
            return self.mock.record_context(task)

    backend = ReplayBackend(str(records), delegate=RecordedByTheMock())
    retimed = tune_model(mapped, 8, agent="random", backend=backend, round_measurements=8)
    assert any(t.measurements == 0 and t.finalists for t in retimed.tasks)
    for task in retimed.tasks:
        if task.measurements == 0:
            model_task = next(m for m in mapped.tasks if m.task.name == task.name)
            recorded = [r.config for r in backend.recorded(model_task.task)][:3]
            assert [f.config for f in sorted(task.finalists, key=lambda f: f.tuned_s)] == recorded
