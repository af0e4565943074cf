"""Loop orders next to tile factors: the order space of a task and the schedule space (tiles x orders).

A *loop order* lists the task's tiled loops ``(dimension, level)`` outermost first, as
:attr:`Task.loop_order <schedule_gym.tasks.Task.loop_order>` does; the CPU template builds the nest in
that order (:class:`~schedule_gym.loopnest.LoopNest`). A *schedule* is a tile config and a loop order.

Legal orders. The order space holds the permutations of the tiled loops in which **the levels of one
dimension stay nested** (``m0`` outside ``m1`` outside ``m2``...), so that a factor keeps its meaning: the
trip count of the level-``j`` tile inside the level-``j-1`` one. (TVM could reorder the split loops of one
dimension, but the result is a strided traversal that no factor describes.) Everything else is free and
the CPU template builds it (:class:`~schedule_gym.loopnest.LoopNest` states what it does with any order):
spatial loops in any interleaving, reduction loops anywhere. A reduction loop innermost leaves nothing to
vectorise; a reduction loop outermost leaves no parallel loop, so the kernel runs on one thread with the
whole output as its accumulator — slow, but the default order of a task whose reduction has as many
levels as its spatial dimensions starts that way, so such orders stay in the space. An order is
therefore a word over the dimensions in which dimension ``x`` appears ``d_x`` times (its ``i``-th
occurrence is level ``i``).

Counting, exactly and without enumeration. With ``L = sum_x d_x`` loops there are ``L! / prod_x d_x!``
legal orders (a multinomial coefficient). GEMM 4/2/4: ``10!/(4! 2! 4!) = 3150``.

Ranks. Legal orders are ranked in lexicographic order of their words (dimensions in task order); rank and
unrank use the same counts, with Python integers (a conv2d nest has about ``4 x 10^14`` orders).

Moves. ``swap[p]`` exchanges the loops at positions ``p`` and ``p + 1`` (the neighbour swap of LoopTune
and CompilerGym's ``loop_tool``). It is illegal where the two loops belong to the same dimension (it
would un-nest its levels). Adjacent swaps of distinct letters connect all words of a multiset (bubble
sort), so every legal order is reachable from every other.

Intra-tile orders (Patabandi and Hall's permutation domain). The default order puts the innermost level
of every dimension at the bottom of the nest; permuting those ``D`` loops among themselves, the outer
tiers fixed, gives ``D!`` orders (:meth:`OrderSpace.intra_tile_orders`), all legal.

Schedule space sizes. The Multiplicative Domain Formulation searches ``tiles x orders`` schedules; the
Additive one learns each domain apart, ``tiles + orders`` points (:class:`ScheduleSpace`).
"""

from __future__ import annotations

import itertools
import math
import numbers
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from schedule_gym.spaces.tile_space import TileSpace
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["Order", "OrderSpace", "Schedule", "ScheduleSpace", "multinomial"]

#: A loop order: ``(dimension, level)`` pairs, outermost first.
Order = tuple[tuple[str, int], ...]


def multinomial(counts: Sequence[int]) -> int:
    """``(sum counts)! / prod(c!)``: the number of words with these letter counts."""
    out = math.factorial(sum(counts))
    for c in counts:
        out //= math.factorial(c)
    return out


class Schedule(NamedTuple):
    """A tile config and a loop order (a plain nested tuple: hashable, printable, JSON-able as lists)."""

    tiles: Config
    order: Order


@dataclass(frozen=True)
class SwapAction:
    """``swap[p]``: exchange the loops at positions ``p`` and ``p + 1`` of the order."""

    position: int

    @property
    def name(self) -> str:
        return f"swap[{self.position}]"


_SWAP_NAME = re.compile(r"^\s*swap\s*\[\s*(\d+)\s*\]\s*$")


