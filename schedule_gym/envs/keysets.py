"""Per-sub-environment sets of config indices: what each session of a vector environment has evaluated.

:class:`KeySets` keeps them as one open-addressing hash table in a NumPy array (a batch of look-ups is a
few array operations per probe round); :class:`SmallKeySets` as one Python set (fewer array operations per
batch, so faster for a few sub-environments). Both take keys ``env * size + index``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KeySets", "SmallKeySets"]


class KeySets:
    """Per-environment sets of dense indices, kept as one open-addressing hash table (linear probing) of the keys
    ``env * size + index`` in a NumPy array: a batch of look-ups or insertions is a few array operations per
    probe round, with no Python object per key."""

    _EMPTY = -1
    _MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of key * 2**64 / phi
    _MIN_LOG2 = 12

    def __init__(self, size: int) -> None:
        self._size = size
        self._clear(self._MIN_LOG2)

    def _clear(self, log2: int) -> None:
        self._log2 = log2
        self._table = np.full(1 << log2, self._EMPTY, dtype=np.int64)
        self._wrap = (1 << log2) - 1
        self._shift = np.uint64(64 - log2)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.view(np.uint64) * self._MULTIPLIER) >> self._shift).view(np.int64)

    def keys(self) -> np.ndarray:
        return self._table[self._table != self._EMPTY]

    def clear(self) -> None:
        """Empty every set."""
        self._clear(self._MIN_LOG2)

    def drop(self, envs: np.ndarray) -> None:
        """Empty the sets of ``envs``."""
        keys = self.keys()
        keys = keys[~np.isin(keys // self._size, envs)]
        self._clear(self._MIN_LOG2)
        self.reserve(keys.size)
        self.insert(keys, self._home(keys))

    def find(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, found, slots)`` of distinct ``(env, index)`` pairs: whether each index is in its env's set,
        and the slot each probe ended at (where :meth:`insert` starts; stale after :meth:`reserve` grows)."""
        keys = envs * self._size + indices
        table, wrap = self._table, self._wrap
        slots = self._home(keys)
        values = table[slots]
        found = values == keys
        pending = np.flatnonzero(values != keys)
        pending = pending[values[pending] != self._EMPTY]
        while pending.size:
            at = (slots[pending] + 1) & wrap
            slots[pending] = at
            values = table[at]
            hit = values == keys[pending]
            found[pending[hit]] = True
            pending = pending[~hit & (values != self._EMPTY)]
        return keys, found, slots

    def reserve(self, n: int) -> bool:
        """Make room for ``n`` more keys (keeping the table at most half full); True if it grew (slots from
        :meth:`find` are then stale)."""
        if 2 * (self._count + n) <= len(self._table):
            return False
        keys = self.keys()
        log2 = self._log2
        while 2 * (self._count + n) > (1 << log2):
            log2 += 1
        self._clear(log2 + 1)  # a quarter full at most right after growing
        self.insert(keys, self._home(keys))
        return True

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Insert distinct keys that are in no set yet, probing from ``slots`` (their home or where :meth:`find`
        stopped); call :meth:`reserve` first."""
        table, wrap, empty = self._table, self._wrap, self._EMPTY
        self._count += keys.size
        while keys.size:
            pending = np.flatnonzero(table[slots] != empty)
            while pending.size:  # move every key on to the next empty slot
                at = (slots[pending] + 1) & wrap
                slots[pending] = at
                pending = pending[table[at] != empty]
            table[slots] = keys
            lost = table[slots] != keys  # keys that met at one empty slot: one took it, the others probe on
            if not lost.any():
                return
            keys, slots = keys[lost], slots[lost]


class SmallKeySets:
    """:class:`KeySets`' interface over one Python set of the keys: fewer array operations per batch, so faster
    for a few environments (each key costs a Python look-up, each batch none of the probe rounds)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> np.ndarray:
        return np.fromiter(self._keys, dtype=np.int64, count=len(self._keys))

    def clear(self) -> None:
        self._keys = set()

    def drop(self, envs: np.ndarray) -> None:
        size, dropped = self._size, set(envs.tolist())
        self._keys = {k for k in self._keys if k // size not in dropped}

    def find(self, envs: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = envs * self._size + indices
        held = self._keys
        return keys, np.array([k in held for k in keys.tolist()], dtype=bool), keys

    def reserve(self, n: int) -> bool:
        return False

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self._keys.update(keys.tolist())
