"""``prune`` stage: prune some linear layers of one block with ``thanos.prune_layer``.

Each layer's original weight is read lazily from the checkpoint and its group's Hessian from the
hessians store (one group in memory at a time); results are written atomically as
``DIR/{layer}.safetensors`` (tensor ``weight``, original dtype) and ``DIR/{layer}.json`` (stats).

A ``neurons:p`` recipe prunes only the MLP's output projection (``thanos.models.neurons``), a ``heads:p``
or ``kv_heads:p`` recipe only the attention's (``thanos.models.heads``), whose stats also list the
``removed_columns`` (and ``removed_heads``); every other layer gets its stats (``kept_dense``) and an
empty weight file (no tensor: the original weight is used; nothing is copied), so that the chain, the
workflow's per-layer outputs, the resume checks and the assembly see every layer of the block finished.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from thanos.data.storage import Hessians
from thanos.files.atomic import atomic_path, write_json
from thanos.files.layout import pruned_layer_name
from thanos.files.ledger import file_stamp
from thanos.files.pruned_layers import STAMP
from thanos.models import ModelHandle, as_handle
from thanos.pruning import factors, methods
from thanos.pruning.layer import PruneStats, prune_layer
from thanos.pruning.sparsity import Sparsity
from thanos.recipes.recipe import Recipe
from thanos.stages.common import resolve_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlockInputs:
    """What a block's pruning reads besides the model's weights.

    ``hessians``: the block's Hessians store (None for a method without). ``owl``: an OWL recipe's
    ``owl.json`` (``thanos.stages.owl_plan``): the block is pruned at its sparsity there (exact, removed /
    parameters), and the stats record the profile and the target. ``model_info``: the model's
    ``model_info.json``, whose layout names the layers (no transformers import); without it the adapter
    finds them (``thanos.models.ModelHandle``); a model given as a handle has its own."""

    hessians: str | Path | None = None
    owl: str | Path | None = None
    model_info: str | Path | None = None


def prune(
    model: str | Path | ModelHandle,
    block: int,
    recipe: Recipe,
    out_dir: str | Path,
    layers: list[str] | None = None,
    inputs: BlockInputs = BlockInputs(),
    device: str = "auto",
) -> list[dict]:
    """Prune ``layers`` of block ``block`` with ``recipe`` (all of the block's that its ``exclude`` leaves
    when None), reading ``inputs``, and return their stats."""
    hessians, owl = inputs.hessians, inputs.owl
    handle = as_handle(model, inputs.model_info)
    model_dir, layout, checkpoint = handle.path, handle.layout, handle.checkpoint
    prefix = layout.block_prefix(block)
    layers = _checked_layers(layout, block, recipe, layers)
    store = _hessians(hessians, block, recipe)
    sparsity, profile = _block_sparsity(recipe, owl, block)
    dev = resolve_device(device)
    out_dir = Path(out_dir)
    only, heads = None, None  # neurons, heads: the one layer pruned; heads: (query heads, groups)
    if sparsity.structure.one_layer == "mlp":
        from thanos.models.neurons import mlp_layout

        only = mlp_layout(layout, checkpoint).output
    elif sparsity.structure.one_layer == "attention":
        from thanos.models.heads import attention_layout, check_config_accepts

        attention = attention_layout(model_dir, layout, checkpoint)
        if recipe.compact:  # a workflow refuses a count the config would in its first job, not its assembly
            check_config_accepts(model_dir, attention, sparsity)
        only, heads = attention.output, (attention.heads, attention.kv_heads)
    results = []
    with factors.block():  # a Hessian's inverse factor kept for the block's next layers that read it
        current: tuple[str, torch.Tensor] | None = None  # one group's Hessian in memory at a time
        for layer in layers:
            where = {"block": block, "layer": layer, "group": layout.group_of(layer, block)}
            if only is not None and layer != only:
                results.append(
                    _keep_dense(recipe, checkpoint.shape(f"{prefix}{layer}.weight"), where, out_dir)
                )
                continue
            H = None
            if store is not None:
                if current is None or current[0] != where["group"]:
                    current = None  # the previous group's H is freed before the next one is read
                    current = (where["group"], store.get(where["group"]).to(dev))
                H = current[1]
            weight = checkpoint.tensor(f"{prefix}{layer}.weight")
            if H is not None and tuple(H.shape) != (weight.shape[1],) * 2:
                raise ValueError(
                    f"{hessians}: Hessian of group {where['group']} is {tuple(H.shape)} but {layer} of block "
                    f"{block} has {weight.shape[1]} inputs; the store belongs to another model"
                )
            options = {"blocksize": recipe.blocksize, "alpha": recipe.alpha, "damp": recipe.damp}
            name = f"block {block} {layer}"
            result = prune_layer(
                weight.to(dev), H, recipe.method, sparsity, **options, name=name, heads=heads
            )
            stats = result.stats.to_dict() | where | {"options": result.options, **profile}
            if store is not None and where["group"] in store.attrs.get("experts", {}):
                # a mixture-of-experts expert: the tokens the router sent it, and whose Hessian pruned it
                stats["routing"] = store.attrs["experts"][where["group"]]
            if result.columns is not None:
                stats["removed_columns"] = result.columns.tolist()
            if heads is not None:
                head_dim = weight.shape[1] // heads[0]
                stats["removed_heads"] = sorted({c // head_dim for c in stats["removed_columns"]})
            results.append(_write(out_dir, result.weight, stats))
            del weight, result  # not alive while the next layer is read and pruned
    return results


def _checked_layers(layout: Any, block: int, recipe: Recipe, layers: Sequence[str] | None) -> list[str]:
    """The layers to prune: ``layers``, or every layer of the block that the recipe's ``exclude`` leaves;
    an unknown or excluded name is refused before any work."""
    kept = recipe.layers(layout.block_layers(block), layout.layers)
    layers = list(layers) if layers else kept
    for layer in layers:
        layout.group_of(layer, block)  # unknown names fail here
        if layer not in kept:
            raise ValueError(f"layer {layer} is excluded by --exclude {' '.join(recipe.exclude)}: not pruned")
    return layers


def _hessians(hessians: str | Path | None, block: int, recipe: Recipe) -> Hessians | None:
    """The block's hessians store (checked to be of ``block``); None for a method that needs none."""
    if hessians is None:
        if recipe.needs_hessian:
            raise ValueError(
                f"--hessians is required for method {recipe.method!r} "
                f"(only {methods.without_hessian()} run without)"
            )
        return None
    store = Hessians(hessians)
    if int(store.attrs.get("block", block)) != block:
        raise ValueError(f"{hessians} holds the Hessians of block {store.attrs['block']}, not block {block}")
    return store


