"""Ansor's gradient task scheduler (schedule_gym.models.scheduler): pure Python, no TVM."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from schedule_gym.models.scheduler import (
    NO_RESULT_ROUNDS,
    GradientTaskScheduler,
    RoundResult,
    SchedulerTask,
    run_schedule,
    similarity_tag,
)


def _tasks(*weights: float, similarity: str = "") -> list[SchedulerTask]:
    return [SchedulerTask(f"t{i}", w, 1e9, similarity) for i, w in enumerate(weights)]


def _curve_tuner(curves):
    """``tune_round`` spending what it is asked; task i's best latency is ``curves[i](measurements so far)``."""
    spent = [0] * len(curves)

    def tune_round(i: int, n: int) -> RoundResult:
        spent[i] += n
        return RoundResult(n, curves[i](spent[i]))

    return tune_round


def _rounds_after_warmup(history: list[dict], n_tasks: int) -> Counter:
    return Counter(row["task"] for row in history[n_tasks:])


def test_warmup_visits_every_task_once_in_order():
    scheduler = GradientTaskScheduler(_tasks(1, 5, 2, 9), 8, epsilon=1.0)  # even always-random can't skip it
    order = []
    for _ in range(4):
        i = scheduler.next_task()
        assert scheduler.next_task() == i  # the choice is kept until it is recorded
        order.append(i)
        scheduler.record(i, RoundResult(8, 1e-3))
    assert order == [0, 1, 2, 3]
    assert scheduler.allocation() == [8, 8, 8, 8]
    assert [row["round"] for row in scheduler.history] == [1, 2, 3, 4]


def test_improving_task_gets_most_later_rounds():
    # A: 5 ms falling towards 1 ms as it is tuned; B: converged at 1 ms from its first round.
    tasks = [SchedulerTask("A", 1, 1e9), SchedulerTask("B", 1, 1e9)]
    tuner = _curve_tuner([lambda m: 1e-3 * (1 + 4 * math.exp(-m / 100)), lambda m: 1e-3])
    history = run_schedule(GradientTaskScheduler(tasks, 8, epsilon=0), tuner, 8 * 40)
    later = _rounds_after_warmup(history, 2)
    assert later["A"] > 1.5 * later["B"], later


def test_ten_times_the_weight_gets_more_rounds():
    curve = lambda m: 1e-3 * (1 + 1 / (1 + m / 8))  # noqa: E731  (identical tasks but for their weight)
    tasks = [SchedulerTask("heavy", 10, 1e9), SchedulerTask("light", 1, 1e9)]
    history = run_schedule(GradientTaskScheduler(tasks, 8, epsilon=0), _curve_tuner([curve, curve]), 8 * 40)
    later = _rounds_after_warmup(history, 2)
    assert later["heavy"] > 3 * later["light"], later


def _slow_member_run(similarities: list[str]) -> list[dict]:
    # t0, t1: weight 20, 1 GFLOP in 1 ms (1 TFLOP/s); "slow": weight 1, 1 GFLOP in 10 ms (0.1 TFLOP/s).
    # Latencies never change: only the scheduler's hopes differ.
    tasks = [SchedulerTask("t0", 20, 1e9, similarities[0]), SchedulerTask("t1", 20, 1e9, similarities[1]),
             SchedulerTask("slow", 1, 1e9, similarities[2])]
    latency = [1e-3, 1e-3, 1e-2]
    return run_schedule(GradientTaskScheduler(tasks, 8, epsilon=0), lambda i, n: RoundResult(n, latency[i]), 8 * 20)


def test_task_far_below_its_similar_tasks_flops_attracts_rounds():
    similar = _rounds_after_warmup(_slow_member_run(["conv", "conv", "conv"]), 3)
    unrelated = _rounds_after_warmup(_slow_member_run(["a", "b", "c"]), 3)
    # beta * C / max V_k = 2 ms, far below its 10 ms: with similar tasks it is worth tuning.
    assert similar["slow"] >= 2 * unrelated["slow"], (similar, unrelated)
    # An empty key (TVM's empty tag) is similar to no task: same as unrelated keys.
    assert _rounds_after_warmup(_slow_member_run(["", "", ""]), 3) == unrelated


