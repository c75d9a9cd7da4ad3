"""Sparsity patterns and the exact integer counts the paper writes for them.

A pattern is one of
- ``unstructured``: a fraction ``p`` of the layer's weights, anywhere;
- ``n:m``: in every group of ``m`` consecutive inputs of a row, ``n`` weights are removed;
- ``structured``: whole columns (inputs) removed, a fraction ``p`` of the layer;
- ``neurons``: whole MLP neurons removed, a fraction ``p`` of every block's MLP width: the input columns of
  the MLP's output projection (only that layer is pruned), so the model can be written smaller
  (``thanos.stages.compact``);
- ``heads``: whole attention query heads removed, ``ceil(p g)`` of the ``g`` query heads of every key/value
  group (so grouped-query attention stays valid; a model with one query head per group loses whole groups):
  the input columns of the attention's output projection, one head's ``head_dim`` columns at a time;
- ``kv_heads``: whole key/value groups removed, ``ceil(p kv)`` of the block's ``kv`` groups, with every query
  head that reads them.

- ``depth``: whole decoder blocks removed: ``depth:6`` six of them, ``depth:0.2`` ceil(0.2 L) of the L
  (``thanos.stages.depth.blocks`` chooses which);
- ``vocab``: tokens removed from the vocabulary: ``vocab:8000`` keeps 8000 tokens, ``vocab:0.3`` removes
  ceil(0.3 V) of the V (``thanos.models.vocabulary`` chooses which).

``neurons``, ``heads`` and ``kv_heads`` (``COMPACT_KINDS``) prune one layer per block and write the model
smaller (``thanos.stages.compact``).

Counts use exact rational arithmetic on the decimal value the user wrote, so ``0.3 * 10`` is 3, never
``3.0000000000000004`` rounded up to 4.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from thanos.pruning.structures import STRUCTURES, Structure

Kind = Literal["unstructured", "nm", "structured", "neurons", "heads", "kv_heads", "depth", "vocab"]
FRACTION_KINDS = ("unstructured", "structured", "neurons", "heads", "kv_heads")
COUNT_KINDS = ("depth", "vocab")  # a whole number (depth: blocks removed, vocab: tokens kept) or a fraction
# whole neurons or heads, one layer of each block pruned: the model can be written smaller
COMPACT_KINDS = tuple(kind for kind, structure in STRUCTURES.items() if structure.one_layer)
# whole attention heads: query heads, or key/value groups with theirs
HEAD_KINDS = tuple(kind for kind, structure in STRUCTURES.items() if structure.one_layer == "attention")
# the kept MLP width is rounded to a multiple of this (``neuron_count``): llama.cpp's block quantizations
# need a tensor's column count to be a multiple of 32 (k-quants: 256) and store it wider where it is not
WIDTH_MULTIPLE = 32
MIN_STEPS = 4  # a layer's width holds at least this many multiples (``width_multiple``)


def exact(x: float | int | str | Fraction) -> Fraction:
    """The rational number the user meant: ``exact(0.3) == Fraction(3, 10)``."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, str):
        return Fraction(x.strip())
    return Fraction(repr(float(x))) if isinstance(x, float) else Fraction(x)


