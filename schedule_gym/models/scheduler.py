"""Ansor's gradient-based task scheduler: a total measurement budget spread over a model's tuning tasks.

Zheng et al., "Ansor: Generating High-Performance Tensor Programs for Deep Learning" (OSDI 2020),
Section 6 "Task Scheduler"; the reference implementation is TVM's
``python/tvm/auto_scheduler/task_scheduler.py`` (``TaskScheduler.tune`` and ``_tune_task``), which this
module follows in pure Python (NumPy only, no TVM import).

The objective is the model's estimated end-to-end latency ``f = sum_i w_i * g_i``: ``g_i`` is the best
latency found so far for task ``i`` and ``w_i`` how many times the model runs it. Tuning goes in
*rounds*: a round gives one task ``round_measurements`` new measurements.

1. **Warm-up**: every task gets one round, in order (TVM's round-robin warm-up).
2. Then, with ``strategy="gradient"``, the task with the smallest (most negative) gradient is tuned
   next (Section 6.2; ``t_i`` and ``Δt`` are counted in rounds, as TVM's ``task_cts``)::

       df/dt_i ≈ w_i * ( alpha * (g_i(t_i) - g_i(t_i - Δt)) / Δt
                         + (1 - alpha) * ( min(g_i(t_i) - g_i(t_i) / t_i,  beta * C_i / max_{k in N(i)} V_k)
                                           - g_i(t_i) ) )

   which is the paper's ``min(-g_i/t_i, beta*C_i/max V_k - g_i)`` written as TVM does. ``C_i`` is the
   task's FLOP count, ``V_k = C_k / g_k`` the FLOP/s achieved by the similar tasks ``N(i)`` (the tasks with
   the same :attr:`SchedulerTask.similarity`, the task itself included). The backward term is 0 until a
   task has had ``backward_window + 1`` rounds; the ``V_k`` term is used only in a group of two or more
   tasks (an empty key, like TVM's empty tag, makes a task similar to no other). ``w_i`` is TVM's
   ``chain_grad`` (``df/dg_i`` of the weighted sum). With probability ``epsilon`` a random live task is
   drawn instead (ε-greedy exploration, Section 6.2); when every live gradient is equal, one is drawn at
   random (TVM's ``np.random.choice``). With ``strategy="round-robin"`` the live tasks are cycled.
3. A round that spends **0 new measurements** marks its task **dead** (TVM's ``dead_tasks``: its space
   is exhausted); a dead task is never picked again and :meth:`GradientTaskScheduler.next_task` returns
   ``None`` when every task is dead.
4. A task moved out of its similarity group when it has had more than 5 rounds more than any other
   task of the group and still reaches less than ``1/beta`` of the group's best FLOP/s (TVM's
   ``_adjust_similarity_group``: it is not actually similar).

Tasks without a valid result (``best_latency_s`` ``None`` or infinite): TVM gives them a placeholder
latency of 1e10 s, whose ``-g/t`` term makes them the scheduler's first choice. Here that placeholder
(:data:`NO_RESULT_LATENCY_S`) is used for a task's first :data:`NO_RESULT_ROUNDS` rounds; after that a
task still without a result gets gradient 0: it stays live (ε-greedy draws and round-robin still visit
it) but the budget is no longer poured into it (TVM would keep picking it until its space ran out). The
backward term is 0 while either end of its window has no result (TVM would subtract the 1e10
placeholder). ``max V_k`` is taken over the group's tasks that have a result.

TVM's ``TaskScheduler`` has no ε-greedy draw (only the random pick on equal gradients); ``epsilon=0``
gives its behaviour. Randomness comes only from ``np.random.default_rng(seed)``: a scheduler is
deterministic for a seed.

Example::

    scheduler = GradientTaskScheduler([SchedulerTask("conv", 3, 1e9, "conv2d"), ...], 16)
    history = run_schedule(scheduler, lambda i, n: my_tuner(i, n), total_measurements=1000)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NO_RESULT_LATENCY_S",
    "NO_RESULT_ROUNDS",
    "STRATEGIES",
    "GradientTaskScheduler",
    "RoundResult",
    "SchedulerTask",
    "run_schedule",
    "similarity_tag",
]

STRATEGIES = ("gradient", "round-robin")
"""The scheduling strategies (TVM's names)."""

NO_RESULT_LATENCY_S = 1e10
"""The latency a task without a valid result is given in its gradient (TVM's ``best_costs`` start value)."""

NO_RESULT_ROUNDS = 3
"""Rounds during which a task without a valid result keeps the priority the placeholder latency gives it."""

# TVM's _adjust_similarity_group: a task leaves its group after this many rounds more than any other.
_REGROUP_EXTRA_ROUNDS = 5


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_finite(owner: str, field: str, value: object) -> float:
    if not _is_number(value):
        raise TypeError(f"{owner} {field} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{owner} {field} must be finite and > 0, got {value!r}")
    return number


def similarity_tag(op: str, flops: float, log_base: float = 1.618) -> str:
    """A similarity key as TVM's ``derive_similarity_tag``: the operator and its FLOP count's log bucket.

    Args:
        op: the operator's tag (``"conv2d"``...); ``""`` gives ``""`` (similar to no task).
        flops: the task's FLOP count (> 0).
        log_base: the base of the logarithm that buckets FLOP counts (TVM: 1.618).

    Returns:
        ``"<op>_<int(log_base(flops + 1))>"``, or ``""`` when ``op`` is empty.
    """
    if not isinstance(op, str):
        raise TypeError(f"similarity_tag op must be a str, got {type(op).__name__} {op!r}")
    flops = _positive_finite("similarity_tag", "flops", flops)
    log_base = _positive_finite("similarity_tag", "log_base", log_base)
    if log_base == 1.0:
        raise ValueError("similarity_tag log_base must not be 1")
    return f"{op}_{int(math.log(flops + 1, log_base))}" if op else ""


@dataclass(frozen=True)
class SchedulerTask:
    """One tuning task as the scheduler sees it.

    Attributes:
        name: unique name of the task.
        weight: how many times the model runs the task per inference (> 0).
        flops: the task's floating-point operation count (> 0), ``C_i`` of the paper.
        similarity: tasks with the same non-empty key are similar (they share the ``V_k`` term); ``""``
            makes the task similar to no other. :func:`similarity_tag` builds TVM's key.
    """

    name: str
    weight: float
    flops: float
    similarity: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"SchedulerTask name must be a str, got {type(self.name).__name__} {self.name!r}")
        if not self.name:
            raise ValueError("SchedulerTask name must not be empty, got ''")
        object.__setattr__(self, "weight", _positive_finite(f"SchedulerTask {self.name!r}", "weight", self.weight))
        object.__setattr__(self, "flops", _positive_finite(f"SchedulerTask {self.name!r}", "flops", self.flops))
        if not isinstance(self.similarity, str):
            raise TypeError(f"SchedulerTask {self.name!r} similarity must be a str, "
                            f"got {type(self.similarity).__name__} {self.similarity!r}")


