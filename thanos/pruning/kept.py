"""What a size's runs compute more than once, kept for the duration of a scope (``keeping``).

A size's cost table runs its points one after another in one process, each from the dense chain's stores: the
width points factor the same Hessians (``thanos.pruning.factors``), the depth points score the same blocks
and run the same kept blocks on the same windows (``thanos.stages.depth``). Several sizes in one command
write their chosen mixes in one working directory, each depth part from the same dense stores: the same
scores and passes again. Each such computation keeps its results in a ``Kept`` of its kind (by key, the
first values that fit), up to ``KEPT_BYTES`` each, while a scope keeping that kind is open; a value is
dropped when the scope it was kept in ends. Outside every scope nothing is kept across blocks or recipes,
and memory stays flat in depth.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterator
from pathlib import Path
from typing import Any

KEPT_BYTES = 512 << 20  # each kind's (SmolLM2-135M: 283 MB of MLP factors, 137 MB of block passes)
# the kinds kept (``Kept.kind``)
FACTORS = "inverse factors"
BLOCK_PASSES = "block passes"
BLOCK_SCORES = "block scores"


@dataclasses.dataclass(eq=False)
class Scope:
    """A scope of ``keeping``: the bytes each kept kind holds, the kinds (None: every kind)."""

    nbytes: int
    kinds: frozenset[str] | None

    def keeps(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds


_scopes: list[Scope] = []  # the open scopes, innermost last
_every: list[Kept] = []


class Kept:
    """Values of one ``kind`` by key within a number of bytes (``nbytes`` of a value): a value is kept while
    it fits beside those kept before it (the points pass over the blocks in the same order each time: the
    first blocks' values are read by every later point, where dropping the oldest to keep the newest would
    keep the values the next point reads last, and each dropped before it is read)."""

    def __init__(self, kind: str, nbytes: Callable[[Any], int]) -> None:
        self.kind = kind
        self.values: dict[Hashable, Any] = {}
        self.scopes: dict[Hashable, Scope | None] = {}  # the scope each value was kept in (None: none)
        self.nbytes = nbytes
        _every.append(self)

    def budget(self) -> int:
        """The bytes this kind holds across blocks and recipes now: the innermost scope's that keeps it, 0
        outside every one."""
        scope = self._scope()
        return 0 if scope is None else scope.nbytes

    def _scope(self) -> Scope | None:
        """The innermost open scope that keeps this kind (None: none)."""
        return next((scope for scope in reversed(_scopes) if scope.keeps(self.kind)), None)

    def get(self, key: Hashable) -> Any | None:
        """The value kept for ``key``, or None."""
        return self.values.get(key)

    def put(self, key: Hashable, value: Any, budget: int) -> bool:
        """Keep ``value`` when it fits in ``budget`` bytes beside those kept; whether it was kept. It is
        dropped when the innermost scope that keeps this kind ends (``trim`` drops one kept outside any)."""
        if self.nbytes(value) + sum(self.nbytes(kept) for kept in self.values.values()) > budget:
            return False
        self.values[key] = value
        self.scopes[key] = self._scope()
        return True

    def trim(self, budget: int) -> None:
        """Drop the values kept last until the rest take at most ``budget`` bytes."""
        while sum(self.nbytes(value) for value in self.values.values()) > budget:
            key = next(reversed(self.values))
            del self.values[key], self.scopes[key]

    def drop(self, scope: Scope) -> None:
        """Drop the values kept in ``scope``."""
        for key in [key for key, kept_in in self.scopes.items() if kept_in is scope]:
            del self.values[key], self.scopes[key]


def as_written(path: str | Path) -> tuple[str, int, int]:
    """A file or directory in a key: its path and how it was written (inode, modification time), so that
    one written again is another key."""
    stat = Path(path).stat()
    return str(path), stat.st_ino, stat.st_mtime_ns


@contextlib.contextmanager
def keeping(nbytes: int = KEPT_BYTES, kinds: Collection[str] | None = None) -> Iterator[Scope]:
    """For the duration, each ``Kept`` of ``kinds`` (default: every kind) holds up to ``nbytes``; what was
    kept in this scope is dropped at its end (or at ``stop_keeping``), what an enclosing scope kept stays."""
    scope = Scope(nbytes, None if kinds is None else frozenset(kinds))
    _scopes.append(scope)
    try:
        yield scope
    finally:
        stop_keeping(scope)


def stop_keeping(scope: Scope) -> None:
    """``scope`` ended (a size's cost table measured; nothing when it has ended already): what it kept
    dropped, and the scopes inside it ended too; the enclosing scope's budgets apply again."""
    if scope not in _scopes:
        return
    while _scopes:
        inner = _scopes.pop()
        for kept in _every:
            kept.drop(inner)
        if inner is scope:
            return