class OrderSpace:
    """The legal loop orders of a task (see the module docstring): validation, counting, ranks, sampling,
    swap moves and their masks.

    >>> from schedule_gym.tasks import gemm
    >>> space = OrderSpace(gemm(64, 64, 64))
    >>> space.size, space.n_actions
    (3150, 9)
    >>> space.describe(space.apply(space.default_order, 7))
    'm0 n0 m1 n1 k0 m2 n2 m3 k1 n3'
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.dim_names = task.dim_names
        self.splits = task.splits
        self._pos = {name: x for x, name in enumerate(self.dim_names)}
        self.n_loops = sum(self.splits)
        #: the canonical loop list (dimension by dimension, levels in order): observations follow it
        self.loops: Order = tuple((d.name, level) for d in task.dims for level in range(d.splits))
        self.default_order: Order = self.validate(task.loop_order)
        #: exact number of legal orders (a Python int)
        self.size: int = multinomial(self.splits)
        self.actions = [SwapAction(p) for p in range(self.n_loops - 1)]

    def __repr__(self) -> str:
        return f"OrderSpace({self.task.describe()}, size={self.size:,}, actions={self.n_actions})"

    def __len__(self) -> int:
        return self.size

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    # ------------------------------------------------------------------------------ checking
    def validate(self, order: object) -> Order:
        """``order`` as a canonical tuple of ``(dimension, level)`` pairs, or an error naming what is wrong."""
        if isinstance(order, (str, bytes)) or not isinstance(order, Sequence):
            raise TypeError(f"a loop order must be a sequence of (dimension, level) pairs, got {order!r}")
        pairs = []
        for item in order:
            if (
                isinstance(item, (str, bytes))
                or not isinstance(item, Sequence)
                or len(item) != 2
                or not isinstance(item[0], str)
                or isinstance(item[1], (bool, np.bool_))
                or not isinstance(item[1], numbers.Integral)
            ):
                raise TypeError(f"loop order entry {item!r} is not a (dimension name, level) pair")
            pairs.append((item[0], int(item[1])))
        expected = set(self.loops)
        unknown = [p for p in pairs if p not in expected]
        if unknown:
            raise ValueError(f"loop order {tuple(pairs)} names loops the task does not have: {unknown}; its loops are {list(self.loops)}")
        repeated = sorted({p for p in pairs if pairs.count(p) > 1})
        missing = [p for p in self.loops if p not in pairs]
        if repeated or missing:
            raise ValueError(
                f"loop order {tuple(pairs)} is not a permutation of the task's loops"
                + (f": {repeated} appear more than once" if repeated else "")
                + (f"; missing {missing}" if missing else "")
            )
        next_level = dict.fromkeys(self.dim_names, 0)
        for name, level in pairs:
            if level != next_level[name]:
                raise ValueError(
                    f"illegal loop order {self.describe(pairs)}: {name}{level} comes before {name}{next_level[name]}; "
                    "the levels of a dimension must stay nested (level 0 outermost)"
                )
            next_level[name] += 1
        return tuple(pairs)

    def is_legal(self, order: object) -> bool:
        try:
            self.validate(order)
        except (TypeError, ValueError):
            return False
        return True

    def __contains__(self, order: object) -> bool:
        return self.is_legal(order)

    @staticmethod
    def describe(order: Sequence[tuple[str, int]]) -> str:
        return " ".join(f"{d}{level}" for d, level in order)

    # ------------------------------------------------------------------------- words, ranks
    def word(self, order: Order) -> tuple[int, ...]:
        """The dimension positions of a (valid) order's loops."""
        return tuple(self._pos[name] for name, _ in order)

    def order_of_word(self, word: Sequence[int]) -> Order:
        seen = [0] * len(self.dim_names)
        out = []
        for x in word:
            out.append((self.dim_names[x], seen[x]))
            seen[x] += 1
        return tuple(out)

    def rank(self, order: object) -> int:
        """The lexicographic rank of a legal order, ``0 <= rank < size``."""
        word = self.word(self.validate(order))
        counts = list(self.splits)
        rank = 0
        for letter in word:
            for x in range(letter):
                if counts[x] > 0:
                    counts[x] -= 1
                    rank += multinomial(counts)
                    counts[x] += 1
            counts[letter] -= 1
        return rank

    def unrank(self, rank: int) -> Order:
        """The legal order of rank ``rank``."""
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, numbers.Integral):
            raise TypeError(f"an order rank must be an integer, got {rank!r}")
        if not 0 <= rank < self.size:
            raise IndexError(f"order rank {rank} is outside [0, {self.size})")
        rank = int(rank)
        counts = list(self.splits)
        word = []
        for _ in range(self.n_loops):
            for x in range(len(counts)):
                if counts[x] == 0:
                    continue
                counts[x] -= 1
                block = multinomial(counts)
                if rank < block:
                    word.append(x)
                    break
                rank -= block
                counts[x] += 1
        return self.order_of_word(word)

    def __iter__(self) -> Iterator[Order]:
        """Every legal order in rank order (only sensible for small spaces)."""
        for rank in range(self.size):
            yield self.unrank(rank)

    def sample(self, rng: np.random.Generator) -> Order:
        """A legal order drawn uniformly (a uniform shuffle of the word's letters)."""
        letters = [x for x, s in enumerate(self.splits) for _ in range(s)]
        return self.order_of_word([letters[i] for i in rng.permutation(len(letters))])

    # ------------------------------------------------------------------------------ moves
    def action_name(self, action: int) -> str:
        return self.actions[self.check_action(action)].name

    def parse_action(self, name: str) -> int:
        """The index of ``"swap[p]"``."""
        match = _SWAP_NAME.match(name) if isinstance(name, str) else None
        if match is None or not 0 <= int(match.group(1)) < self.n_actions:
            raise ValueError(f"unknown swap action {name!r}; swaps are swap[0] .. swap[{self.n_actions - 1}]")
        return int(match.group(1))

    def check_action(self, action: object) -> int:
        if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
            action = int(action)
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, numbers.Integral):
            raise TypeError(f"a swap action must be an integer in [0, {self.n_actions}), got {action!r}")
        if not 0 <= action < self.n_actions:
            raise ValueError(
                f"swap action {action!r} is out of range [0, {self.n_actions}): swap[p] exchanges positions p and "
                f"p + 1 of a nest of {self.n_loops} loops"
            )
        return int(action)

    def swap_legal(self, order: Order, position: int) -> bool:
        return order[position][0] != order[position + 1][0]

    def action_mask(self, order: Order) -> np.ndarray:
        """Bool array over the swap actions: which are legal in the (valid) ``order``."""
        return np.array([self.swap_legal(order, p) for p in range(self.n_actions)], dtype=bool)

    def apply(self, order: object, action: int) -> Order | None:
        """The order after ``swap[action]``, or ``None`` where the swap is illegal."""
        order = self.validate(order)
        p = self.check_action(action)
        if not self.swap_legal(order, p):
            return None
        out = list(order)
        out[p], out[p + 1] = out[p + 1], out[p]
        return tuple(out)

    # ----------------------------------------------------------------------- intra-tile orders
    @property
    def intra_tile_loops(self) -> Order:
        """The innermost level of every dimension, in the default order's positions (the bottom ``D`` loops)."""
        return self.default_order[-len(self.dim_names):]

    def intra_tile_orders(self) -> list[Order]:
        """The ``D!`` orders that permute :attr:`intra_tile_loops` below the default outer tiers."""
        outer = self.default_order[: -len(self.dim_names)]
        inner = self.intra_tile_loops
        innermost = {(d.name, d.splits - 1) for d in self.task.dims}
        if set(inner) != innermost:
            raise ValueError(
                f"the task's default order {self.describe(self.default_order)} does not end with the innermost "
                "level of every dimension, so it has no intra-tile sub-nest to permute"
            )
        return [outer + tuple(p) for p in itertools.permutations(inner)]


