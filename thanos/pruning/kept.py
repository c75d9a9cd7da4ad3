"""What a size's cost table computes more than once, kept while the table is measured (``keeping``).

The table's points are recipes run one after another in one process, each from the dense chain's stores:
the width points factor the same Hessians (``thanos.pruning.factors``), the depth points run the same kept
blocks on the same windows (``thanos.stages.depth.maps``). Each such computation keeps its results in a
``Kept`` (by key, the first values that fit), up to ``KEPT_BYTES`` each, while a table is measured;
outside a table nothing is kept across blocks or recipes, and memory stays flat in depth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any

KEPT_BYTES = 512 << 20  # each kind's (SmolLM2-135M: 283 MB of MLP factors, 137 MB of block passes)

_budget = 0  # bytes each ``Kept`` holds across blocks and recipes (``keeping``)
_every: list[Kept] = []


class Kept:
    """Values by key within a number of bytes (``nbytes`` of a value): a value is kept while it fits beside
    those kept before it (the points pass over the blocks in the same order each time: the first blocks'
    values are read by every later point, where dropping the oldest to keep the newest would keep the values
    the next point reads last, and each dropped before it is read)."""

    def __init__(self, nbytes: Callable[[Any], int]) -> None:
        self.values: dict[Hashable, Any] = {}
        self.nbytes = nbytes
        _every.append(self)

    def get(self, key: Hashable) -> Any | None:
        """The value kept for ``key``, or None."""
        return self.values.get(key)

    def put(self, key: Hashable, value: Any, budget: int) -> bool:
        """Keep ``value`` when it fits in ``budget`` bytes beside those kept; whether it was kept."""
        if self.nbytes(value) + sum(self.nbytes(kept) for kept in self.values.values()) > budget:
            return False
        self.values[key] = value
        return True

    def trim(self, budget: int) -> None:
        """Drop the values kept last until the rest take at most ``budget`` bytes."""
        while sum(self.nbytes(value) for value in self.values.values()) > budget:
            self.values.popitem()


def budget() -> int:
    """The bytes each ``Kept`` holds across blocks and recipes now: 0 outside a table."""
    return _budget


@contextlib.contextmanager
def keeping(nbytes: int = KEPT_BYTES) -> Iterator[None]:
    """While a size's cost table is measured: each ``Kept`` holds up to ``nbytes``; every value dropped at
    the end (or at ``stop_keeping``)."""
    global _budget
    _budget = nbytes
    try:
        yield
    finally:
        stop_keeping()


def stop_keeping() -> None:
    """The table measured: what it kept dropped, nothing kept across blocks and recipes from now on."""
    global _budget
    _budget = 0
    for kept in _every:
        kept.trim(0)
