"""What every search agent shares: budgets, the measurement history, seeding, stopping and results.

An agent drives a :class:`~schedule_gym.session.MeasureSession` — its own, or the one a
:class:`~schedule_gym.envs.TilingEnv` (or any wrapper of one) wraps: the run starts a session at the
paper's ``s0`` (measured first: it is the reward reference and the baseline of every speed-up), then the
agent measures configs in batches with :meth:`Agent.measure` (``session.measure``), so any backend (mock,
replay, TVM, RPC) serves it unchanged and builds a batch concurrently. The session enforces the
measurement count: an agent can never exceed it. Subclasses implement :meth:`Agent.search` and read like their paper's pseudocode; when the budget is
spent, :meth:`Agent.measure` raises :class:`BudgetSpent`, which ends the run.
"""

from __future__ import annotations

import abc
import json
import logging
import math
import numbers
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from schedule_gym.backends import MeasureResult
from schedule_gym.spaces import Config

__all__ = [
    "Agent", "Budget", "BudgetSpent", "HistoryRow", "ProgressCallback", "TuneResult", "check_in_range", "check_positive",
    "check_start",
]

logger = logging.getLogger("schedule_gym.agents")

#: Why a run ended.
STOP_REASONS = ("budget", "time", "space_exhausted", "converged", "interrupted")


def check_positive(value: object, what: str, integer: bool = False, none_means: str | None = None) -> Any:
    """``value`` as an int (``integer``) or float, if positive (and finite); ``None`` allowed if ``none_means`` says what it means.

    Raises ValueError naming ``what`` and the value: hyper-parameters of every agent are checked here.
    """
    if value is None and none_means is not None:
        return None
    alt = "" if none_means is None else f" or None ({none_means})"
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{what} must be a positive integer{alt}, got {value!r}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number{alt}, got {value!r}")
    return float(value)