class ScheduleSpace:
    """Schedules (tile config, loop order) of a task: the product of its :class:`TileSpace` and
    :class:`OrderSpace`, with the interface search agents use (dense index, sampling, neighbours).

    A schedule's dense index is ``tile_index * orders.size + order_rank`` (a Python int: the product
    space of a convolution exceeds 64 bits). Neighbours are the tile moves (order kept) and the legal
    swaps (tiles kept). ``mdf_size`` and ``adf_size`` are the two formulations' sizes.

    >>> from schedule_gym.tasks import gemm
    >>> space = ScheduleSpace(gemm(1024, 1024, 1024))
    >>> space.mdf_size, space.adf_size
    (2834231400, 902906)
    """

    def __init__(self, task: Task, tiles: TileSpace | None = None) -> None:
        self.task = task
        self.tiles = tiles if tiles is not None else TileSpace(task)
        self.orders = OrderSpace(task)
        self.size: int = self.tiles.size * self.orders.size
        self.n_tile_actions = self.tiles.n_actions
        self.n_actions = self.tiles.n_actions + self.orders.n_actions

    @property
    def mdf_size(self) -> int:
        """Schedules of the Multiplicative Domain Formulation: tiles x orders."""
        return self.size

    @property
    def adf_size(self) -> int:
        """Points of the Additive Domain Formulation: tiles + orders."""
        return self.tiles.size + self.orders.size

    def __repr__(self) -> str:
        return f"ScheduleSpace({self.task.describe()}, tiles={self.tiles.size:,}, orders={self.orders.size:,})"

    def __len__(self) -> int:
        return self.size

    # ------------------------------------------------------------------------- schedules
    def initial_config(self) -> Schedule:
        """The untiled ``s0`` in the task's order."""
        return Schedule(self.tiles.initial_config(), self.orders.default_order)

    def validate(self, schedule: object) -> Schedule:
        if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence) or len(schedule) != 2:
            raise TypeError(f"a schedule must be a (tile config, loop order) pair, got {schedule!r}")
        return Schedule(self.tiles.validate(schedule[0]), self.orders.validate(schedule[1]))

    def is_legal(self, schedule: object) -> bool:
        try:
            self.validate(schedule)
        except (TypeError, ValueError):
            return False
        return True

    def __contains__(self, schedule: object) -> bool:
        return self.is_legal(schedule)

    def index(self, schedule: object) -> int:
        s = self.validate(schedule)
        return self.tiles.index(s.tiles) * self.orders.size + self.orders.rank(s.order)

    def config(self, index: int) -> Schedule:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral):
            raise TypeError(f"schedule index must be an integer, got {index!r}")
        if not 0 <= index < self.size:
            raise IndexError(f"schedule index {index} is outside the space [0, {self.size})")
        tile, rank = divmod(int(index), self.orders.size)
        return Schedule(self.tiles.config(tile), self.orders.unrank(rank))

    def sample(self, rng: np.random.Generator) -> Schedule:
        return Schedule(self.tiles.sample(rng), self.orders.sample(rng))

    def sample_index(self, rng: np.random.Generator) -> int:
        """A uniformly drawn dense index (also where the space exceeds 64 bits)."""
        return int(rng.integers(self.tiles.size)) * self.orders.size + self.orders.rank(self.orders.sample(rng))

    # ------------------------------------------------------------------------------ moves
    def action_name(self, action: int) -> str:
        if 0 <= action < self.n_tile_actions:
            return self.tiles.action_name(action)
        return self.orders.action_name(action - self.n_tile_actions)

    def parse_action(self, name: str) -> int:
        if isinstance(name, str) and _SWAP_NAME.match(name):
            return self.n_tile_actions + self.orders.parse_action(name)
        return self.tiles.parse_action(name)

    def check_action(self, action: object) -> int:
        if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
            action = int(action)
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, numbers.Integral):
            raise TypeError(f"action must be an integer in [0, {self.n_actions}), got {action!r}")
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action {action!r} is out of range [0, {self.n_actions})")
        return int(action)

    def apply(self, schedule: object, action: int) -> Schedule | None:
        """The schedule after ``action`` (a tile move or a swap), or ``None`` where it is illegal."""
        s = self.validate(schedule)
        a = self.check_action(action)
        if a < self.n_tile_actions:
            tiles = self.tiles.apply(s.tiles, a)
            return None if tiles is None else Schedule(tiles, s.order)
        order = self.orders.apply(s.order, a - self.n_tile_actions)
        return None if order is None else Schedule(s.tiles, order)

    def action_mask(self, schedule: object) -> np.ndarray:
        s = self.validate(schedule)
        return np.concatenate([self.tiles.action_mask(s.tiles), self.orders.action_mask(s.order)])

    def neighbours(self, schedule: object) -> list[tuple[int, Schedule]]:
        """``(action, next schedule)`` for every legal tile move and swap."""
        s = self.validate(schedule)
        out = [(a, Schedule(t, s.order)) for a, t in self.tiles.neighbours(s.tiles)]
        for p in range(self.orders.n_actions):
            if self.orders.swap_legal(s.order, p):
                order = list(s.order)
                order[p], order[p + 1] = order[p + 1], order[p]
                out.append((self.n_tile_actions + p, Schedule(s.tiles, tuple(order))))
        return out
