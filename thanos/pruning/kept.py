"""What a size's cost table computes more than once, kept while the table is measured (``keeping``).

The table's points are recipes run one after another in one process, each from the dense chain's stores:
the width points factor the same Hessians (``thanos.pruning.factors``), the depth points run the same kept
blocks on the same windows (``thanos.stages.depth.maps``). Each such computation keeps its results in a
``Kept`` (by key, least recently used dropped first), up to ``KEPT_BYTES`` each, while a table is measured;
outside a table nothing is kept across blocks or recipes, and memory stays flat in depth.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

KEPT_BYTES = 512 << 20  # each kind's (SmolLM2-135M: 283 MB of MLP factors, 137 MB of block passes)

_budget = 0  # bytes each ``Kept`` holds across blocks and recipes (``keeping``)
_every: list[Kept] = []


class Kept:
    """Values by key, those used longest ago dropped first beyond a number of bytes (``nbytes`` of a
    value)."""

    def __init__(self, nbytes: Callable[[Any], int]) -> None:
        self.values: OrderedDict[Hashable, Any] = OrderedDict()
        self.nbytes = nbytes
        _every.append(self)

    def get(self, key: Hashable) -> Any | None:
        """The value kept for ``key``, or None."""
        value = self.values.get(key)
        if value is not None:
            self.values.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self.values[key] = value

    def trim(self, budget: int) -> None:
        """Drop every value larger than ``budget`` bytes, then those used longest ago until the rest take
        at most ``budget``."""
        for key in [key for key, value in self.values.items() if self.nbytes(value) > budget]:
            del self.values[key]
        while sum(self.nbytes(value) for value in self.values.values()) > budget:
            self.values.popitem(last=False)


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
