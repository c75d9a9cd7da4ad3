"""What a sparsity pattern's kind is, beside its grammar (``thanos.pruning.sparsity``): one ``Structure`` per
kind, read by the recipe's names, the combined recipes' order, the size search's axes, ``sparsity.json``'s
``structure``, the results' tables and the figures' words, instead of each of them switching on the kind's
name. Torch-free, as ``thanos.pruning.methods``.

A kind that **combines** (``order`` set) is one part of a combined recipe (``depth:4+neurons:0.3``), run in
increasing ``order`` whatever the order written: blocks first (scored on the dense model, so no width is
pruned in a block that then goes), heads before neurons (the attention feeds the MLP), the vocabulary last
(its tokens scored by the model the width parts wrote). A kind that is a **size axis** is one a size
(``params:p``) turns. ``sidecar``: what ``sparsity.json``'s ``structure`` says of it (None: counted on the
written weights, ``n:m`` or ``unstructured``). ``label``: a table's group of rows (``MLP neurons 30%``;
None: the pattern as written). ``name``: a structure in the quality-against-size figure's lines.
``by_method``: the method chooses what goes (False: depth's blocks by their scores, the vocabulary's tokens by
their use on a text, whatever the method). ``options``: the recipe options only this kind takes (a recipe of
another kind giving one is refused, naming the kinds that take it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Structure:
    """One kind of sparsity pattern: how a recipe's name tags it, where it goes in a combined recipe,
    whether a size turns it, and its words."""

    kind: str
    tag: str | None  # a recipe name's tag (``thanos_u50``, ``thanos_n30``, ``thanos_depth1``); None: n:m's
    order: int | None = None  # its place in a combined recipe; None: it does not combine
    size_axis: bool = False
    sidecar: str | None = None
    label: str | None = None
    name: str | None = None
    by_method: bool = True
    options: tuple[str, ...] = ()


STRUCTURES: dict[str, Structure] = {
    structure.kind: structure
    for structure in (
        Structure("unstructured", "u", label="Unstructured", options=("profile",)),
        Structure("nm", None),
        Structure("structured", "s", label="Structured"),
        Structure(
            "depth", "d", order=0, size_axis=True, sidecar="depth", name="whole blocks", by_method=False,
            options=("block_map",),
        ),
        Structure(
            "heads", "h", order=1, size_axis=True, sidecar="heads", label="Heads", name="heads",
            options=("compact",),
        ),
        Structure(
            "kv_heads", "g", order=1, sidecar="heads", label="KV groups", name="KV groups",
            options=("compact",),
        ),
        Structure(
            "neurons", "n", order=2, size_axis=True, sidecar="neurons", label="MLP neurons",
            name="MLP neurons", options=("compact", "width_multiple"),
        ),
        Structure(
            "vocab", "v", order=3, size_axis=True, sidecar="vocab", name="vocabulary", by_method=False,
            options=("vocab_text",),
        ),
    )
}  # fmt: skip
COMBINING = {kind: s.order for kind, s in STRUCTURES.items() if s.order is not None}  # kind -> its place
AXES = tuple(sorted((k for k, s in STRUCTURES.items() if s.size_axis), key=COMBINING.__getitem__))
TAGS = {kind: s.tag for kind, s in STRUCTURES.items() if s.tag is not None}


def takes(kind: str, option: str) -> bool:
    """Whether a recipe of ``kind`` takes the recipe option ``option`` (one only some kinds take)."""
    return option in STRUCTURES[kind].options
