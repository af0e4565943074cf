"""The tile space of a task and its doubling/halving moves (Zhang et al., Section 4.1, Eqs. 1-7).

A *config* (the paper's state without its legality bit) gives, for every loop dimension ``x`` of a
task, an ordered tuple of ``d_x`` positive integers whose product is the extent of ``x``:

    ((m0, m1, m2, m3), (k0, k1), (n0, n1, n2, n3))

Configs are plain nested tuples, hashable and printable. Each one has a dense integer index: the
factorisations of each dimension are listed once (a small table per dimension), and a config's index is
the mixed-radix number formed by its row in each table. The full space is never enumerated unless asked.

Counting. An ordered factorisation of ``n = prod p^e`` into ``d`` factors chooses, independently for
each prime ``p``, how its ``e`` copies are spread over the ``d`` positions: ``C(e + d - 1, d - 1)``
ways. For powers of two with splits (4, 2, 4) this gives the paper's 484,000 (512^3), 899,756 (1024^3)
and 1,589,952 (2048^3) configs.

Moves. The paper's action (Eq. 6) doubles factor ``i`` of a dimension and halves factor ``j`` of the same
dimension. For extents that are not powers of two we generalise it as NNI's G-BFS does: an action moves
one prime ``p`` of the extent from factor ``j`` to factor ``i``. A power-of-two dimension has only
``p = 2``, so its actions are exactly the paper's (26 of them for splits 4/2/4). An action is illegal in
a config where ``s_x[j]`` is not divisible by ``p``. Because every prime's exponent can be moved one unit
at a time between any two positions, every config is reachable from every other.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from schedule_gym.errors import TaskError
from schedule_gym.tasks.task import Task
from schedule_gym.types import Config

__all__ = ["Action", "Config", "DimSpace", "TileSpace", "prime_factors"]

#: Largest number of factorisations of one dimension that is tabulated (about 64 MiB of factors).
MAX_DIM_TABLE_ROWS = 2_000_000
#: Cost model of tabulating a dimension (:attr:`DimSpace.table_build_s`): seconds per row (its factors,
#: its index, its Python lists) plus seconds per (row, move) entry of :attr:`DimSpace.next_row`, for an
#: otherwise idle core; a core shared with other work takes longer.
TABLE_ROW_S = 30e-6
TABLE_ENTRY_S = 1.2e-6
#: :meth:`TileSpace.check_table_cost` warns when a task's tables would take longer than this to build...
SLOW_TABLES_S = 10.0
#: ... and refuses the task (``TaskError``) when they would take longer than this.
MAX_TABLES_S = 120.0


def prime_factors(n: int) -> list[tuple[int, int]]:
    """``[(p, e), ...]`` with ``n = prod p**e``, primes ascending (``[]`` for 1)."""
    out: list[tuple[int, int]] = []
    p = 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        if e:
            out.append((p, e))
        p += 1 if p == 2 else 2
    if n > 1:
        out.append((n, 1))
    return out


def divisors(n: int) -> np.ndarray:
    """The divisors of ``n``, ascending (int64)."""
    small = [v for v in range(1, math.isqrt(n) + 1) if n % v == 0]
    return np.array(sorted(set(small + [n // v for v in small])), dtype=np.int64)


def weak_compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """All tuples of ``parts`` non-negative integers summing to ``total``, in lexicographic order."""
    if parts == 1:
        return [(total,)]
    out = []
    for first in range(total + 1):
        for rest in weak_compositions(total - first, parts - 1):
            out.append((first, *rest))
    return out


@dataclass(frozen=True)
class Action:
    """Move one prime ``prime`` of dimension ``dim`` from factor ``shrink`` to factor ``grow``."""

    dim: str
    grow: int
    shrink: int
    prime: int

    @property
    def name(self) -> str:
        """Readable name, e.g. ``m: 2x[0] /2[3]`` (double factor 0 of m, halve factor 3)."""
        return f"{self.dim}: {self.prime}x[{self.grow}] /{self.prime}[{self.shrink}]"


_ACTION_NAME = re.compile(r"^\s*(\w+)\s*:\s*(\d+)x\[(\d+)\]\s*/(\d+)\[(\d+)\]\s*$")


class DimSpace:
    """The ordered factorisations of one extent into ``splits`` factors, and the moves between them."""

    def __init__(self, name: str, extent: int, splits: int) -> None:
        self.name = name
        self.extent = extent
        self.splits = splits
        self.primes = prime_factors(extent)
        self.size = math.prod(math.comb(e + splits - 1, splits - 1) for _, e in self.primes)
        self.actions: list[Action] = [
            Action(name, i, j, p)
            for p, _ in self.primes
            for i in range(splits)
            for j in range(splits)
            if i != j
        ]

    @property
    def table_build_s(self) -> float:
        """Estimated seconds to build this dimension's tables (:attr:`table`, :attr:`next_row`, its lists
        and masks), from the exact row count: ``size * (TABLE_ROW_S + TABLE_ENTRY_S * len(actions))``."""
        return self.size * (TABLE_ROW_S + TABLE_ENTRY_S * len(self.actions))

    def describe_tables(self) -> str:
        """``dimension 'm' (extent 1073741824 in 6 loops): 324,632 rows x 30 moves, about 21.4 s``"""
        return (
            f"dimension {self.name!r} (extent {self.extent} in {self.splits} loops): {self.size:,} rows x "
            f"{len(self.actions)} moves, about {self.table_build_s:.3g} s"
        )

    @cached_property
    def table(self) -> np.ndarray:
        """``(size, splits)`` int64 array of all factorisations, sorted lexicographically."""
        if self.size > MAX_DIM_TABLE_ROWS:
            raise TaskError(
                f"dimension {self.name!r} (extent {self.extent}, {self.splits} splits) has {self.size:,} "
                f"factorisations, more than the {MAX_DIM_TABLE_ROWS:,} that can be tabulated"
            )
        per_prime = []
        for p, e in self.primes:
            comps = np.array(weak_compositions(e, self.splits), dtype=np.int64)
            per_prime.append(p**comps)
        rows = [np.ones(self.splits, dtype=np.int64)] if not per_prime else []
        if per_prime:
            combos = itertools.product(*per_prime)
            rows = [np.prod(np.stack(c), axis=0) for c in combos]
        table = np.array(sorted(map(tuple, rows)), dtype=np.int64).reshape(-1, self.splits)
        table.setflags(write=False)
        return table

    @cached_property
    def tuples(self) -> list[tuple[int, ...]]:
        return [tuple(int(v) for v in row) for row in self.table]

    @cached_property
    def row_of(self) -> dict[tuple[int, ...], int]:
        return {t: r for r, t in enumerate(self.tuples)}

    @cached_property
    def next_row(self) -> np.ndarray:
        """``(size, n_actions)`` int64: the row each action leads to, ``-1`` where it is illegal."""
        out = np.full((self.size, len(self.actions)), -1, dtype=np.int64)
        row_of = self.row_of
        for r, t in enumerate(self.tuples):
            for a, act in enumerate(self.actions):
                if t[act.shrink] % act.prime == 0:
                    new = list(t)
                    new[act.grow] *= act.prime
                    new[act.shrink] //= act.prime
                    out[r, a] = row_of[tuple(new)]
        out.setflags(write=False)
        return out

    @cached_property
    def next_row_lists(self) -> list[list[int]]:
        """:attr:`next_row` as nested Python lists (faster to index one element at a time)."""
        return self.next_row.tolist()

    @cached_property
    def masks(self) -> np.ndarray:
        """``(size, n_actions)`` bool: which actions are legal in each row."""
        m = self.next_row >= 0
        m.setflags(write=False)
        return m


class TileSpace:
    """All tile configs of a task: counting, indexing, sampling, legality, moves and neighbours.

    >>> from schedule_gym.tasks import gemm
    >>> space = TileSpace(gemm(1024, 1024, 1024))
    >>> space.size
    899756
    >>> space.initial_config()
    ((1024, 1, 1, 1), (1024, 1), (1024, 1, 1, 1))
    >>> space.actions[0].name
    'm: 2x[0] /2[1]'
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.dims = [DimSpace(d.name, d.extent, d.splits) for d in task.dims]
        self.dim_sizes = tuple(d.size for d in self.dims)
        #: Exact number of configs, computed without enumeration (a Python int, never overflows).
        self.size: int = math.prod(self.dim_sizes)
        strides = []
        acc = 1
        for s in reversed(self.dim_sizes):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))
        self.actions: list[Action] = [a for d in self.dims for a in d.actions]
        # global action index -> (dimension position, local action index)
        self.action_dim: list[tuple[int, int]] = [
            (x, la) for x, d in enumerate(self.dims) for la in range(len(d.actions))
        ]
        self.action_offsets = tuple(itertools.accumulate([0] + [len(d.actions) for d in self.dims]))
        self._action_index = {a.name: i for i, a in enumerate(self.actions)}

    @property
    def table_build_s(self) -> float:
        """Estimated seconds to build every dimension's tables (what an environment does when it is made)."""
        return sum(d.table_build_s for d in self.dims)

    def check_table_cost(self, stacklevel: int = 2) -> None:
        """Refuse a task whose tables would take minutes to build, warn about one that is merely slow.

        Raises :class:`~schedule_gym.errors.TaskError` when :attr:`table_build_s` exceeds
        ``MAX_TABLES_S`` or a dimension has more than ``MAX_DIM_TABLE_ROWS`` rows; issues a
        ``UserWarning`` when it exceeds ``SLOW_TABLES_S``. Both name the costly dimensions, their row
        counts, the estimate and the limit. Nothing is built: the row counts are exact products of binomials.
        """
        estimate_s = self.table_build_s
        too_many = [d for d in self.dims if d.size > MAX_DIM_TABLE_ROWS]
        if estimate_s <= SLOW_TABLES_S and not too_many:
            return
        costly = sorted(self.dims, key=lambda d: d.table_build_s, reverse=True)
        named = "; ".join(d.describe_tables() for d in costly if d.table_build_s >= 0.1 * estimate_s or d in too_many)
        head = f"task {self.task.name!r} has factor tables estimated to take {estimate_s:.3g} s to build ({named})"
        advice = "use fewer loops (splits) on the largest dimensions, or an extent with fewer prime factors"
        if too_many:
            raise TaskError(
                f"{head}; a dimension may have at most MAX_DIM_TABLE_ROWS={MAX_DIM_TABLE_ROWS:,} rows: {advice}"
            )
        if estimate_s > MAX_TABLES_S:
            raise TaskError(f"{head}, more than the limit MAX_TABLES_S={MAX_TABLES_S:g} s: {advice}")
        warnings.warn(
            f"{head}, more than SLOW_TABLES_S={SLOW_TABLES_S:g} s (refused past MAX_TABLES_S={MAX_TABLES_S:g} s): "
            f"{advice}",
            UserWarning,
            stacklevel=stacklevel + 1,
        )

    def __repr__(self) -> str:
        return f"TileSpace({self.task.describe()}, size={self.size:,}, actions={self.n_actions})"

    def __len__(self) -> int:
        return self.size

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    # ------------------------------------------------------------------------------- configs
    def initial_config(self) -> Config:
        """The paper's starting state ``s0 = [[m,1,1,1],[k,1],[n,1,1,1]]``: the whole extent outermost."""
        return tuple((d.extent,) + (1,) * (d.splits - 1) for d in self.dims)

    def validate(self, config: object) -> Config:
        """Return ``config`` as a canonical nested tuple, or raise an error naming what is wrong."""
        if isinstance(config, np.ndarray) or not isinstance(config, Sequence) or isinstance(config, str):
            raise TypeError(
                f"a config must be a sequence of {len(self.dims)} factor tuples "
                f"(one per dimension {list(self.task.dim_names)}), got {config!r}"
            )
        if len(config) != len(self.dims):
            raise ValueError(
                f"config {config!r} has {len(config)} factor tuples; task {self.task.name!r} has "
                f"{len(self.dims)} dimensions {list(self.task.dim_names)}"
            )
        out = []
        for d, factors in zip(self.dims, config):
            if isinstance(factors, str) or not isinstance(factors, (Sequence, np.ndarray)):
                raise TypeError(f"factors of dimension {d.name!r} must be a sequence of ints, got {factors!r}")
            if len(factors) != d.splits:
                raise ValueError(
                    f"dimension {d.name!r} is split into {d.splits} loops, but config gives "
                    f"{len(factors)} factors {tuple(factors)!r}"
                )
            clean = []
            for f in factors:
                if isinstance(f, (bool, np.bool_)) or not isinstance(f, numbers.Integral) or f < 1:
                    raise ValueError(f"factor {f!r} of dimension {d.name!r} is not a positive integer")
                clean.append(int(f))
            if math.prod(clean) != d.extent:
                raise ValueError(
                    f"factors {tuple(clean)} of dimension {d.name!r} multiply to {math.prod(clean)}, "
                    f"not its extent {d.extent}"
                )
            out.append(tuple(clean))
        return tuple(out)

    def is_legal(self, config: object) -> bool:
        """Whether ``config`` is a valid factorisation for this task (the paper's ``J`` bit)."""
        try:
            self.validate(config)
        except (TypeError, ValueError):
            return False
        return True

    def __contains__(self, config: object) -> bool:
        return self.is_legal(config)

    def rows(self, config: Config) -> tuple[int, ...]:
        """The row of each dimension's factorisation in its table (``config`` must be valid)."""
        return tuple([d.row_of[f] for d, f in zip(self.dims, config)])

    def index(self, config: object) -> int:
        """Dense index of a config, ``0 <= index < size``."""
        rows = self.rows(self.validate(config))
        return sum(r * s for r, s in zip(rows, self.strides))

    def index_of_rows(self, rows: Sequence[int]) -> int:
        return sum(map(operator.mul, rows, self.strides))

    def rows_of_index(self, index: int) -> tuple[int, ...]:
        return tuple([(index // s) % n for s, n in zip(self.strides, self.dim_sizes)])

    def config(self, index: int) -> Config:
        """The config with dense index ``index``."""
        if type(index) is not int:  # the common case skips the abstract-class checks
            if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral):
                raise TypeError(f"config index must be an integer, got {index!r}")
        if not 0 <= index < self.size:
            raise IndexError(f"config index {index} is outside the space [0, {self.size})")
        return self.config_of_rows(self.rows_of_index(int(index)))

    def config_of_rows(self, rows: Sequence[int]) -> Config:
        return tuple([d.tuples[r] for d, r in zip(self.dims, rows)])

    def __iter__(self) -> Iterator[Config]:
        """All configs in index order, generated lazily."""
        for rows in itertools.product(*(range(n) for n in self.dim_sizes)):
            yield self.config_of_rows(rows)

    def factors_of_indices(self, indices: np.ndarray) -> list[np.ndarray]:
        """For an int array of config indices, one ``(len(indices), d_x)`` factor array per dimension."""
        idx = np.asarray(indices, dtype=np.int64)
        return [d.table[(idx // s) % n] for d, s, n in zip(self.dims, self.strides, self.dim_sizes)]

    # ------------------------------------------------------------------------------ sampling
    def sample_indices(self, rng: np.random.Generator, n: int, replace: bool = False) -> np.ndarray:
        """``n`` indices drawn uniformly (without replacement unless ``replace``)."""
        if not replace and n > self.size:
            raise ValueError(f"cannot draw {n} distinct configs from a space of {self.size}")
        return rng.choice(self.size, size=n, replace=replace).astype(np.int64)

    def sample(self, rng: np.random.Generator) -> Config:
        """One config drawn uniformly from the whole space."""
        return self.config(int(rng.integers(self.size)))

    # ------------------------------------------------------------------------------- actions
    def action_name(self, action: int) -> str:
        return self.actions[self.check_action(action)].name

    def parse_action(self, name: str) -> int:
        """The index of an action given by name, e.g. ``"m: 2x[0] /2[3]"`` (spaces optional)."""
        match = _ACTION_NAME.match(name) if isinstance(name, str) else None
        if match is not None:
            dim, p, i, q, j = match.groups()
            if p == q:
                canonical = Action(dim, int(i), int(j), int(p)).name
                if canonical in self._action_index:
                    return self._action_index[canonical]
        raise ValueError(f"unknown action {name!r}; actions look like {self.actions[0].name!r}")

    def check_action(self, action: object) -> int:
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, numbers.Integral):
            if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
                action = int(action)
            else:
                raise TypeError(f"action must be an integer in [0, {self.n_actions}), got {action!r}")
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action {action!r} is out of range [0, {self.n_actions})")
        return int(action)

    def step_rows(self, rows: Sequence[int], action: int) -> tuple[int, ...] | None:
        """Rows after ``action``, or ``None`` where the action is illegal."""
        x, la = self.action_dim[action]
        new = self.dims[x].next_row_lists[rows[x]][la]
        if new < 0:
            return None
        out = list(rows)
        out[x] = new
        return tuple(out)

    def apply(self, config: object, action: int) -> Config | None:
        """The paper's ``step(s, a)`` (Eq. 7) on configs: the next config, or ``None`` if illegal."""
        rows = self.step_rows(self.rows(self.validate(config)), self.check_action(action))
        return None if rows is None else self.config_of_rows(rows)

    def action_mask_of_rows(self, rows: Sequence[int]) -> np.ndarray:
        return np.concatenate([d.masks[r] for d, r in zip(self.dims, rows)])

    def action_mask(self, config: object) -> np.ndarray:
        """Bool array over all actions: which are legal in ``config``."""
        return self.action_mask_of_rows(self.rows(self.validate(config)))

    def random_moves(self, indices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One uniformly random legal move from each config (by dense index), vectorised.

        Configs without a legal move (every extent 1) stay where they are.
        """
        idx = np.asarray(indices, dtype=np.int64)
        rows = [(idx // s) % n for s, n in zip(self.strides, self.dim_sizes)]
        nxt = np.concatenate([d.next_row[r] for d, r in zip(self.dims, rows)], axis=1)
        scores = rng.random(nxt.shape) * (nxt >= 0)
        action = np.argmax(scores, axis=1)
        moved = scores[np.arange(len(idx)), action] > 0
        dim_of = np.array([x for x, _ in self.action_dim], dtype=np.int64)[action]
        new_row = nxt[np.arange(len(idx)), action]
        old_row = np.choose(dim_of, rows) if rows else np.zeros_like(idx)
        stride = np.array(self.strides, dtype=np.int64)[dim_of]
        return np.where(moved, idx + (new_row - old_row) * stride, idx)

    def neighbours(self, config: object) -> list[tuple[int, Config]]:
        """The paper's ``g(s)`` (Eq. 9): ``(action, next config)`` for every legal action."""
        rows = self.rows(self.validate(config))
        out = []
        for a in range(self.n_actions):
            nxt = self.step_rows(rows, a)
            if nxt is not None:
                out.append((a, self.config_of_rows(nxt)))
        return out
