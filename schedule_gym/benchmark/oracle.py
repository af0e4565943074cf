"""The oracle walker: exact breadth-first search over a task's move graph, on a deterministic latency table.

A policy played from ``s0`` (:func:`~schedule_gym.benchmark.tuners.run_policy_session`) pays one measurement for
every config it lands on for the first time, ``s0`` included; with a budget of ``B`` measurements it can reach
exactly the configs at most ``B - 1`` moves from ``s0``. Two uses rest on the search here, and a walk beside them:

* the **bound** (``examples/benchmarks/walk_reach.py``): the best config within ``B - 1`` moves of ``s0``, a lower
  bound on the regret of every policy played from ``s0``;
* the **expert** of imitation learning (:class:`WalkExpert`, used by :mod:`schedule_gym.baselines.imitation`):
  the set of *good* configs within reach (at most ``1 + tolerance`` times the best reachable latency), the
  distance of every config to that set, and so, in any config, the moves that bring the walker closest to it;
* the **descent** (:func:`steepest_descent`): where a walker that only ever moves downhill stops, knowing every
  neighbour's latency (``examples/benchmarks/expert_agreement.py`` compares it with the best reachable config).

Moves are symmetric (an action moves one prime from factor ``j`` to factor ``i``; another moves it back), so
the distance *to* a set is the distance *from* it, found by one multi-source search.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from schedule_gym.spaces import TileSpace

__all__ = ["CHUNK", "WalkExpert", "all_latencies", "move_distances", "neighbours_of", "steepest_descent"]

#: configs scored, or expanded, at a time (the mock's features of 20 million configs at once would not fit in
#: memory: 23 GB for 22 million, where a chunk of 2**20 peaks near 0.9 GB)
CHUNK = 1 << 20


def all_latencies(table: Callable[[np.ndarray], np.ndarray], size: int) -> np.ndarray:
    """The latency of every config ``0 .. size - 1`` (dense index order) by ``table`` (a
    :class:`~schedule_gym.backends.LatencyTable`): its ``whole()`` where it has one (the mock's: read-only, from
    its disk cache after the first time), else asked ``CHUNK`` configs at a time."""
    whole = getattr(table, "whole", None)
    if whole is not None:
        out = whole()
        if out.shape != (size,):
            raise ValueError(f"the table holds {out.shape[0]} configs, not {size}")
        return out
    out = np.empty(size)
    for lo in range(0, size, CHUNK):
        out[lo: lo + CHUNK] = table(np.arange(lo, min(lo + CHUNK, size), dtype=np.int64))
    return out


def neighbours_of(space: TileSpace, indices: np.ndarray) -> Iterator[np.ndarray]:
    """The dense indices of the configs one legal move from ``indices``, one array per dimension (its moves' tables,
    ``next_row``, applied to the dimension's row of each config): the move graph's one rule, for the searches and
    the walk here."""
    indices = np.asarray(indices, dtype=np.int64)
    for stride, size, dim in zip(space.strides, space.dim_sizes, space.dims):
        rows = (indices // stride) % size
        nxt = dim.next_row[rows]  # (len(indices), moves of this dimension), -1 where illegal
        yield (indices[:, None] + (nxt - rows[:, None]) * stride)[nxt >= 0]


def move_distances(space: TileSpace, max_depth: int | None = None, sources: np.ndarray | None = None) -> np.ndarray:
    """Moves from the nearest of ``sources`` (dense indices; default ``s0``) to every config, by breadth-first
    search to ``max_depth`` (None: the whole space); ``-1`` beyond it. int16: every space met lies within a few
    dozen moves of any config (the largest distance is the sum over dimensions of the prime units to move)."""
    dist = np.full(space.size, -1, dtype=np.int16)
    frontier = (np.array([space.index(space.initial_config())], dtype=np.int64) if sources is None
                else np.unique(np.asarray(sources, dtype=np.int64)))
    if frontier.size == 0:
        raise ValueError("move_distances needs at least one source config")
    dist[frontier] = 0
    depth = 0
    while max_depth is None or depth < max_depth:
        depth += 1
        reached = np.zeros(space.size, dtype=bool)
        for chunk in np.array_split(frontier, -(-frontier.size // CHUNK)):
            for destinations in neighbours_of(space, chunk):
                reached[destinations] = True
        frontier = np.flatnonzero(reached & (dist < 0))
        if frontier.size == 0:
            break
        dist[frontier] = depth
    return dist


class WalkExpert:
    """The oracle walker's view of one task at one budget: which configs are good, and how far each config is
    from the nearest good one.

    ``latency``: every config's latency (:func:`all_latencies`); ``budget``: the session's measurements. The
    reach is the configs at most ``budget - 1`` moves from ``s0``; ``best_s`` the fastest of them; the good set
    the reachable configs at most ``(1 + tolerance) * best_s``. :attr:`distance` holds, for every config of the
    space, its moves to the nearest good config (the whole space is searched, so a walker that strays beyond the
    reach is still told the way back).
    """

    def __init__(self, space: TileSpace, latency: np.ndarray, budget: int, tolerance: float) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")
        if not tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
        if latency.shape != (space.size,):
            raise ValueError(f"latency must hold one value per config ({space.size}), got shape {latency.shape}")
        reach = move_distances(space, budget - 1) >= 0
        reachable = np.where(reach, latency, np.inf)
        self.best_s = float(np.nanmin(reachable))
        if not np.isfinite(self.best_s):
            raise ValueError(f"no config within {budget - 1} moves of s0 has a latency")
        good = np.flatnonzero(reach & (latency <= (1.0 + tolerance) * self.best_s))
        self.n_good = int(good.size)
        self.distance = move_distances(space, None, good)


def steepest_descent(space: TileSpace, table: Callable[[np.ndarray], np.ndarray],
                     start: int | None = None) -> tuple[int, int]:
    """``(index, moves)``: the config where steepest descent from ``start`` (a dense index; default ``s0``) stops,
    and the moves it made. Each move goes to the fastest neighbour by ``table`` (a
    :class:`~schedule_gym.backends.LatencyTable`: every neighbour's latency is known, none is paid for) if it is
    strictly faster than the current config; the walk stops in a local minimum of the move graph, a config none of
    whose neighbours is faster. A config without a latency (NaN: it failed) counts as infinitely slow.

    It is what a walker that only ever moves downhill reaches at best: where it stops far from the best reachable
    config, the good configs lie across a rise, and a walker must move uphill to reach them."""
    index = space.index(space.initial_config()) if start is None else int(start)
    current = float(np.nan_to_num(float(table(np.array([index], dtype=np.int64))[0]), nan=np.inf))
    moves = 0
    while True:
        neighbours = np.concatenate(list(neighbours_of(space, np.array([index]))))
        if neighbours.size == 0:
            return index, moves
        latency = np.nan_to_num(np.asarray(table(neighbours), dtype=float), nan=np.inf)
        k = int(np.argmin(latency))
        if not latency[k] < current:
            return index, moves
        index, current, moves = int(neighbours[k]), float(latency[k]), moves + 1