def test_beta_term_in_the_gradient():
    tasks = [SchedulerTask("fast", 1, 1e9, "conv"), SchedulerTask("slow", 1, 1e9, "conv")]
    scheduler = GradientTaskScheduler(tasks, 8, epsilon=0, alpha=0.0)
    for i, latency in ((0, 1e-3), (1, 1e-2), (1, 1e-2)):
        scheduler.record(i, RoundResult(8, latency))
    # slow, t=2: min(g - g/t = 5 ms, beta * C / max V = 2 ms) - g = -8 ms; fast, t=1: min(0, 2 ms) - 1 ms.
    assert scheduler.gradients() == pytest.approx([-1e-3, -8e-3])
    assert scheduler.next_task() == 1


def test_backward_window_term():
    scheduler = GradientTaskScheduler(_tasks(2), 8, alpha=1.0, backward_window=3)
    for latency in (8e-3, 6e-3, 5e-3):
        scheduler.record(0, RoundResult(8, latency))
        assert scheduler.gradients() == [0.0]  # fewer than window + 1 rounds: no backward term
    scheduler.record(0, RoundResult(8, 2e-3))
    assert scheduler.gradients() == pytest.approx([2 * (2e-3 - 8e-3) / 3])


def test_dead_tasks_are_never_picked_again():
    exhausted = {1: 0}  # task 1's space is empty after the warm-up

    def tune_round(i: int, n: int) -> RoundResult:
        return RoundResult(exhausted.get(i, n), 1e-3 * (i + 1))

    scheduler = GradientTaskScheduler(_tasks(1, 10, 1), 4, epsilon=0.5)
    run_schedule(scheduler, tune_round, 200)
    picked = [row["task_index"] for row in scheduler.history]
    assert picked.count(1) == 1 and scheduler.dead_tasks == {1}
    assert scheduler.allocation()[1] == 0 and sum(scheduler.allocation()) == 200
    with pytest.raises(ValueError, match="task 1 .*'t1'.* is dead"):
        scheduler.record(1, RoundResult(4, 1e-3))


def test_next_task_is_none_when_every_task_is_dead():
    scheduler = GradientTaskScheduler(_tasks(1, 1, 1), 4)
    history = run_schedule(scheduler, lambda i, n: RoundResult(0, None), 100)
    assert [row["task_index"] for row in history] == [0, 1, 2]
    assert all(row["dead"] for row in history)
    assert scheduler.next_task() is None
    assert scheduler.estimated_latency_s is None


def test_task_without_result_is_retried_a_few_rounds_then_left():
    # t1 never yields a valid latency (every config fails) but keeps spending measurements.
    scheduler = GradientTaskScheduler(_tasks(1, 1), 4, epsilon=0)
    history = run_schedule(scheduler, lambda i, n: RoundResult(n, 1e-3 if i == 0 else math.inf), 4 * 30)
    picked = [row["task_index"] for row in history]
    assert picked[:NO_RESULT_ROUNDS + 1] == [0] + [1] * NO_RESULT_ROUNDS  # TVM's placeholder: tried first
    assert picked.count(1) == NO_RESULT_ROUNDS  # then the budget goes elsewhere
    assert 1 not in scheduler.dead_tasks and scheduler.estimated_latency_s is None
    assert history[-1]["best_latency_s"] == 1e-3 and history[-1]["estimated_latency_s"] is None


def test_run_schedule_spends_the_budget_exactly():
    asked = []

    def tune_round(i: int, n: int) -> RoundResult:
        asked.append(n)
        return RoundResult(n, 1e-3)

    scheduler = GradientTaskScheduler(_tasks(1, 2), 16)
    rows = []
    history = run_schedule(scheduler, tune_round, 50, progress=rows.append)
    assert asked == [16, 16, 16, 2]  # the last round is cut to the remainder
    assert sum(scheduler.allocation()) == 50 == history[-1]["total_measurements"]
    assert rows == history == scheduler.history
    assert history[-1]["estimated_latency_s"] == pytest.approx(3e-3)
    assert run_schedule(scheduler, tune_round, 0) == []


def test_seeded_runs_are_identical():
    curves = [lambda m, k=k: 1e-3 * (1 + k * math.exp(-m / 50)) for k in range(4)]

    def run(seed: int, epsilon: float) -> list[dict]:
        scheduler = GradientTaskScheduler(_tasks(1, 3, 2, 5), 8, epsilon=epsilon, seed=seed)
        return run_schedule(scheduler, _curve_tuner(curves), 400)

    assert run(0, 0.0) == run(0, 0.0)
    assert run(0, 0.0) == run(7, 0.0)  # no randomness left with epsilon=0 and unequal gradients
    assert run(3, 0.5) == run(3, 0.5)
    assert any(run(s, 0.5) != run(3, 0.5) for s in range(4))  # the seed does matter with exploration


