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

from schedule_gym.agents.base import Agent, check_start, check_positive
from schedule_gym.spaces import Config

__all__ = ["GBFSAgent"]


class GBFSAgent(Agent):
    """Greedy best-first search, ``rho`` random neighbours per popped state (paper default 5).

    ``start``: ``"s0"`` (the paper's, default), ``"random"`` (a uniformly drawn config) or a config.
    """

    name = "gbfs"

    def __init__(self, seed: int = 0, rho: int | None = 5, start: str | Config = "s0") -> None:
        super().__init__(seed)
        self.rho = check_positive(rho, "rho", integer=True, none_means="all neighbours")
        self.start = check_start(start)

    def search(self) -> None:
        tie = itertools.count()  # equal costs pop in insertion order: deterministic
        s0 = self.start_config(self.start)
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
