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

What runs it, declared rather than switched on: ``whole_blocks`` (whole blocks removed, chosen by their
scores on the dense chain's stores: no layer is pruned, so no recovery, and magnitude needs calibration
too), ``tokens`` (vocabulary tokens removed, chosen by their use on a text: its own step after the model's
other parts), ``one_layer`` (the one layer of each block pruned: ``mlp``, the MLP's output projection, or
``attention``, the attention's; the model is then written without the removed rows and columns), ``n_of_m``
(``n`` of every ``m`` weights of a row). ``modules``: where its name may be compared (its stage function and
its model-side math; ``tests/test_structures.py`` keeps every other module to this table).
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
    whole_blocks: bool = False
    tokens: bool = False
    one_layer: str | None = None
    n_of_m: bool = False
    modules: tuple[str, ...] = ()

    @property
    def every_layer(self) -> bool:
        """Whether it prunes weights in every layer (the paper's patterns: unstructured, n:m, structured)."""
        return not (self.whole_blocks or self.tokens or self.one_layer)

    @property
    def recovers(self) -> bool:
        """Whether its recipe can recover (train the kept weights of its pruned blocks; a combined recipe's
        last such part distils): whole blocks prune no weight of the kept ones, tokens none of the blocks'."""
        return not (self.whole_blocks or self.tokens)

    @property
    def shrinks(self) -> bool:
        """Whether the model is written smaller (fewer blocks, neurons or heads; the vocabulary aside)."""
        return self.whole_blocks or self.one_layer is not None


LAYER = "thanos.pruning.layer"  # a layer's mask: the count and the shape of what each kind removes
STRUCTURES: dict[str, Structure] = {
    structure.kind: structure
    for structure in (
        Structure("unstructured", "u", label="Unstructured", options=("profile",), modules=(LAYER,)),
        Structure("nm", None, n_of_m=True, modules=(LAYER,)),
        Structure("structured", "s", label="Structured", modules=(LAYER,)),
        Structure(
            "depth", "d", order=0, size_axis=True, sidecar="depth", name="whole blocks", by_method=False,
            options=("block_map",), whole_blocks=True,
            modules=("thanos.stages.depth.blocks", "thanos.stages.depth.maps", "thanos.stages.parts"),
        ),
        Structure(
            "heads", "h", order=1, size_axis=True, sidecar="heads", label="Heads", name="heads",
            options=("compact",), one_layer="attention", modules=(LAYER, "thanos.models.heads"),
        ),
        Structure(
            "kv_heads", "g", order=1, sidecar="heads", label="KV groups", name="KV groups",
            options=("compact",), one_layer="attention", modules=(LAYER, "thanos.models.heads"),
        ),
        Structure(
            "neurons", "n", order=2, size_axis=True, sidecar="neurons", label="MLP neurons",
            name="MLP neurons", options=("compact", "width_multiple"), one_layer="mlp",
            modules=("thanos.pruning.kernels", "thanos.models.neurons"),
        ),
        Structure(
            "vocab", "v", order=3, size_axis=True, sidecar="vocab", name="vocabulary", by_method=False,
            options=("vocab_text",), tokens=True,
            modules=("thanos.stages.vocab", "thanos.commands.prune_vocab"),
        ),
    )
}  # fmt: skip
COMBINING = {kind: s.order for kind, s in STRUCTURES.items() if s.order is not None}  # kind -> its place
AXES = tuple(sorted((k for k, s in STRUCTURES.items() if s.size_axis), key=COMBINING.__getitem__))
EVERY_LAYER = tuple(kind for kind, s in STRUCTURES.items() if s.every_layer)
TAGS = {kind: s.tag for kind, s in STRUCTURES.items() if s.tag is not None}


def takes(kind: str, option: str) -> bool:
    """Whether a recipe of ``kind`` takes the recipe option ``option`` (one only some kinds take)."""
    return option in STRUCTURES[kind].options


def of_sidecar(structure: str | None) -> Structure | None:
    """The kind whose ``sparsity.json`` (and compact record) says ``structure`` (``heads`` for both head
    kinds); None for another (``unstructured``, ``2:4``, a combined recipe's ``depth+neurons``)."""
    return next((s for s in STRUCTURES.values() if s.sidecar is not None and s.sidecar == structure), None)


def kind_of(pattern: str) -> str:
    """The kind a pattern's text names (``depth:4`` -> ``depth``, ``2:4`` -> ``nm``, ``0.5`` ->
    ``unstructured``); its numbers are not checked (``thanos.pruning.sparsity.parse_sparsity`` does)."""
    name, colon, _ = pattern.strip().lower().partition(":")
    if not colon:
        return "unstructured"
    return name if name in STRUCTURES else "nm" if name.isdigit() else name