def test_round_robin_cycles_and_skips_dead_tasks():
    exhausted = set()

    def tune_round(i: int, n: int) -> RoundResult:
        return RoundResult(0 if i in exhausted else n, 1e-3)

    scheduler = GradientTaskScheduler(_tasks(100, 1, 1), 4, strategy="round-robin")  # weights don't matter
    run_schedule(scheduler, tune_round, 4 * 9)
    assert [row["task_index"] for row in scheduler.history] == [0, 1, 2] * 3
    exhausted.add(1)
    run_schedule(scheduler, tune_round, 4 * 4)
    assert [row["task_index"] for row in scheduler.history[9:]] == [0, 1, 2, 0, 2]
    assert scheduler.dead_tasks == {1} and scheduler.allocation() == [20, 12, 20]


# The synthetic model: task i's best latency after m measurements is floor_i + headroom_i * exp(-m / scale_i)
# (weights and headroom differ: the heavy tasks 0 and 3 have most to gain, tasks 1 and 2 have converged).
_MODEL = [  # (weight, floor s, headroom s, scale in measurements)
    (10, 1e-3, 5e-3, 60),
    (1, 1e-3, 1e-4, 60),
    (1, 2e-3, 2e-4, 60),
    (5, 5e-4, 3e-3, 60),
    (2, 1e-3, 1e-3, 200),
]


def _model_latency(strategy: str, seed: int) -> float:
    tasks = [SchedulerTask(f"t{k}", w, 1e9) for k, (w, _, _, _) in enumerate(_MODEL)]
    curves = [lambda m, f=f, h=h, s=s: f + h * math.exp(-m / s) for _, f, h, s in _MODEL]
    scheduler = GradientTaskScheduler(tasks, 16, strategy=strategy, seed=seed)
    run_schedule(scheduler, _curve_tuner(curves), 640)
    assert scheduler.estimated_latency_s == pytest.approx(
        math.fsum(w * c(m) for (w, *_), c, m in zip(_MODEL, curves, scheduler.allocation())))
    return scheduler.estimated_latency_s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_beats_round_robin_on_a_synthetic_model(seed):
    gradient, round_robin = _model_latency("gradient", seed), _model_latency("round-robin", seed)
    assert gradient < 0.9 * round_robin, (gradient, round_robin)