def _block_sparsity(recipe: Recipe, owl: str | Path | None, block: int) -> tuple[Sparsity, dict[str, Any]]:
    """The block's sparsity and what its stats record of it: the recipe's, or with ``owl`` the block's
    exact OWL sparsity (removed / parameters of ``owl.json``) and the target."""
    if owl is None:
        return recipe.sparsity, {}
    from thanos.stages.owl_plan import block_sparsity

    sparsity = Sparsity("unstructured", p=block_sparsity(owl, block, recipe.sparsity))
    profile = {"profile": "owl", "target_sparsity": str(recipe.sparsity), "block_sparsity": str(sparsity.p)}
    log.info(
        "prune: block %d: OWL sparsity %.6f (target %s, %s)", block, float(sparsity.p), recipe.sparsity, owl
    )
    return sparsity, profile


def _write(out_dir: Path, weight: torch.Tensor, stats: dict[str, Any]) -> dict[str, Any]:
    """``{layer}.safetensors`` (tensor ``weight``) and ``{layer}.json`` (its stats), each atomically."""
    layer = stats["layer"]
    with atomic_path(weight_file := out_dir / pruned_layer_name(layer, "safetensors")) as tmp:
        save_file({"weight": weight.cpu().contiguous()}, str(tmp))
    stats = stats | {STAMP: file_stamp(weight_file)}
    write_json(out_dir / pruned_layer_name(layer, "json"), stats)
    log.info(
        "prune: block %d %s: sparsity %.4f, objective %s, %.2fs on %s",
        stats["block"],
        layer,
        stats["achieved_sparsity"],
        "n/a" if stats["objective"] is None else f"{stats['objective']:.4g}",
        stats["seconds"],
        stats["device"],
    )
    return stats


def _keep_dense(recipe: Recipe, shape: Sequence[int], where: dict[str, Any], out_dir: Path) -> dict:
    """A layer a ``neurons`` recipe leaves as it is: an empty weight file, and the stats a pruned layer
    has (``PruneStats``: nothing removed, no time spent) marked ``kept_dense``."""
    stats = PruneStats(
        method=recipe.method,
        sparsity=str(recipe.sparsity),
        achieved_sparsity=0.0,
        objective=0.0,
        seconds=0.0,
        device="cpu",
        outlier_rows=0,
        blocksize=None,
        alpha=0.0,
        damp=None,
        damp_retries=0,
        dead_columns=0,
        shape=tuple(shape),
    ).to_dict()
    options = {"blocksize": recipe.blocksize, "alpha": recipe.alpha, "damp": recipe.damp}
    stats |= {**where, "options": options, "kept_dense": True}
    with atomic_path(
        weight_file := out_dir / pruned_layer_name(layer := where["layer"], "safetensors")
    ) as tmp:
        save_file({}, str(tmp), metadata={"kept_dense": "not pruned: the original weight is used"})
    stats[STAMP] = file_stamp(weight_file)
    write_json(out_dir / pruned_layer_name(layer, "json"), stats)
    return stats
