"""A recipe's pruned layer files, ``PRUNED/block{l}/{layer}.safetensors`` (the weight) and ``.json`` (its
stats): which layers of a model are finished for a recipe.

A layer counts as finished only with both files, its weight file as its stats recorded it (size, and
modification time or sha256: ``STAMP``), and stats of the recipe's method and sparsity, of the
options the recipe sets (``blocksize``, ``alpha``, ``damp``; a ``Recipe`` sets them all, filled with
the method's defaults), of its sparsity profile (OWL: the target sparsity; the block's own is the
recipe's owl.json's) and, when known, of the original weight's shape. ``assemble`` refuses to publish a
model while a layer of ``model_info.json`` is not finished (it would be copied unpruned); the ``chain``
stage recomputes such layers before it trusts a block. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from thanos.files.layout import pruned_block_name, pruned_layer_name
from thanos.files.ledger import file_changed

OPTIONS = ("blocksize", "alpha", "damp")  # the options a layer's stats record (``options``)
# the stats' record of the weight file when it was written (``ledger.file_stamp``: size, modification time,
# sha256): a file edited since, the same size too, is not the one pruned; one touched alone is
STAMP = "file"


def mismatch(
    block_dir: Path, layer: str, recipe: Mapping[str, Any], shape: Sequence[int] | None = None
) -> str | None:
    """Why ``layer`` in ``block_dir`` is not a finished layer of ``recipe`` (``Recipe.to_dict``: ``method``,
    the canonical ``sparsity``, ``profile`` and the options, an unset one not compared); None when it is."""
    weight, stats_file = (block_dir / pruned_layer_name(layer, ext) for ext in ("safetensors", "json"))
    if not weight.is_file() or not stats_file.is_file():
        return "missing"
    try:
        stats = json.loads(stats_file.read_text())
    except ValueError:
        return f"unreadable {stats_file.name}"
    if STAMP in stats and file_changed(weight, stats[STAMP]):
        return f"{weight.name} changed since it was pruned"
    if stats.get("method") != recipe["method"]:
        return f"pruned by {stats.get('method')}, not {recipe['method']}"
    sparsity = recipe["sparsity"]
    profile, got_profile = recipe.get("profile") or "uniform", stats.get("profile") or "uniform"
    if got_profile != profile:
        return f"sparsity profile {got_profile}, not {profile}"
    got = stats.get("target_sparsity") if profile == "owl" else stats.get("sparsity")
    if got != sparsity:
        return f"sparsity {got}, not {sparsity}"
    options = stats.get("options") or {}
    for name in OPTIONS:
        want, got = recipe.get(name), options.get(name)
        if want is not None and (got is None or float(got) != float(want)):
            return f"{name} {got}, not {want}"
    if shape is not None and list(stats.get("shape") or []) != list(shape):
        return f"shape {stats.get('shape')}, the model's is {list(shape)}"
    return None


def block_layers(info: Mapping[str, Any], block: int) -> list[str]:
    """The prunable layers of block ``block`` from ``model_info.json``: ``layers`` when every block has
    the same, else the block's kind (``block_kinds``: the layers of each kind of block, ``block_kind``: the
    kind of each block; e.g. DeepSeek's first dense blocks before its mixture-of-experts blocks)."""
    if "block_kind" in info:
        return list(info["block_kinds"][info["block_kind"][block]])
    return list(info["layers"])


def unfinished(
    root: Path, num_blocks: int, layers: Callable[[int], Sequence[str]], recipe: Mapping[str, Any]
) -> dict[tuple[int, str], str]:
    """{(block, layer): why} for every layer ``layers(block)`` of every block under ``root`` that is not
    finished."""
    found = {}
    for block in range(num_blocks):
        for layer in layers(block):
            reason = mismatch(root / pruned_block_name(block), layer, recipe)
            if reason is not None:
                found[(block, layer)] = reason
    return found


def describe(problems: Mapping[tuple[int, str], str], limit: int = 10) -> str:
    """``block 1 mlp.down_proj (missing), ...`` (at most ``limit``, then how many more)."""
    items = [f"block {block} {layer} ({why})" for (block, layer), why in sorted(problems.items())]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
