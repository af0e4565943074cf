"""Re-timing each task's finalists once a model is tuned, so that its picks are not made by noise.

A task's pick is the config whose measurement was fastest, and one measurement can read far off on a machine
shared with others (another tenant, the clock): a fast kernel timed in a slow moment loses to a slower one timed
in a quiet one, and the model is built with the slower one. :func:`retime_finalists` times each task's ``k``
fastest configs again, fresh (never from records), in ``rounds`` rounds; a round goes over every task before the
next begins, so a task's timings are spread over the whole re-timing rather than taken in one moment, and each
round takes a task's finalists in another (rotated) order, so no config is always the first after its builds.
A finalist's re-timed latency is the median of its rounds' latencies; the pick is the lowest (the tuned order
breaks ties). A round that fails is left out of its finalist's median; a finalist that fails every round is out,
and a task whose finalists all fail keeps its tuned pick.

The re-timings measure no new config (each finalist was measured in tuning): they are timings like the model's
own, kept in the result (:class:`Finalist`), not in the record file, so a run resumed from its records re-times
its finalists again and may pick another within the noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from schedule_gym.backends import LatencyBackend
from schedule_gym.tasks import Task
from schedule_gym.types import Config, MeasureResult

__all__ = ["FINALIST_ROUNDS", "Finalist", "retime_finalists"]

#: timings of each finalist unless told (``tune_model``'s ``finalist_rounds``)
FINALIST_ROUNDS = 3


@dataclass
class Finalist:
    """One of a task's fastest configs in tuning, and its latencies timed again."""

    config: Config
    tuned_s: float
    #: one latency per round, None where that round failed
    rounds_s: list[float | None]

    @property
    def retimed_s(self) -> float | None:
        """The median of the rounds that gave a latency (None if none did)."""
        timed = [t for t in self.rounds_s if t is not None]
        return statistics.median(timed) if timed else None

    def to_dict(self) -> dict:
        return {"config": [list(f) for f in self.config], "tuned_s": self.tuned_s, "rounds_s": self.rounds_s,
                "retimed_s": self.retimed_s}


def retime_finalists(backend: LatencyBackend, finalists: Sequence[tuple[Task, Sequence[MeasureResult]]],
                     rounds: int = FINALIST_ROUNDS) -> list[list[Finalist]]:
    """Time every task's finalists again with ``backend`` (a measuring backend: its results are fresh), in
    ``rounds`` rounds over all tasks, and return each task's finalists, its pick first (see the module docstring).

    Args:
        backend: measures the configs (:meth:`~schedule_gym.backends.LatencyBackend.measure_exact`: none censored).
        finalists: per task, the task and its tuned results to time again (exact ones, fastest first).
        rounds: timings of each finalist.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive number of timings per finalist, got {rounds!r}")
    tables = [[Finalist(r.config, r.latency_s, []) for r in results]  # type: ignore[arg-type]
              for _, results in finalists]
    for turn in range(rounds):
        for (task, _), table in zip(finalists, tables):
            if not table:
                continue
            shift = turn % len(table)
            order = table[shift:] + table[:shift]
            for finalist, result in zip(order, backend.measure_exact(task, [f.config for f in order])):
                finalist.rounds_s.append(result.latency_s if result.exact else None)
    out = []
    for table in tables:
        timed = [f for f in table if f.retimed_s is not None]
        if not timed:  # every round of every finalist failed: keep the tuned order
            out.append(table)
            continue
        pick = min(timed, key=lambda f: f.retimed_s)  # type: ignore[arg-type, return-value]  # the first of equals
        out.append([pick] + [f for f in table if f is not pick])
    return out