def check_in_range(value: object, what: str, lo: float, hi: float) -> float:
    """``value`` as a float if ``lo <= value <= hi``, else a ValueError naming ``what`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not lo <= value <= hi:
        raise ValueError(f"{what} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def check_start(start: object) -> object:
    """A search's starting point: ``"s0"`` (the paper's), ``"random"`` (drawn uniformly) or a config."""
    if isinstance(start, str) and start not in ("s0", "random"):
        raise ValueError(f"start must be 's0', 'random' or a config, got {start!r}")
    return start


class BudgetSpent(Exception):
    """Raised by :meth:`Agent.measure` once nothing more may be measured; ends :meth:`Agent.search`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Budget:
    """A search budget: unique measurements, a fraction of the space, or wall seconds (smallest binds).

    Seconds are the whole run's wall time, the agent's own computation (training, gradient descent)
    included; they are checked before every measurement batch, so a batch started in time completes.

    >>> Budget.parse("900"), Budget.parse("0.1%"), Budget.parse("15m")
    (Budget(measurements=900), Budget(fraction=0.001), Budget(seconds=900.0))
    """

    measurements: int | None = None
    fraction: float | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        m, f, s = self.measurements, self.fraction, self.seconds
        if m is None and f is None and s is None:
            raise ValueError("a Budget needs measurements, fraction or seconds")
        if m is not None and (isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1):
            raise ValueError(f"budget measurements must be a positive integer, got {m!r}")
        if f is not None and (isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0 < f <= 1):
            raise ValueError(f"budget fraction must be in (0, 1], got {f!r}")
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Real) or not (math.isfinite(s) and s > 0)):
            raise ValueError(f"budget seconds must be a positive number, got {s!r}")

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in (("measurements", self.measurements), ("fraction", self.fraction), ("seconds", self.seconds)) if v is not None]
        return f"Budget({', '.join(parts)})"

    # a sign is read, so that "-1" is refused as not positive rather than as not a count
    _TEXT = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%|s|m|h)?\s*$")

    @classmethod
    def parse(cls, text: str | int | Budget) -> Budget:
        """``"900"`` (measurements), ``"0.1%"`` (of the space), ``"600s"``, ``"15m"``, ``"2h"`` (wall time)."""
        if isinstance(text, Budget):
            return text
        if isinstance(text, numbers.Integral) and not isinstance(text, bool):
            return cls(measurements=int(text))
        match = cls._TEXT.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(
                f"budget {text!r} is not a count (900), a percentage of the space (0.1%) or a time (600s, 15m, 2h)"
            )
        value, unit = match.groups()
        if not float(value) > 0:
            raise ValueError(f"budget {text!r} must be positive: a count (900), a percentage of the space (0.1%) or a time (600s, 15m, 2h)")
        if unit is None:
            if "." in value:
                raise ValueError(f"budget {text!r}: a measurement count must be a whole number")
            return cls(measurements=int(value))
        if unit == "%":
            if float(value) > 100:
                raise ValueError(f"budget {text!r} is more than the whole space (at most 100%)")
            return cls(fraction=float(value) / 100)
        return cls(seconds=float(value) * {"s": 1, "m": 60, "h": 3600}[unit])

    def count_limit(self, space_size: int) -> int | None:
        """The budget in unique configs of a space of ``space_size`` (None: only a time limit)."""
        limits = [self.measurements] if self.measurements is not None else []
        if self.fraction is not None:
            limits.append(max(1, math.floor(self.fraction * space_size)))
        return min(limits) if limits else None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One measurement of a run: the ``n``-th unique config (from 1), when and what it cost."""

    n: int
    index: int
    config: Config
    wall_s: float  # since the run started
    latency_s: float | None  # None: the measurement failed (see error_kind); censored: the bound
    best_latency_s: float | None  # best so far, this row included (never a censored row)
    error_kind: str | None = None
    censored: bool = False  # stopped at latency_s: slower than that, not timed (MeasureResult.censored)


#: Called after every measurement with the new history row and the run's budget in configs (or None).
ProgressCallback = Callable[[HistoryRow, "int | None"], None]


@dataclass
class TuneResult:
    """What a run found, and how: best config and latency, and one history row per measurement."""

    agent: str
    seed: int
    task: str
    backend: str
    flops: int
    space_size: int
    budget: Budget
    params: dict[str, Any]
    history: list[HistoryRow] = field(default_factory=list)
    wall_s: float = 0.0
    stop_reason: str = "budget"
    s0_latency_s: float | None = None

    @property
    def num_measurements(self) -> int:
        return len(self.history)

    def _best_row(self) -> HistoryRow | None:
        exact = [r for r in self.history if r.latency_s is not None and not r.censored]
        return min(exact, key=lambda r: (r.latency_s, r.n)) if exact else None

    @property
    def best_config(self) -> Config | None:
        row = self._best_row()
        return None if row is None else row.config

    @property
    def best_latency_s(self) -> float | None:
        row = self._best_row()
        return None if row is None else row.latency_s

    @property
    def best_gflops(self) -> float | None:
        best = self.best_latency_s
        return None if best is None else self.flops / best * 1e-9

    @property
    def speedup_over_s0(self) -> float | None:
        best = self.best_latency_s
        return None if best is None or self.s0_latency_s is None else self.s0_latency_s / best

    def best_curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(measurements, wall seconds, best latency so far)`` arrays, one entry per history row."""
        n = np.array([r.n for r in self.history], dtype=np.int64)
        t = np.array([r.wall_s for r in self.history], dtype=np.float64)
        best = np.array([np.nan if r.best_latency_s is None else r.best_latency_s for r in self.history])
        return n, t, best

    def summary(self) -> str:
        best = self.best_latency_s
        head = f"{self.agent} seed {self.seed} on {self.task} ({self.backend}): {self.num_measurements} measurements"
        if best is None:
            return head + f", no successful measurement ({self.stop_reason})"
        speedup = self.speedup_over_s0
        return (
            f"{head} ({self.num_measurements / self.space_size:.3%} of {self.space_size:,}) in {self.wall_s:.1f} s, "
            f"best {best * 1e3:.4g} ms = {self.best_gflops:.1f} GFLOP/s"
            + ("" if speedup is None else f", {speedup:.1f}x over s0")
            + f" at {self.best_config}; stopped: {self.stop_reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["budget"] = {k: v for k, v in asdict(self.budget).items() if v is not None}
        out["history"] = [
            {**asdict(r), "config": [list(f) for f in r.config]} for r in self.history
        ]
        out.update(best_config=None if self.best_config is None else [list(f) for f in self.best_config],
                   best_latency_s=self.best_latency_s, best_gflops=self.best_gflops,
                   num_measurements=self.num_measurements, speedup_over_s0=self.speedup_over_s0)
        return out

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


class Agent(abc.ABC):
    """A search agent. ``run(env, budget)`` returns a :class:`TuneResult`.

    Subclasses set ``name``, take their hyper-parameters as keyword arguments (stored for the result
    by :meth:`params`) and implement :meth:`search`, using :meth:`measure` for every measurement,
    ``self.rng`` (a NumPy generator seeded from ``seed``) for every random draw, ``self.session`` and
    ``self.space`` for the task (``self.env`` is the environment when the run was given one; an agent
    that needs it sets ``needs_env``). Torch-based agents are seeded by :meth:`run` too (inside a forked
    torch RNG state, so nothing global changes).
    """

    name: ClassVar[str] = "agent"
    uses_torch: ClassVar[bool] = False

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)

    @classmethod
    def default_artefacts(cls, params: Mapping[str, Any]) -> tuple[Path, ...]:
        """The pretrained files an agent made with ``params`` loads without a parameter naming them (its
        shipped defaults), so the benchmark's leak check sees them too; none unless an agent says so."""
        return ()

    def params(self) -> dict[str, Any]:
        """Hyper-parameters, for the result: public attributes holding plain values, the seed excepted."""
        plain = (bool, int, float, str, tuple, type(None))
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "seed" and isinstance(v, plain)}

    # ---------------------------------------------------------------------------------- running
    #: whether the agent needs the environment (observations), not only a measurement session
    needs_env: ClassVar[bool] = False

    def run(self, env: Any, budget: Budget | str | int, progress: ProgressCallback | None = None) -> TuneResult:
        """Search within ``budget``; a run is a fresh session. ``env`` is a :class:`MeasureSession`, or a
        :class:`~schedule_gym.envs.TilingEnv` or :class:`~schedule_gym.envs.ScheduleEnv` (or a wrapper of
        one), whose session the agent drives.

        Ctrl-C (KeyboardInterrupt) ends the run cleanly: the result so far comes back with
        ``stop_reason == "interrupted"`` (records already written stay intact).
        """
        from schedule_gym.envs import ScheduleEnv, TilingEnv
        from schedule_gym.session import MeasureSession

        base = getattr(env, "unwrapped", env)
        if isinstance(base, (TilingEnv, ScheduleEnv)):
            self.env: TilingEnv | ScheduleEnv | None = base
            session = base.session
        elif isinstance(base, MeasureSession) and not self.needs_env:
            self.env, session = None, base
        else:
            wanted = "a schedule_gym TilingEnv (or a wrapper of one)" + ("" if self.needs_env else " or a MeasureSession")
            raise TypeError(f"agent {self.name!r} tunes {wanted}, got {env!r}")
        budget = Budget.parse(budget)
        self.session = session
        self.space = session.space
        self.rng = np.random.default_rng(self.seed)
        self._budget = budget
        self._progress = progress
        self._limit = budget.count_limit(session.space.size)
        saved = session.budget
        session.set_budget(measurements=self._limit)
        self._result = TuneResult(
            agent=self.name, seed=self.seed, task=session.task.describe(), backend=session.backend.measuring_backend.name,
            flops=session.task.flops, space_size=session.space.size, budget=budget, params=self.params(),
        )
        self._t0 = time.perf_counter()
        try:
            if self.uses_torch:
                import torch

                threads = torch.get_num_threads()
                # The agents' networks are small: one thread is fastest, and on shared cores torch's
                # spinning OpenMP workers slow every step down (``examples/results/library-figures.md``).
                torch.set_num_threads(1)
                try:
                    with torch.random.fork_rng(devices=[]):
                        torch.manual_seed(self.seed)
                        self._start_and_search()
                finally:
                    torch.set_num_threads(threads)
            else:
                self._start_and_search()
        except BudgetSpent as stop:
            self._result.stop_reason = stop.reason
        except KeyboardInterrupt:
            self._result.stop_reason = "interrupted"
        finally:
            session.set_budget(*saved)
            self._result.wall_s = time.perf_counter() - self._t0
        logger.info("%s", self._result.summary())
        return self._result

    def _start_and_search(self) -> None:
        s0 = self.space.initial_config()
        if self.env is not None:  # a new session and episode, measuring s0 (the reward reference)
            self.env.reset(seed=self.seed, options={"start": "s0"})
        else:
            self.session.start()
        self.session.measure([s0], exact=True)  # the speed-up's unit: never censored
        #: the measurement of the paper's s0, taken at the start of every run (None if the budget forbade it)
        self.s0_result = result = self.session.result(s0)
        if result is not None:
            self._record(self.space.index(s0), result)
            self._result.s0_latency_s = result.latency_s
        self.search()
        self.check_budget()  # a search that returns just as its budget ends stopped for the budget
        self._result.stop_reason = "converged"

    @abc.abstractmethod
    def search(self) -> None:
        """The algorithm. Returns when it converges; :class:`BudgetSpent` from :meth:`measure` ends it early."""

    # ------------------------------------------------------------------------------ measuring
    def _record(self, index: int, result: MeasureResult) -> None:
        latency = result.latency_s
        best = self.session.best  # the session's best so far, this result included (it is admitted first)
        best_latency = None if best is None else best.latency_s
        row = HistoryRow(
            n=len(self._result.history) + 1, index=index, config=result.config,
            wall_s=time.perf_counter() - self._t0, latency_s=latency, best_latency_s=best_latency,
            error_kind=result.error_kind, censored=result.censored,
        )
        self._result.history.append(row)
        logger.debug("%s #%d %s: %s (best %s)", self.name, row.n, row.config,
                     result.error_kind if latency is None else f"{'> ' if result.censored else ''}{latency * 1e3:.4g} ms",
                     best_latency)
        if self._progress is not None:
            self._progress(row, self._limit)

    def check_budget(self) -> None:
        """Raise :class:`BudgetSpent` if the run may measure nothing more."""
        if self.session.num_measurements >= self.space.size:
            raise BudgetSpent("space_exhausted")
        if self.session.budget_exhausted():
            raise BudgetSpent("budget")
        if self._budget.seconds is not None and time.perf_counter() - self._t0 >= self._budget.seconds:
            raise BudgetSpent("time")

    @property
    def remaining(self) -> int | None:
        """Configs that may still be measured under the count budget (None: only a time limit)."""
        if self._limit is None:
            return None
        return max(0, self._limit - self.session.num_measurements)

    def measure(self, configs: Sequence[Config | int], exact: bool = False) -> list[MeasureResult | None]:
        """Measure a batch (configs or dense indices) through the session (``exact``: no censored result,
        see :meth:`MeasureSession.measure <schedule_gym.session.MeasureSession.measure>`).

        Returns a result per config: cached ones for configs already measured, ``None`` for those past
        the budget. Raises :class:`BudgetSpent` when called with the budget already spent.
        """
        self.check_budget()
        return self.session.measure(configs, on_result=self._record, exact=exact)

    def start_config(self, start: object) -> Config:
        """The config a :func:`check_start` value names (a random one drawn with ``self.rng``)."""
        if start == "s0":
            return self.space.initial_config()
        if start == "random":
            return self.space.sample(self.rng)
        return self.space.validate(start)

    def is_new(self, config: Config | int) -> bool:
        """Whether measuring ``config`` would cost a measurement (it is not yet in this run)."""
        return not self.session.in_session(config)

    @staticmethod
    def cost(result: MeasureResult | None, failed_cost: float) -> float:
        """A result's latency, ``failed_cost`` for a failed measurement (the paper's penalised cost); a
        censored result's bound (the least it can cost)."""
        if result is None or result.latency_s is None:
            return failed_cost
        return result.latency_s

    def failed_cost(self) -> float:
        """Cost assigned to failed measurements: ten times the worst successful latency so far."""
        ok = [r.latency_s for r in self._result.history if r.latency_s is not None]
        return 10.0 * max(ok) if ok else 1.0
