"""Random search: configs drawn uniformly from the whole space, without replacement.

The comparator of every tuning paper (Zhang et al., Section 5; Rahman et al.'s "R"). Batches of
``batch_size`` are measured together so a backend can build them concurrently.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from schedule_gym.agents.base import Agent, check_positive

__all__ = ["RandomSearchAgent", "draw_without_replacement"]


def draw_without_replacement(rng: np.random.Generator, size: int, taken: set[int]) -> Iterator[int]:
    """Indices of ``range(size)`` not in ``taken``, each next one uniform over those left (adds to ``taken``).

    Rejection sampling while most of the space is left; a shuffled list of the rest after that. Sizes
    past 64 bits (the schedule space of a convolution) draw 62-bit digits and reject the top remainder.
    """
    while len(taken) < size:
        if len(taken) < size // 2:
            idx = int(rng.integers(size)) if size < 2**62 else _uniform_big(rng, size)
            if idx in taken:
                continue
            taken.add(idx)
            yield idx
        else:
            rest = np.setdiff1d(np.arange(size, dtype=np.int64), np.fromiter(taken, dtype=np.int64, count=len(taken)))
            for idx in rng.permutation(rest):
                taken.add(int(idx))
                yield int(idx)


def _uniform_big(rng: np.random.Generator, size: int) -> int:
    """A uniform integer in ``[0, size)`` for a ``size`` past NumPy's 64-bit integers."""
    digits = -(-size.bit_length() // 62) + 1
    span = 1 << (62 * digits)
    limit = span - span % size
    while True:
        value = 0
        for _ in range(digits):
            value = (value << 62) | int(rng.integers(1 << 62))
        if value < limit:
            return value % size


class RandomSearchAgent(Agent):
    """Uniform random search without replacement, measured ``batch_size`` configs at a time."""

    name = "random"

    def __init__(self, seed: int = 0, batch_size: int = 16) -> None:
        super().__init__(seed)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)

    def search(self) -> None:
        taken = {self.space.index(self.space.initial_config())}  # s0 was measured at the start
        draws = draw_without_replacement(self.rng, self.space.size, taken)
        while True:
            n = self.batch_size if self.remaining is None else min(self.batch_size, self.remaining)
            batch = [idx for _, idx in zip(range(n), draws)]
            if not batch:
                return
            self.measure(batch)
