"""A recipe's name read back: the pattern's tag in a name (``pattern_tag``: ``u50``, ``2-4``, ``n30``,
``depth6``) and ``from_name``, which reads method, sparsity and alpha back from a ``Recipe.default_name``.
Torch-free."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from thanos.pruning import methods
from thanos.pruning.sparsity import (
    COUNT_KINDS,
    Sparsity,
    parse_sparsity,
)
from thanos.pruning.structures import TAGS

# the pattern kind's letter in a recipe's name (``pattern_tag``)
KINDS_OF_TAGS = {tag: kind for kind, tag in TAGS.items()}


def pattern_tag(sparsity: Sparsity) -> str:
    """The pattern in a recipe's name: 0.5 -> u50, 2:4 -> 2-4, structured:0.3 -> s30, neurons:0.3 -> n30,
    heads:0.33 -> h33, kv_heads:0.25 -> g25, depth:6 -> depth6, depth:0.2 -> d20, vocab:8000 -> vocab8000,
    vocab:0.3 -> v30."""
    if sparsity.structure.n_of_m:
        return f"{sparsity.n}-{sparsity.m}"
    if sparsity.kind in COUNT_KINDS and sparsity.n:  # a count: depth6, vocab8000
        return f"{sparsity.kind}{sparsity.n}"
    return f"{TAGS[sparsity.kind]}{float(sparsity.p) * 100:g}"


def from_name(name: str) -> dict[str, Any] | None:
    """``method``, ``sparsity`` and ``alpha`` (and ``profile`` for an OWL recipe) read back from a
    ``default_name``; None for other names. ``alpha`` is None when the name leaves it at its default."""
    alternatives = "|".join(re.escape(m) for m in sorted(methods.METHODS, key=len, reverse=True))
    match = re.match(
        rf"^(?P<method>{alternatives})_(?P<tag>(?:{'|'.join(COUNT_KINDS)})\d+|[{''.join(TAGS.values())}][\d.]+|\d+-\d+)(?:_a(?P<alpha>[\d.]+))?",
        name,
    )
    if not match:
        return None
    tag = match["tag"]
    try:
        counted = re.fullmatch(rf"({'|'.join(COUNT_KINDS)})(\d+)", tag)  # depth6, vocab8000
        if counted:
            sparsity = f"{counted[1]}:{counted[2]}"
        elif tag[0] in KINDS_OF_TAGS:
            kind = KINDS_OF_TAGS[tag[0]]
            sparsity = str(parse_sparsity(f"{kind}:{Fraction(tag[1:]) / 100}"))
        else:
            sparsity = str(parse_sparsity(tag.replace("-", ":")))
        alpha = float(match["alpha"]) if match["alpha"] else None
    except ValueError:
        return None
    found = {"method": match["method"], "sparsity": sparsity, "alpha": alpha}
    return found | {"profile": "owl"} if "_owl" in name[match.end() :] else found
