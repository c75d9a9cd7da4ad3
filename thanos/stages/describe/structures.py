"""What a compact model's card says of the structure it removed: a paragraph (``compact_text``) and a row of
its facts (``compact_row``) per structure (the structures' table's ``sidecar``): whole blocks with the maps
that replace them, attention heads, MLP neurons, vocabulary tokens."""

from __future__ import annotations

from typing import Any

from thanos.recipes.labels import (
    blocks_text,
)
from thanos.stages.describe.sparsity import (
    SparsitySummary,
)


def percent(value: float) -> str:
    """``12.34 %``: a fraction as the card writes it."""
    return f"{100 * value:.2f} %"


CHOSEN_BY = {
    "influence": "chosen by the lowest block influence on the calibration text",
    "relative": "chosen by the lowest relative change on the calibration text",
    "replaced": "chosen as the run of blocks a fitted linear map reproduces best on the calibration text",
}


def _maps_text(maps: list[dict[str, Any]]) -> str:
    """The card's sentences on the maps that replace the removed runs of blocks."""
    folded = [entry for entry in maps if "folded_into" in entry]
    text = "".join(
        f" Blocks {entry['blocks'][0]}-{entry['blocks'][1]} are replaced by a linear map fitted by least "
        f"squares on the calibration activations, folded into the MLP output projection of block "
        f"{entry['folded_into']}, which is then refitted by ridge least squares toward it on the same "
        "activations (no parameter added)."
        for entry in folded
    )
    return text + "".join(
        f" Blocks {entry['blocks'][0]}-{entry['blocks'][1]} are left out without a map: {entry['why']}."
        for entry in maps
        if "folded_into" not in entry and entry.get("why")
    )


def compact_text(compact: dict[str, Any]) -> str:
    """What a compact (neurons or heads removed) model is, for the card."""
    before, after = compact["parameters"]["original"], compact["parameters"]["kept"]
    counted = f"{after:,} of {before:,} parameters ({100 * (1 - after / before):.1f} % fewer)"
    return COMPACT_TEXTS.get(compact.get("structure"), _width_text)(compact, counted)


def _blocks_text(compact: dict[str, Any], counted: str) -> str:
    removed = compact["removed_blocks"]
    gone = f"{blocks_text(removed)} of the base model {'is' if len(removed) == 1 else 'are'} gone"
    return (
        f"Whole blocks are removed: the model keeps {compact['kept_blocks']} of its "
        f"{compact['original_blocks']} decoder blocks ({gone}, "
        f"{CHOSEN_BY.get(compact['metric'], compact['metric'])}; the others renumbered; "
        f"`num_hidden_layers` and every per-block setting in `config.json` follow), {counted}; the model "
        "loads wherever the base model loads, as a shallower dense model of the same architecture."
        + _maps_text(compact.get("maps") or [])
    )


def _heads_text(compact: dict[str, Any], counted: str) -> str:
    return (
        "The removed attention heads are cut out of the matrices: every block keeps "
        f"{compact['kept_heads']} of its {compact['original_heads']} query heads and "
        f"{compact['kept_kv_heads']} of its {compact['original_kv_heads']} key/value heads of "
        f"{compact['head_dim']} (`num_attention_heads`, `num_key_value_heads` and `head_dim` in "
        f"`config.json`; every other value the base model's), {counted}; the model loads wherever the base "
        "model loads, as a smaller dense model of the same architecture."
    )


def _width_text(compact: dict[str, Any], counted: str) -> str:
    return (
        "The removed MLP neurons are cut out of the matrices: every block keeps "
        f"{compact['kept_width']} of its {compact['original_width']} neurons"
        + (f" (a multiple of {compact['multiple']})" if compact.get("multiple", 1) > 1 else "")
        + f" (`{compact['width_key']}` in "
        "`config.json` is "
        f"{compact['kept_width']}, every other value the base model's), {counted}; the model loads wherever "
        "the base model loads, as a smaller dense model of the same architecture."
    )


def _tokens_text(compact: dict[str, Any], counted: str) -> str:
    return (
        f"The vocabulary keeps {compact['kept_tokens']:,} of its {compact['original_tokens']:,} tokens (the "
        f"rows of the embedding and the output head of the others are gone, `vocab_size` in `config.json` "
        f"follows, the tokenizer files are rewritten), {counted}; the model loads wherever the base model "
        "loads, as a model of a smaller vocabulary."
    )


def compact_row(compact: dict[str, Any], summary: SparsitySummary) -> str:
    """The card's row of what a compact model removed (its written weights hold no removed neuron)."""
    before, after = compact["parameters"]["original"], compact["parameters"]["kept"]
    return COMPACT_ROWS.get(compact.get("structure"), _width_row)(compact, summary, before - after)


def _blocks_row(compact: dict[str, Any], summary: SparsitySummary, gone: int) -> str:
    blocks, removed_blocks = compact["original_blocks"], compact["removed_blocks"]
    which = ", ".join(map(str, removed_blocks))
    count, indices = len(removed_blocks), "index" if len(removed_blocks) == 1 else "indices"
    return (
        f"| removed | {count} of the {blocks} blocks ({indices} {which}, counted from 0): "
        f"{gone:,} parameters |"
    )


def _heads_row(compact: dict[str, Any], summary: SparsitySummary, gone: int) -> str:
    removed, heads = compact["removed_per_block"], compact["original_heads"]
    groups = compact["original_kv_heads"] - compact["kept_kv_heads"]
    return (
        f"| removed | {removed} of the {heads} query heads of every block ({percent(removed / heads)})"
        + (f", {groups} key/value groups with them" if groups else "")
        + f", with their columns of {compact['output_projection']} and rows of "
        f"{', '.join(compact['projections'][: 3 if groups else 1])}: {gone:,} parameters; the "
        f"written weights hold {percent(summary.global_sparsity)} zeros |"
    )


def _width_row(compact: dict[str, Any], summary: SparsitySummary, gone: int) -> str:
    removed, width = compact["removed_per_block"], compact["original_width"]
    return (
        f"| removed | {removed} of the {width} MLP neurons of every block ({percent(removed / width)}), "
        f"with their column of {compact['output_projection']} and rows of {', '.join(compact['feeders'])}: "
        f"{gone:,} parameters; the written weights hold {percent(summary.global_sparsity)} zeros |"
    )


def _tokens_row(compact: dict[str, Any], summary: SparsitySummary, gone: int) -> str:
    kept, before = compact["kept_tokens"], compact["original_tokens"]
    return f"| removed | {before - kept:,} of the {before:,} tokens of the vocabulary: {gone:,} parameters |"


# a compact record's paragraph and row of the card, by its structure (the structures' table's ``sidecar``)
COMPACT_TEXTS = {"depth": _blocks_text, "heads": _heads_text, "neurons": _width_text, "vocab": _tokens_text}


COMPACT_ROWS = {"depth": _blocks_row, "heads": _heads_row, "neurons": _width_row, "vocab": _tokens_row}