@dataclass(frozen=True)
class Sparsity:
    """A parsed sparsity pattern. ``p`` is set for unstructured/structured, ``n`` and ``m`` for n:m; for
    depth ``n`` (a count of blocks) or ``p`` (a fraction of them); for vocab ``n`` (the tokens kept) or ``p``
    (the fraction of them removed)."""

    kind: Kind
    p: Fraction = Fraction(0)
    n: int = 0
    m: int = 0
    multiple: int = WIDTH_MULTIPLE  # neurons: the kept width's multiple (``neuron_count``)

    def __post_init__(self) -> None:
        if isinstance(self.multiple, bool) or not isinstance(self.multiple, int) or self.multiple < 1:
            raise ValueError(f"width multiple: expected a whole number >= 1, got {self.multiple!r}")
        if self.kind == "nm":
            if not (isinstance(self.n, int) and isinstance(self.m, int)) or not 0 < self.n < self.m:
                raise ValueError(
                    f"sparsity: n:m needs integers 0 < n < m, got {self.n}:{self.m} (e.g. '2:4' or '4:8')"
                )
        elif self.kind in COUNT_KINDS:
            if not ((self.n >= 1 and self.p == 0) or (self.n == 0 and 0 < self.p < 1)):
                if self.kind == "vocab":
                    raise ValueError(
                        f"sparsity: vocab takes a number of tokens kept (vocab:8000) or a fraction of them "
                        f"removed in (0, 1) (vocab:0.3), got {self.n or float(self.p)}"
                    )
                raise ValueError(
                    f"sparsity: depth takes a number of blocks (depth:6) or a fraction of them in (0, 1) "
                    f"(depth:0.2), got {self.n or float(self.p)}"
                )
        elif self.kind in FRACTION_KINDS:
            if not 0 <= self.p < 1:
                raise ValueError(
                    f"sparsity: {self.kind} fraction must lie in [0, 1), got {float(self.p)} "
                    "(e.g. '0.5' or 'structured:0.3')"
                )
        else:
            raise ValueError(
                f"sparsity: unknown kind {self.kind!r}; use unstructured, n:m, structured, neurons, heads, "
                "kv_heads, depth or vocab"
            )

    @property
    def structure(self) -> Structure:
        """What the pattern's kind is and what runs it (``thanos.pruning.structures``)."""
        return STRUCTURES[self.kind]

    @property
    def fraction(self) -> float:
        """The nominal fraction of weights removed (n/m for n:m)."""
        return self.n / self.m if self.kind == "nm" else float(self.p)

    def __str__(self) -> str:
        """The canonical text, read back exactly by ``parse_sparsity`` (``unstructured:0.5``, ``2:4``)."""
        if self.kind == "nm":
            return f"{self.n}:{self.m}"
        if self.kind in COUNT_KINDS and self.n:
            return f"{self.kind}:{self.n}"
        short = f"{float(self.p):g}"
        return f"{self.kind}:{short if exact(short) == self.p else repr(float(self.p))}"


_NM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_sparsity(spec: Sparsity | float | int | str) -> Sparsity:
    """Parse ``0.5``, ``"0.5"``, ``"unstructured:0.5"``, ``"2:4"``, ``"structured:0.3"``, ``"neurons:0.3"``,
    ``"heads:0.33"``, ``"kv_heads:0.25"``.

    >>> parse_sparsity("2:4")
    Sparsity(kind='nm', p=Fraction(0, 1), n=2, m=4)
    """
    if isinstance(spec, Sparsity):
        return spec
    if isinstance(spec, bool):
        raise ValueError(f"sparsity: expected a number or pattern string, got {spec!r}")
    if isinstance(spec, int | float):
        if isinstance(spec, float) and not math.isfinite(spec):
            raise ValueError(f"sparsity: must be a finite number in [0, 1), got {spec}")
        return Sparsity("unstructured", p=exact(spec))
    if not isinstance(spec, str):
        raise ValueError(f"sparsity: expected a number or pattern string, got {type(spec).__name__}")
    text = spec.strip().lower()
    if match := _NM.match(text):
        return Sparsity("nm", n=int(match.group(1)), m=int(match.group(2)))
    kind, _, value = text.rpartition(":")
    kind = kind or "unstructured"
    kind = kind.replace("-", "_")
    if kind in COUNT_KINDS:
        return _count(spec, kind, value)
    if kind not in FRACTION_KINDS:
        raise UnknownForm(
            f"sparsity: cannot parse {spec!r}{did_you_mean(spec)}; use a fraction ('0.5', "
            "'unstructured:0.5'), 'n:m' ('2:4', '4:8'), 'structured:<fraction>', 'neurons:<fraction>', "
            "'heads:<fraction>', 'kv_heads:<fraction>', 'depth:<blocks or fraction>' or "
            "'vocab:<tokens kept or fraction removed>'"
        )
    try:
        p = exact(value)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"sparsity: {value!r} in {spec!r} is not a number in [0, 1)") from None
    return Sparsity(kind, p=p)


class UnknownForm(ValueError):
    """A sparsity of no form ``parse_sparsity`` knows (its message lists the forms)."""