def test_similarity_tag_is_tvms():
    assert similarity_tag("conv2d", 1e9) == f"conv2d_{int(math.log(1e9 + 1, 1.618))}"
    assert similarity_tag("", 1e9) == ""


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: SchedulerTask("a", 0, 1e9), ValueError, "weight must be finite and > 0, got 0$"),
    (lambda: SchedulerTask("a", -2.5, 1e9), ValueError, "-2.5"),
    (lambda: SchedulerTask("a", 1, -1), ValueError, "'a' flops must be finite and > 0, got -1$"),
    (lambda: SchedulerTask("a", 1, math.inf), ValueError, "flops .* inf"),
    (lambda: SchedulerTask("a", "1", 1e9), TypeError, "weight must be a number, got str '1'"),
    (lambda: SchedulerTask("a", True, 1e9), TypeError, "got bool True"),
    (lambda: SchedulerTask("", 1, 1e9), ValueError, "name must not be empty"),
    (lambda: SchedulerTask(3, 1, 1e9), TypeError, "name must be a str, got int 3"),
    (lambda: SchedulerTask("a", 1, 1e9, None), TypeError, "similarity must be a str, got NoneType None"),
    (lambda: GradientTaskScheduler([]), ValueError, "tasks must not be empty"),
    (lambda: GradientTaskScheduler("ab"), TypeError, "tasks must be a sequence"),
    (lambda: GradientTaskScheduler([("a", 1, 1)]), TypeError, r"tasks\[0\] must be a SchedulerTask, got tuple"),
    (lambda: GradientTaskScheduler(_tasks(1) + _tasks(2)), ValueError, r"duplicate task name 't0' \(tasks\[1\]\)"),
    (lambda: GradientTaskScheduler(_tasks(1), strategy="greedy"), ValueError, "unknown strategy 'greedy'"),
    (lambda: GradientTaskScheduler(_tasks(1), 0), ValueError, "round_measurements must be >= 1, got 0"),
    (lambda: GradientTaskScheduler(_tasks(1), 2.0), TypeError, "round_measurements must be an int, got float 2.0"),
    (lambda: GradientTaskScheduler(_tasks(1), alpha=1.5), ValueError, r"alpha must be in \[0, 1\], got 1.5"),
    (lambda: GradientTaskScheduler(_tasks(1), alpha=-0.1), ValueError, "alpha .* got -0.1"),
    (lambda: GradientTaskScheduler(_tasks(1), epsilon=2), ValueError, r"epsilon must be in \[0, 1\], got 2"),
    (lambda: GradientTaskScheduler(_tasks(1), beta=0), ValueError, "beta must be finite and > 0, got 0$"),
    (lambda: GradientTaskScheduler(_tasks(1), backward_window=0), ValueError, "backward_window must be >= 1, got 0"),
    (lambda: GradientTaskScheduler(_tasks(1), seed=-1), ValueError, "seed must be >= 0, got -1"),
    (lambda: GradientTaskScheduler(_tasks(1), seed="x"), TypeError, "seed must be an int or None, got str 'x'"),
    (lambda: RoundResult(-1, 1e-3), ValueError, "measurements must be >= 0, got -1"),
    (lambda: RoundResult(1.5, 1e-3), TypeError, "measurements must be an int, got float 1.5"),
    (lambda: RoundResult(1, 0.0), ValueError, "best_latency_s must be > 0 .* got 0.0"),
    (lambda: RoundResult(1, math.nan), ValueError, "best_latency_s .* got nan"),
    (lambda: RoundResult(1, "fast"), TypeError, "best_latency_s must be a number or None, got str 'fast'"),
    (lambda: GradientTaskScheduler(_tasks(1, 1)).record(2, RoundResult(1, 1e-3)), ValueError,
     "task_index 2 out of range: 2 tasks"),
    (lambda: GradientTaskScheduler(_tasks(1, 1)).record(-1, RoundResult(1, 1e-3)), ValueError, "task_index -1"),
    (lambda: GradientTaskScheduler(_tasks(1)).record("0", RoundResult(1, 1e-3)), TypeError,
     "task_index must be an int, got str '0'"),
    (lambda: GradientTaskScheduler(_tasks(1)).record(0, (1, 1e-3)), TypeError, "result must be a RoundResult, got tuple"),
    (lambda: run_schedule(GradientTaskScheduler(_tasks(1)), lambda i, n: RoundResult(n), -5), ValueError,
     "total_measurements must be >= 0, got -5"),
    (lambda: run_schedule(GradientTaskScheduler(_tasks(1)), lambda i, n: (n, 1e-3), 5), TypeError,
     r"tune_round\(0, 5\) must return a RoundResult, got tuple"),
    (lambda: run_schedule(object(), lambda i, n: RoundResult(n), 5), TypeError,
     "scheduler must be a GradientTaskScheduler, got object"),
])
def test_bad_inputs_name_the_bad_value(make, error, message):
    with pytest.raises(error, match=message):
        make()


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(
    weights=st.lists(st.floats(0.1, 100), min_size=1, max_size=6),
    space=st.lists(st.integers(0, 60), min_size=6, max_size=6),
    round_measurements=st.integers(1, 20),
    total=st.integers(0, 300),
    seed=st.integers(0, 2**32),
    strategy=st.sampled_from(["gradient", "round-robin"]),
)
def test_allocation_is_what_was_spent_within_the_budget(weights, space, round_measurements, total, seed, strategy):
    """Task i has ``space[i]`` configs: a round measures what is asked or what is left (then 0: dead)."""
    left = list(space[:len(weights)])

    def tune_round(i: int, n: int) -> RoundResult:
        assert 1 <= n <= round_measurements
        spent = min(n, left[i])
        left[i] -= spent
        return RoundResult(spent, 1e-3 * (1 + left[i]))

    scheduler = GradientTaskScheduler(_tasks(*weights), round_measurements, seed=seed, strategy=strategy)
    history = run_schedule(scheduler, tune_round, total)
    allocation = scheduler.allocation()
    assert sum(allocation) == sum(row["measurements"] for row in history) <= total
    assert allocation == [s - left_i for s, left_i in zip(space, left)]
    assert sum(allocation) == min(total, sum(space[:len(weights)]))  # stopped by the budget or all dead
    for i in scheduler.dead_tasks:  # a dead task is never tuned after its empty round
        rows = [k for k, row in enumerate(history) if row["task_index"] == i]
        assert history[rows[-1]]["measurements"] == 0
