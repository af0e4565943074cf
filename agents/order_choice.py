"""Any tile agent on the schedule space, with the loop order as a discrete choice (successive halving).

Agents that move in the tile space (Felix's gradient descent, N-A2C, the XGBoost tuner...) see a task
whose loop order is fixed. :class:`OrderChoiceAgent` lets them tune schedules: it picks ``candidates``
loop orders (the task's default order and uniformly drawn intra-tile permutations of it,
:meth:`~schedule_gym.spaces.OrderSpace.intra_tile_orders`), runs the tile agent on each order as a task of
its own, and spends the budget by **successive halving** (Jamieson and Talwalkar, 2016): every round
gives each surviving order an equal share of ``budget / rounds`` measurements, and the better half (by
the best latency its agent found) survives to the next round, until one order is left. A surviving
order's agent is rerun with its grown budget and the same seed; what it measured before comes back
from the cache, so a deterministic backend replays its early path for free.

Every measurement goes through this agent's own session over the
:class:`~schedule_gym.spaces.ScheduleSpace` (one budget, one history, one best-so-far), as schedules
``(tiles, order)``. Run it on a :class:`~schedule_gym.envs.ScheduleEnv`:

    >>> from schedule_gym.agents import make_agent
    >>> from schedule_gym.envs import ScheduleEnv
    >>> result = make_agent("orders", inner="random").run(ScheduleEnv("gemm-128"), 40)
    >>> result.num_measurements
    40
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from schedule_gym.agents.base import Agent, check_positive
from schedule_gym.backends.base import LatencyBackend
from schedule_gym.session import MeasureSession
from schedule_gym.spaces import Order, Schedule, ScheduleSpace
from schedule_gym.tasks import Task
from schedule_gym.types import Config, MeasureResult, ResultCallback

__all__ = ["OrderChoiceAgent"]


class _OrderSliceBackend(LatencyBackend):
    """Measures tile configs of one order through the schedule agent (its budget, history and cache)."""

    def __init__(self, agent: OrderChoiceAgent, order: Order) -> None:
        self.agent = agent
        self.order = order
        self.name = agent.session.backend.name
        self.deterministic = agent.session.backend.deterministic

    @property
    def measures_hardware(self) -> bool:  # type: ignore[override]
        return self.agent.session.backend.measures_hardware

    @property
    def needs_tvm(self) -> bool:  # type: ignore[override]
        return self.agent.session.backend.needs_tvm

    @property
    def measuring_backend(self) -> LatencyBackend:
        return self.agent.session.backend.measuring_backend

    def measure(self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None) -> list[MeasureResult]:
        return self._measure(configs, on_result, exact=False)

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        return self._measure(configs, on_result, exact=True)

    def _measure(self, configs: Sequence[Config], on_result: ResultCallback | None, exact: bool) -> list[MeasureResult]:
        # BudgetSpent from the schedule agent's measure ends the inner agent's run
        results = self.agent.measure([Schedule(c, self.order) for c in configs], exact=exact)
        out = []
        for position, (config, result) in enumerate(zip(configs, results)):
            if result is None:
                result = MeasureResult.failure(config, "the schedule search's budget is spent", "other")
            else:
                result = dataclasses.replace(result, config=config)
            out.append(result)
            if on_result is not None:
                on_result(position, result)
        return out


class OrderChoiceAgent(Agent):
    """A tile agent (``inner``, with ``inner_params``) over ``candidates`` loop orders, successive halving."""

    name = "orders"

    def __init__(self, seed: int = 0, inner: str = "felix", candidates: int = 4, inner_params: dict | None = None) -> None:
        super().__init__(seed)
        from schedule_gym.agents import AGENTS, SCHEDULE_AGENTS, agent_class

        if inner not in AGENTS or inner in SCHEDULE_AGENTS or inner == self.name:
            tile_agents = [a for a in AGENTS if a not in SCHEDULE_AGENTS and a != self.name]
            raise ValueError(f"inner must be a tile agent, one of {tile_agents}; got {inner!r}")
        agent_class(inner)  # an inner agent whose extra is not installed: named now, not after the first order
        self.inner = inner
        self.candidates = check_positive(candidates, "candidates", integer=True)
        self._inner_params = dict(inner_params or {})

    def params(self) -> dict[str, Any]:
        return {**super().params(), "inner_params": self._inner_params}

    def candidate_orders(self) -> list[Order]:
        """The default order, then intra-tile permutations drawn without replacement (``self.rng``)."""
        orders = self.space.orders
        default = orders.default_order
        others = [o for o in orders.intra_tile_orders() if o != default]
        picks = self.rng.choice(len(others), size=min(len(others), self.candidates - 1), replace=False)
        return [default] + [others[int(i)] for i in sorted(picks)]

    def search(self) -> None:
        if not isinstance(self.space, ScheduleSpace):
            raise TypeError(f"agent 'orders' tunes schedules: run it on a ScheduleEnv (schedule_gym/Schedule-v0), "
                            f"got a space {self.space!r}")
        if self.remaining is None:
            raise ValueError("agent 'orders' splits a count budget between loop orders: give a measurement count")
        task, tiles = self.space.task, self.space.tiles
        survivors = self.candidate_orders()
        sessions = {o: MeasureSession(task.with_order(o), _OrderSliceBackend(self, o), tiles) for o in survivors}
        rounds = max(1, math.ceil(math.log2(len(survivors))) + 1)
        per_round = self.remaining // rounds
        granted = dict.fromkeys(survivors, 0)
        #: per round, the best latency each surviving order's agent found (None: it failed throughout)
        self.rounds: list[dict[Order, float | None]] = []
        for _ in range(rounds):
            share = max(2, per_round // len(survivors))
            found: dict[Order, float | None] = {}
            for order in survivors:
                granted[order] += share
                agent = self._inner_agent()
                result = agent.run(sessions[order], granted[order])
                found[order] = result.best_latency_s
            self.rounds.append(found)
            ranked = sorted(survivors, key=lambda o: (found[o] is None, found[o] or 0.0))
            survivors = ranked[: max(1, len(ranked) // 2)]
            self.check_budget()
        # what is left goes to the last order standing
        if self.remaining:
            self._inner_agent().run(sessions[survivors[0]], granted[survivors[0]] + self.remaining)

    def _inner_agent(self) -> Agent:
        from schedule_gym.agents import make_agent

        return make_agent(self.inner, seed=self.seed, **self._inner_params)