def did_you_mean(spec: str) -> str:
    """`` (did you mean 'neurons:0.3'?)`` where ``spec``'s kind is a misspelt one (or a size's ``params``);
    else empty."""
    import difflib

    kind, _, value = spec.strip().lower().rpartition(":")
    close = difflib.get_close_matches(kind, (*FRACTION_KINDS, *COUNT_KINDS, "params"), n=1, cutoff=0.7)
    return f" (did you mean {close[0] + ':' + value!r}?)" if close and value else ""


def sparsity_problem(err: ValueError, spec: Any) -> str:
    """What ``parse_sparsity`` found wrong with ``spec``, without the argument and value it names (for a
    message that names the option and the value itself: ``--sparsity 'vocab:1.5': give ...``)."""
    return str(err).removeprefix("sparsity: ").removeprefix(f"{spec!r}: ")


def _count(spec: str, kind: str, value: str) -> Sparsity:
    """``depth:6`` (blocks removed) or ``depth:0.2`` (a fraction of them); ``vocab:8000`` (tokens kept) or
    ``vocab:0.3`` (a fraction of them removed)."""
    unit = "blocks" if kind == "depth" else "tokens"
    try:
        number = exact(value)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"sparsity: {value!r} in {spec!r} is not a number of {unit} or a fraction") from None
    if number >= 1:
        if number.denominator != 1:
            raise ValueError(f"sparsity: {spec!r}: give a whole number of {unit} or a fraction in (0, 1)")
        if not value.strip().isdigit():  # 1.0 or 1e0: one block, or the fraction 1 (every block)?
            raise ValueError(
                f"sparsity: {spec!r} is read neither as {unit} nor as a fraction: write a number of {unit} "
                f"without a point ('{kind}:{int(number)}') or a fraction below 1 ('{kind}:0.2')"
            )
        return Sparsity(kind, n=int(number))  # type: ignore[arg-type]
    return Sparsity(kind, p=number)  # type: ignore[arg-type]


def depth_count(pattern: Sparsity, blocks: int) -> int:
    """Blocks ``depth:k`` removes from a model of ``blocks``: k, or ceil(p blocks) for a fraction; refused
    when none would be left."""
    k = pattern.n or math.ceil(pattern.p * blocks)
    if k >= blocks:
        raise ValueError(
            f"{pattern} removes {k} of the model's {blocks} blocks, which leaves none: at most {blocks - 1} "
            f"can go (a model keeps at least one block, the final norm and the head read its outputs); "
            f"give depth:{blocks - 1} or less"
        )
    return k


def vocab_count(pattern: Sparsity, tokens: int) -> int:
    """Tokens ``vocab:N`` keeps of a vocabulary of ``tokens``: N, or tokens - ceil(p tokens) for a fraction;
    refused when it keeps them all."""
    kept = pattern.n or tokens - math.ceil(pattern.p * tokens)
    if kept >= tokens:
        raise ValueError(f"{pattern} keeps {kept} of the model's {tokens} tokens, which removes none")
    return kept


def check_alpha(pattern: Sparsity, alpha: float | Fraction) -> None:
    """The outlier-row fraction ``alpha`` suits ``pattern``: in [0, 1), and 0 for unstructured sparsity
    (outlier rows exist for n:m and structured, Alg. 8 and 2) and for neurons (a removed neuron is a whole
    column: no row of it can stay dense). A ValueError says what to set otherwise."""
    if not 0 <= alpha < 1:
        raise ValueError(f"outlier-row fraction alpha must lie in [0, 1), got {float(alpha)}")
    if alpha and pattern.kind == "unstructured":
        raise ValueError(
            f"alpha {float(alpha):g} keeps outlier rows dense, which n:m and structured sparsity do (Alg. 8, "
            f"2); with unstructured sparsity {pattern} set alpha to 0 or leave it out"
        )
    if alpha and pattern.kind == "depth":
        raise ValueError(f"{pattern} removes whole blocks, which have no outlier rows: set alpha 0")
    if alpha and pattern.kind in COMPACT_KINDS:
        what = "neurons" if pattern.kind == "neurons" else "heads"
        raise ValueError(
            f"{pattern} removes whole {what} (every row of their columns), so no row can be kept dense: set "
            "alpha 0 (outlier rows need 'structured:p', which writes zeros in the original shape)"
        )


