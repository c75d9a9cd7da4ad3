"""``owl`` stage: a recipe's per-block sparsities, its plan (OWL, ``thanos.pruning.owl``) -> ``owl.json``.

It reads the dense chain's Hessian stores of every block (``||X_j||^2 = N H_jj / 2``: no pass over the
model) and the original weights, one layer at a time, and writes one JSON file that the recipe's prune
jobs read their block's sparsity from (``block_sparsity``). The sparsity of block l is the exact fraction
``removed / parameters`` of the file, so every job of the recipe prunes the same counts. Assembly reports
the plan beside the sparsity written per block (``owl_blocks``: the report's ``owl``).
"""

from __future__ import annotations

import json
import logging
import math
import os
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.files.atomic import write_json
from thanos.pruning import owl as owl_rule
from thanos.pruning.sparsity import Sparsity
from thanos.recipes.recipe import Recipe

if TYPE_CHECKING:
    from thanos.models import ModelHandle

log = logging.getLogger(__name__)

FORMAT = 1
CITATION = (
    "Yin et al., Outlier Weighed Layerwise Sparsity (OWL): A Missing Secret Sauce for Pruning LLMs to "
    "High Sparsity, ICML 2024 (arXiv:2310.05175)"
)


def compute(
    model: str | Path | ModelHandle,
    hessians: list[str | Path] | None,
    recipe: Recipe,
    xnorms: dict[int, dict[str, Any]] | None = None,
    model_info: str | Path | None = None,
) -> dict[str, Any]:
    """The content of ``owl.json`` for an OWL ``recipe`` (its target sparsity, M and lambda): per block
    its outlier count, ratio, sparsity and integer count.

    ``hessians``: the dense chain's ``hessians_l.zarr`` of every block, in block order. ``xnorms``
    (instead, for tests and the library): {block: {group: ||X_j|| (b,)}} computed some other way.
    ``model_info``: the model's ``model_info.json`` (its layout: no transformers import).
    """
    from thanos.data.storage import Hessians
    from thanos.models import as_handle
    from thanos.pruning.algorithms.masks import input_norms

    if not recipe.owl:
        raise ValueError(f"owl: recipe {recipe.name} has profile {recipe.profile}, not owl")
    target, m, lam = recipe.sparsity.p, recipe.owl_m, recipe.owl_lambda
    handle = as_handle(model, model_info)
    layout, checkpoint = handle.layout, handle.checkpoint
    num_blocks = int(layout.num_blocks)
    if xnorms is None:
        if hessians is None or len(hessians) != num_blocks:
            have = 0 if hessians is None else len(hessians)
            raise ValueError(f"owl: the model has {num_blocks} blocks but {have} Hessian stores were given")
    blocks = []
    for block in range(num_blocks):
        prefix = layout.block_prefix(block)
        if xnorms is None:
            store = Hessians(hessians[block])
            if int(store.attrs.get("block", block)) != block:
                raise ValueError(
                    f"{hessians[block]} holds the Hessians of block {store.attrs['block']}, not {block}"
                )
            groups = dict.fromkeys(layout.group_of(name, block) for name in layout.block_layers(block))
            norms = {group: input_norms(store.get(group)) for group in groups}
        else:
            norms = xnorms[block]

        def layer(name: str, block: int = block, prefix: str = prefix, norms: dict = norms):
            return lambda: (checkpoint.tensor(f"{prefix}{name}.weight"), norms[layout.group_of(name, block)])

        found = owl_rule.block_outliers([layer(name) for name in layout.block_layers(block)], m)
        blocks.append(found)
        log.info(
            "owl: block %d: %d of %d scores are outliers (%.4f%%)",
            block,
            found.outliers,
            found.entries,
            100 * found.ratio,
        )
    sizes = [b.entries for b in blocks]
    sparsities = owl_rule.block_sparsities([b.ratio for b in blocks], target, lam, sizes)
    counts = owl_rule.block_counts(sparsities, sizes, target)
    return {
        "format": FORMAT,
        "profile": "owl",
        "citation": CITATION,
        "target": str(recipe.sparsity),
        "owl_m": m,
        "owl_lambda": lam,
        "parameters": sum(sizes),
        "removed": sum(counts),
        "source": "dense Hessians (||X_j||^2 = N H_jj / 2)" if xnorms is None else "input norms",
        "hessians": [str(path) for path in hessians] if xnorms is None else None,
        "blocks": [
            {
                "block": i,
                "parameters": b.entries,
                "outliers": b.outliers,
                "outlier_ratio": b.ratio,
                "sparsity": s,
                "removed": k,
            }
            for i, (b, s, k) in enumerate(zip(blocks, sparsities, counts, strict=True))
        ],
    }