@dataclass
class RoundResult:
    """What one round of tuning a task returns.

    Attributes:
        measurements: new measurements the round spent (>= 0); 0 marks the task dead (nothing left).
        best_latency_s: the task's best latency so far in seconds, over all its rounds; ``None`` (or
            ``inf``) while it has no valid result.
    """

    measurements: int
    best_latency_s: float | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.measurements):
            raise TypeError(f"RoundResult measurements must be an int, "
                            f"got {type(self.measurements).__name__} {self.measurements!r}")
        if self.measurements < 0:
            raise ValueError(f"RoundResult measurements must be >= 0, got {self.measurements!r}")
        if self.best_latency_s is not None:
            if not _is_number(self.best_latency_s):
                raise TypeError(f"RoundResult best_latency_s must be a number or None, "
                                f"got {type(self.best_latency_s).__name__} {self.best_latency_s!r}")
            if math.isnan(self.best_latency_s) or self.best_latency_s <= 0:
                raise ValueError(f"RoundResult best_latency_s must be > 0 (or None / inf for no result), "
                                 f"got {self.best_latency_s!r}")


class GradientTaskScheduler:
    """Picks which task to tune next (Ansor, Section 6); see the module docstring for the rule.

    Call :meth:`next_task`, tune that task for one round of (at most) :attr:`round_measurements`
    measurements, and :meth:`record` the :class:`RoundResult`; :func:`run_schedule` does that loop.

    Attributes:
        tasks: the tasks, in the order their indices refer to.
        round_measurements: measurements asked of one round.
        strategy: ``"gradient"`` or ``"round-robin"``.
        history: one dict per recorded round: ``round`` (1-based), ``task`` (name), ``task_index``,
            ``measurements`` (new in this round), ``total_measurements`` (all tasks so far),
            ``best_latency_s`` (the task's best, ``None`` without result), ``estimated_latency_s``
            (``sum w_i g_i`` after the round, ``None`` while a task has no result) and ``dead``.
    """

    def __init__(
        self,
        tasks: Sequence[SchedulerTask],
        round_measurements: int = 16,
        *,
        alpha: float = 0.2,
        beta: float = 2.0,
        backward_window: int = 3,
        epsilon: float = 0.05,
        seed: int | None = 0,
        strategy: str = "gradient",
    ) -> None:
        """Args:
            tasks: the model's tasks (at least one, unique names).
            round_measurements: measurements per round (>= 1).
            alpha: weight of the backward (observed) term against the forward (predicted) one, in [0, 1].
            beta: how much faster than its similar tasks' best FLOP/s a task may hope to get (> 0).
            backward_window: ``Δt`` of the backward term, in rounds (>= 1).
            epsilon: probability of tuning a random live task instead of the best one, in [0, 1].
            seed: seed of ``np.random.default_rng`` (the only source of randomness).
            strategy: ``"gradient"`` (Ansor) or ``"round-robin"``.

        Raises:
            TypeError: a value of the wrong type (named in the message).
            ValueError: a value out of range, no task, a duplicate task name, an unknown strategy.
        """
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
            raise TypeError(f"tasks must be a sequence of SchedulerTask, got {type(tasks).__name__}")
        if len(tasks) == 0:
            raise ValueError("tasks must not be empty: the scheduler needs at least one task")
        seen: set[str] = set()
        for i, task in enumerate(tasks):
            if not isinstance(task, SchedulerTask):
                raise TypeError(f"tasks[{i}] must be a SchedulerTask, got {type(task).__name__} {task!r}")
            if task.name in seen:
                raise ValueError(f"duplicate task name {task.name!r} (tasks[{i}])")
            seen.add(task.name)
        if not _is_int(round_measurements):
            raise TypeError(f"round_measurements must be an int, "
                            f"got {type(round_measurements).__name__} {round_measurements!r}")
        if round_measurements < 1:
            raise ValueError(f"round_measurements must be >= 1, got {round_measurements!r}")
        for name, value in (("alpha", alpha), ("epsilon", epsilon)):
            if not _is_number(value):
                raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        beta = _positive_finite("scheduler", "beta", beta)
        if not _is_int(backward_window):
            raise TypeError(f"backward_window must be an int, got {type(backward_window).__name__} {backward_window!r}")
        if backward_window < 1:
            raise ValueError(f"backward_window must be >= 1, got {backward_window!r}")
        if seed is not None and not _is_int(seed):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}")
        if seed is not None and seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; known strategies: {', '.join(STRATEGIES)}")

        self.tasks: tuple[SchedulerTask, ...] = tuple(tasks)
        self.round_measurements = int(round_measurements)
        self.alpha = float(alpha)
        self.beta = beta
        self.backward_window = int(backward_window)
        self.epsilon = float(epsilon)
        self.strategy = strategy
        self._rng = np.random.default_rng(seed)
        n = len(self.tasks)
        self._rounds = [0] * n  # TVM's task_cts
        self._spent = [0] * n
        self._best: list[float | None] = [None] * n  # TVM's best_costs (None for its 1e10)
        self._best_history: list[list[float | None]] = [[] for _ in range(n)]  # TVM's task_costs_history
        self._dead = [False] * n
        self._last: int = -1
        self._pending: int | None = None  # next_task's answer until the next record
        self._groups: dict[str, list[int]] = {}
        for i, task in enumerate(self.tasks):
            if task.similarity:
                self._groups.setdefault(task.similarity, []).append(i)
        self._group_of: list[str | None] = [t.similarity or None for t in self.tasks]
        self.history: list[dict] = []

    # ------------------------------------------------------------------ queries

    @property
    def estimated_latency_s(self) -> float | None:
        """``sum_i w_i g_i`` over all tasks; ``None`` while any task has no valid result."""
        if any(b is None for b in self._best):
            return None
        return math.fsum(t.weight * b for t, b in zip(self.tasks, self._best))  # type: ignore[operator]

    @property
    def dead_tasks(self) -> frozenset[int]:
        """Indices of the tasks a round found exhausted (0 new measurements)."""
        return frozenset(i for i, d in enumerate(self._dead) if d)

    @property
    def total_measurements(self) -> int:
        """Measurements recorded so far, all tasks together."""
        return sum(self._spent)

    def allocation(self) -> list[int]:
        """Measurements spent on each task so far, in task order."""
        return list(self._spent)

    def gradients(self) -> list[float]:
        """The current ``df/dt_i`` of every task (0 for dead tasks and tasks not tuned yet)."""
        return [self._gradient(i) for i in range(len(self.tasks))]

    # ------------------------------------------------------------------ the rule

    def _live(self) -> list[int]:
        return [i for i, dead in enumerate(self._dead) if not dead]

    def _gradient(self, i: int) -> float:
        """Section 6.2's ``df/dt_i`` (TVM's ``grad``), 0 for a dead or untuned task."""
        t = self._rounds[i]
        if self._dead[i] or t == 0:
            return 0.0
        g = self._best[i]
        if g is None:
            if t >= NO_RESULT_ROUNDS:
                return 0.0
            g = NO_RESULT_LATENCY_S
        # backward: (g_i(t_i) - g_i(t_i - Δt)) / Δt over the last Δt rounds
        hist, window = self._best_history[i], self.backward_window
        backward = 0.0
        if t - 1 - window >= 0 and hist[t - 1] is not None and hist[t - 1 - window] is not None:
            backward = (hist[t - 1] - hist[t - 1 - window]) / window  # type: ignore[operator]
        # forward: min(g - g/t, beta * C_i / max V_k) - g
        g_next = g - g / t
        group = self._group_of[i]
        if group is not None and len(self._groups[group]) > 1:
            speeds = [self.tasks[k].flops / self._best[k] for k in self._groups[group]  # type: ignore[operator]
                      if self._best[k] is not None]
            if speeds:
                g_next = min(g_next, self.beta * self.tasks[i].flops / max(speeds))
        forward = g_next - g
        return self.tasks[i].weight * (self.alpha * backward + (1.0 - self.alpha) * forward)

    def next_task(self) -> int | None:
        """The index of the task to tune next; ``None`` when every task is dead.

        The answer is kept until the next :meth:`record`, so calling this twice draws no new randomness.
        """
        if self._pending is not None and not self._dead[self._pending]:
            return self._pending
        live = self._live()
        if not live:
            return None
        untuned = [i for i in live if self._rounds[i] == 0]
        if untuned:  # warm-up: one round each, in order
            choice = untuned[0]
        elif self.strategy == "round-robin":
            n = len(self.tasks)
            choice = next((self._last + k) % n for k in range(1, n + 1) if not self._dead[(self._last + k) % n])
        elif self.epsilon > 0 and self._rng.random() < self.epsilon:
            choice = live[int(self._rng.integers(len(live)))]
        else:
            grads = [self._gradient(i) for i in live]
            if max(grads) == min(grads):
                choice = live[int(self._rng.integers(len(live)))]
            else:
                choice = live[int(np.argmin(grads))]
        self._pending = choice
        return choice

    def record(self, task_index: int, result: RoundResult) -> None:
        """Record one round of tuning task ``task_index``.

        Args:
            task_index: the task tuned (usually what :meth:`next_task` returned).
            result: the round's new measurements and the task's best latency so far (the best is kept
                non-increasing: a worse value than the known best is ignored).

        Raises:
            TypeError: ``task_index`` is not an int or ``result`` not a :class:`RoundResult`.
            ValueError: ``task_index`` out of range, or the task is dead.
        """
        if not _is_int(task_index):
            raise TypeError(f"task_index must be an int, got {type(task_index).__name__} {task_index!r}")
        if not 0 <= task_index < len(self.tasks):
            raise ValueError(f"task_index {task_index!r} out of range: {len(self.tasks)} tasks")
        if not isinstance(result, RoundResult):
            raise TypeError(f"result must be a RoundResult, got {type(result).__name__} {result!r}")
        i = int(task_index)
        if self._dead[i]:
            raise ValueError(f"task {i} ({self.tasks[i].name!r}) is dead: a round spent no measurements on it")
        latency = result.best_latency_s
        if latency is not None and math.isinf(latency):
            latency = None
        best = self._best[i]
        if latency is not None and (best is None or latency < best):
            self._best[i] = best = float(latency)
        self._rounds[i] += 1
        self._spent[i] += result.measurements
        self._best_history[i].append(best)
        if result.measurements == 0:
            self._dead[i] = True
        self._adjust_similarity_group(i)
        self._last = i
        self._pending = None
        self.history.append({
            "round": len(self.history) + 1,
            "task": self.tasks[i].name,
            "task_index": i,
            "measurements": result.measurements,
            "total_measurements": self.total_measurements,
            "best_latency_s": best,
            "estimated_latency_s": self.estimated_latency_s,
            "dead": self._dead[i],
        })

    def _adjust_similarity_group(self, i: int) -> None:
        """TVM's ``_adjust_similarity_group``: a task far slower than its group after many rounds leaves it."""
        group = self._group_of[i]
        if group is None or len(self._groups[group]) <= 1 or self._best[i] is None:
            return
        members = self._groups[group]
        best_speed = max(self.tasks[k].flops / self._best[k] for k in members  # type: ignore[operator]
                         if self._best[k] is not None)
        speed = self.tasks[i].flops / self._best[i]
        if speed < best_speed / self.beta and self._rounds[i] > _REGROUP_EXTRA_ROUNDS + max(
                self._rounds[k] for k in members if k != i):
            members.remove(i)
            self._group_of[i] = None


