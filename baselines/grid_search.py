"""Grid search: every config of the space in order, for spaces small enough to measure whole.

The exhaustive baseline of the comparisons: with a budget at least the space's size it measures every
config (dense index order, ``s0`` first as in every run), so its result is the exact optimum, and
regret of the other agents is measured against it. Batches of ``batch_size`` let a backend build
concurrently. On a large space under a smaller budget it only covers the first configs in index order:
use random search there.
"""

from __future__ import annotations

from schedule_gym.agents.base import Agent, check_positive

__all__ = ["GridSearchAgent"]


class GridSearchAgent(Agent):
    """Every config in dense index order, ``batch_size`` at a time."""

    name = "grid"

    def __init__(self, seed: int = 0, batch_size: int = 16) -> None:
        super().__init__(seed)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)

    def search(self) -> None:
        batch: list[int] = []
        for index in range(self.space.size):
            if not self.is_new(index):
                continue
            batch.append(index)
            if len(batch) == self.batch_size or (self.remaining is not None and len(batch) >= self.remaining):
                self.measure(batch)
                batch = []
        if batch:
            self.measure(batch)
