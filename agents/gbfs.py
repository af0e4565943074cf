"""G-BFS: greedy best-first search over the neighbour graph (Zhang et al., Section 4.2, Algorithm 1).

A priority queue ordered by increasing cost starts with ``s0``. Each iteration pops the cheapest state,
takes ``rho`` of its neighbours ``g(s)`` (Eq. 9) at random, measures those not visited before (one batch,
so a backend builds them concurrently), and pushes them with their costs. The search ends when the queue
is empty or the budget is spent; the best state visited is the result. With ``rho=None`` every neighbour
is taken (``rho = len(g(s))``), and the search visits the whole space given the budget (the paper's
completeness remark).

Where the paper says "if s' is legitimate": every neighbour is a valid factorisation by construction; a
config whose kernel fails to build or run is visited and queued with a penalised cost
(:meth:`~schedule_gym.agents.base.Agent.failed_cost`), so it is expanded last.
"""

from __future__ import annotations

import heapq
import itertools

from schedule_gym.agents.base import Agent
from schedule_gym.spaces import Config

__all__ = ["GBFSAgent"]


class GBFSAgent(Agent):
    """Greedy best-first search, ``rho`` random neighbours per popped state (paper default 5).

    ``start``: ``"s0"`` (the paper's, default), ``"random"`` (a uniformly drawn config) or a config.
    """

    name = "gbfs"

    def __init__(self, seed: int = 0, rho: int | None = 5, start: str | Config = "s0") -> None:
        super().__init__(seed)
        if rho is not None and (isinstance(rho, bool) or not isinstance(rho, int) or rho < 1):
            raise ValueError(f"rho must be a positive integer or None (all neighbours), got {rho!r}")
        if isinstance(start, str) and start not in ("s0", "random"):
            raise ValueError(f"start must be 's0', 'random' or a config, got {start!r}")
        self.rho = rho
        self.start = start

    def _start_config(self) -> Config:
        if self.start == "s0":
            return self.space.initial_config()
        if self.start == "random":
            return self.space.sample(self.rng)
        return self.space.validate(self.start)

    def search(self) -> None:
        tie = itertools.count()  # equal costs pop in insertion order: deterministic
        s0 = self._start_config()
        (result,) = self.measure([s0])
        queue = [(self.cost(result, self.failed_cost()), next(tie), s0)]  # Q.push((cost(s0), s0))
        visited = {s0}  # S_v
        while queue:  # while Q is not empty and t_search < T_max (measure() ends the run at the budget)
            _, _, s = heapq.heappop(queue)
            g = self.space.neighbours(s)
            rho = len(g) if self.rho is None else min(self.rho, len(g))
            picks = self.rng.choice(len(g), size=rho, replace=False)  # B = rho random neighbours of g(s)
            batch = [g[i][1] for i in sorted(picks) if g[i][1] not in visited]
            if not batch:
                continue
            results = self.measure(batch)
            failed = self.failed_cost()
            for s_next, result in zip(batch, results):
                if result is None:  # past the budget: not measured
                    continue
                heapq.heappush(queue, (self.cost(result, failed), next(tie), s_next))
                visited.add(s_next)