def run_schedule(
    scheduler: GradientTaskScheduler,
    tune_round: Callable[[int, int], RoundResult],
    total_measurements: int,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Tune round after round until ``total_measurements`` new measurements are spent or every task is dead.

    Each round asks ``tune_round(i, n)`` for ``n = min(round_measurements, what is left)`` measurements
    of task ``i = scheduler.next_task()`` (the last round is cut to the remainder) and records its
    result. A ``tune_round`` that spends more than ``n`` is recorded as it is (the total then exceeds the
    budget; the history shows by how much).

    Args:
        scheduler: the scheduler (it may have recorded rounds before; only this call's spend counts).
        tune_round: ``(task index, measurements) -> RoundResult`` for one round of tuning.
        total_measurements: the budget of new measurements of this call (>= 0).
        progress: called with each round's history row after it is recorded.

    Returns:
        The history rows of this call's rounds.

    Raises:
        TypeError: a bad argument, or ``tune_round`` returned something other than a RoundResult.
        ValueError: a negative budget.
    """
    if not isinstance(scheduler, GradientTaskScheduler):
        raise TypeError(f"scheduler must be a GradientTaskScheduler, got {type(scheduler).__name__}")
    if not callable(tune_round):
        raise TypeError(f"tune_round must be callable, got {type(tune_round).__name__} {tune_round!r}")
    if not _is_int(total_measurements):
        raise TypeError(f"total_measurements must be an int, "
                        f"got {type(total_measurements).__name__} {total_measurements!r}")
    if total_measurements < 0:
        raise ValueError(f"total_measurements must be >= 0, got {total_measurements!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None, got {type(progress).__name__} {progress!r}")
    start = len(scheduler.history)
    spent = 0
    while spent < total_measurements:
        i = scheduler.next_task()
        if i is None:
            break
        n = min(scheduler.round_measurements, total_measurements - spent)
        result = tune_round(i, n)
        if not isinstance(result, RoundResult):
            raise TypeError(f"tune_round({i}, {n}) must return a RoundResult, got {type(result).__name__} {result!r}")
        scheduler.record(i, result)
        spent += result.measurements
        if progress is not None:
            progress(scheduler.history[-1])
    return scheduler.history[start:]