def owl(
    model: str | Path | ModelHandle,
    hessians: list[str | Path],
    recipe: Recipe,
    out: str | Path,
    model_info: str | Path | None = None,
) -> dict[str, Any]:
    """Compute the per-block sparsities of an OWL ``recipe`` and write them to ``out`` atomically."""
    result = compute(model, hessians, recipe, model_info=model_info)
    write_json(out, result)
    log.info(
        "owl: %s, M %g, lambda %g: block sparsities %s",
        result["target"],
        recipe.owl_m,
        recipe.owl_lambda,
        ", ".join(f"{b['removed'] / b['parameters']:.4f}" for b in result["blocks"]),
    )
    return result


def load(path: str | Path) -> dict[str, Any]:
    """A checked ``owl.json``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such OWL file; run the owl stage (thanos owl) first") from None
    except ValueError as err:
        raise ValueError(f"{path}: not an owl.json ({err}); delete it and run again") from None
    if data.get("format") != FORMAT or not isinstance(data.get("blocks"), list):
        raise ValueError(f"{path}: not an owl.json of format {FORMAT}; delete it and run again")
    return data


def block_sparsity(path: str | Path, block: int, target: Sparsity | None = None) -> Fraction:
    """Block ``block``'s exact sparsity (removed / parameters) from ``owl.json``; with ``target``, the
    file must be of that target sparsity (a file of another recipe is refused)."""
    data = load(path)
    if target is not None and data["target"] != str(target):
        raise ValueError(f"{path}: OWL sparsities for {data['target']}, not {target}")
    blocks = data["blocks"]
    if not 0 <= block < len(blocks):
        raise ValueError(f"{path}: no block {block} (the file has {len(blocks)} blocks)")
    entry = blocks[block]
    return Fraction(int(entry["removed"]), int(entry["parameters"]))


def owl_blocks(owl: str | os.PathLike, layers: list[dict], recipe: Recipe) -> dict[str, Any]:
    """``owl.json``'s content (without its input paths) and, per block, the weights, zeros and sparsity of
    the written pruned layers beside OWL's planned sparsity; refused when the file is of another target."""
    data = load(owl)
    if data["target"] != str(recipe.sparsity) or not recipe.owl:
        raise ValueError(f"{owl}: OWL sparsities for {data['target']}, not for recipe {recipe.name}")
    measured: dict[int, list[int]] = {}
    for entry in layers:
        weights = math.prod(int(n) for n in entry["shape"])
        counts = measured.setdefault(int(entry["block"]), [0, 0])
        counts[0] += weights
        counts[1] += int(entry["zeros"])
    blocks = []
    for planned in data["blocks"]:
        weights, zeros = measured.get(int(planned["block"]), [0, 0])
        blocks.append(
            {
                **planned,
                "written_weights": weights,
                "written_zeros": zeros,
                "written_sparsity": zeros / weights if weights else 0.0,
            }
        )
    weights = sum(b["written_weights"] for b in blocks)
    zeros = sum(b["written_zeros"] for b in blocks)
    report = {key: value for key, value in data.items() if key not in ("hessians", "blocks")}
    return report | {
        "file": str(owl),
        "written_sparsity": zeros / weights if weights else 0.0,
        "blocks": blocks,
    }