def unstructured_count(p: Fraction, c: int, b: int) -> int:
    """floor(p c b): weights to remove from a (c, b) layer (Alg. 1, line 2; the constraint of eq. (2))."""
    return math.floor(p * c * b)


def outlier_count(alpha: Fraction, c: int) -> int:
    """ceil(alpha c): rows kept dense (Section 4.7.1, 'Outlier rows')."""
    return math.ceil(alpha * c)


def structured_count(p: Fraction, alpha: Fraction, b: int) -> int:
    """s = ceil(p b / (1 - alpha)): columns to remove (Alg. 2, line 2)."""
    return math.ceil(p * b / (1 - alpha))


def width_multiple(multiple: int, b: int) -> int:
    """The multiple a kept width of a layer ``b`` wide is rounded to: the largest divisor of ``multiple``
    that divides ``b`` and leaves at least ``MIN_STEPS`` multiples in it, so the pruned width keeps the
    alignment up to ``multiple`` that the dense width had (1536 and 32: 32; 1536 and 256: 256; 100 and 32:
    4) and a small layer can still lose part of its width (a tiny 96 and 32: 16; 32 and 32: 8)."""
    common = math.gcd(multiple, b)
    return max(d for d in range(1, common + 1) if common % d == 0 and b // d >= min(MIN_STEPS, b))


def neuron_count(p: Fraction, b: int, multiple: int = WIDTH_MULTIPLE) -> int:
    """Neurons (columns of the MLP's output projection, of ``b``) to remove for ``neurons:p``.

    The kept width is the multiple of ``m = width_multiple(multiple, b)`` nearest to b (1 - p), so that the
    removed fraction is as close to p as a multiple allows (a tie keeps the wider), at least m and at most
    b: SmolLM2's 1536 at 0.3 keeps 1088 (1075.2 asked; 29.2 % removed), at 0.3 with multiple 256 1024.
    """
    m = width_multiple(multiple, b)
    kept = m * math.floor(b * (1 - p) / m + Fraction(1, 2))
    return b - min(b, max(m, kept))


def head_count(pattern: Sparsity, heads: int, kv_heads: int) -> tuple[int, bool]:
    """(r, whole groups) for ``heads:p`` and ``kv_heads:p`` on a block of ``heads`` query heads in
    ``kv_heads`` key/value groups: r = ceil(p g) query heads of each group of g = heads / kv_heads (the
    structured count of Alg. 2, line 2, with alpha 0, per group), or r = ceil(p kv_heads) whole groups (for
    ``kv_heads:p``, and for ``heads:p`` when every group has one query head). Refused when r would remove
    every head or every group."""
    g = heads // kv_heads
    whole = pattern.kind == "kv_heads" or g == 1
    total, unit = (kv_heads, "key/value groups") if whole else (g, "query heads of each key/value group")
    r = math.ceil(pattern.p * total)
    if r >= total:
        fix = "use kv_heads:p to remove whole groups" if not whole else "give a smaller fraction"
        raise ValueError(f"{pattern} removes {r} of the {total} {unit}, which leaves none; {fix}")
    return r, whole


def head_settings(kind: str, heads: int, kv_heads: int) -> list[tuple[str, int, int]]:
    """Every setting of ``heads:p`` (or ``kv_heads:p``) on a block of ``heads`` query heads in ``kv_heads``
    groups, fewest removed first: (its shortest pattern, the query heads and key/value groups it leaves)."""
    g = heads // kv_heads
    whole = kind == "kv_heads" or g == 1
    total = kv_heads if whole else g
    found = []
    for r in range(1, total):
        text = short_fraction(
            Fraction(r, total), lambda p, r=r: head_count(Sparsity(kind, p), heads, kv_heads)[0] == r
        )
        left = (heads - r * g, kv_heads - r) if whole else (heads - r * kv_heads, kv_heads)
        found.append((f"{kind}:{text}", *left))
    return found


def short_fraction(exact: Fraction, same: Callable[[Fraction], bool]) -> str:
    """The shortest decimal (2 to 6 digits, rounded down) that ``same`` accepts as ``exact``."""
    for digits in range(2, 7):
        p = Fraction(math.floor(exact * 10**digits), 10**digits)
        if p > 0 and same(p):
            return f"{float(p):g}"
    return repr(float(exact))
