"""Compact output: a ``neurons:p`` or ``heads:p`` recipe's model written smaller, the removed MLP neurons or
attention heads gone.

The pruned output projection of every block (``thanos.stages.prune``) is zero in the columns its stats list
as ``removed_columns``, the same number in every block. The assemble stage drops those columns from it, the
matching rows (and bias entries) from its feeders (``thanos.models.neurons``) and writes ``config.json`` with
the kept width (``intermediate_size``, OPT's ``ffn_dim``): a standard checkpoint of the same architecture,
whose logits are those of the same recipe written with zeros in the original shape (a removed neuron only
ever reached the output through its zero column). Every other tensor and config value is unchanged.

A ``heads:p`` (``kv_heads:p``) recipe's pruned attention output projection is zero in the columns of the
removed heads, the same number in every block; those columns go, with the query rows of the heads (and the
key and value rows of removed groups) and any per-head tensor (``thanos.models.heads``); ``config.json``
states the new ``num_attention_heads``, ``num_key_value_heads`` and an explicit ``head_dim``.

``compaction(...)`` plans it (checks every block, reads no weight but the pruned output projections); the
plan maps tensor names to the index kept along one dimension.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from thanos.data.safetensors_io import open_safetensors
from thanos.files.layout import pruned_block_name, pruned_layer_name
from thanos.models.heads import attention_layout
from thanos.models.neurons import mlp_layout
from thanos.pruning.sparsity import HEAD_KINDS, WIDTH_MULTIPLE, Sparsity, width_multiple

if TYPE_CHECKING:
    from thanos.models import ModelHandle


@dataclass
class Compaction:
    """The plan: ``index`` maps a tensor name to (dimension, kept indices); ``rename`` (None: every tensor
    kept under its name) maps each kept tensor's name to the one it is written under, the tensors it leaves
    out are not written (``thanos.stages.depth.blocks``: removed blocks); ``settings`` are the config values
    that change; ``facts`` go to the report."""

    settings: dict[str, Any] = field(default_factory=dict)
    index: dict[str, tuple[int, torch.Tensor]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    rename: dict[str, str] | None = None

    def keeps(self, name: str) -> bool:
        return self.rename is None or name in self.rename

    def written_name(self, name: str) -> str:
        return name if self.rename is None else self.rename[name]

    def shape(self, name: str, shape: list[int]) -> list[int]:
        if name not in self.index:
            return shape
        dim, kept = self.index[name]
        return [int(kept.numel()) if d == dim else s for d, s in enumerate(shape)]

    def apply(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name not in self.index:
            return tensor
        dim, kept = self.index[name]
        return tensor.index_select(dim, kept).contiguous()

    def config(self, text: str) -> str:
        """``config.json`` with the changed ``settings`` (other keys and their order unchanged)."""
        config = json.loads(text) | self.settings
        return json.dumps(config, indent=2) + "\n"

    def parameters(self, checkpoint: Any, names: list[str]) -> dict[str, int]:
        """The model's parameters (its tensor ``names``) before and after."""
        original = kept = 0
        for name in names:
            shape = checkpoint.shape(name)
            original += math.prod(shape)
            kept += math.prod(self.shape(name, shape)) if self.keeps(name) else 0
        return {"original": original, "kept": kept}


def compaction(
    model: str | Path | ModelHandle,
    pruned_root: str | Path,
    names: list[str],
    model_info: dict[str, Any] | None = None,
    pattern: Sparsity | None = None,
) -> Compaction:
    """Plan the compaction of ``model`` (a directory, hub id or handle) pruned under ``pruned_root`` with
    ``pattern`` (neurons, heads or kv_heads; None: neurons) (``names``: the checkpoint's tensor names;
    ``model_info``: the content of its ``model_info.json``, whose layout names the layers); refused, naming
    the block, when a block's removed columns are not recorded, not zero, or not as many as block 0's."""
    from thanos.models import as_handle

    handle = as_handle(model, model_info)
    model_dir, model_layout, checkpoint = handle.path, handle.layout, handle.checkpoint
    root = Path(pruned_root)
    if pattern is not None and pattern.kind in HEAD_KINDS:
        attention = attention_layout(model_dir, model_layout, checkpoint)
        plan = _heads_plan(attention, model_layout, root, names)
    else:
        multiple = pattern.multiple if pattern is not None else WIDTH_MULTIPLE
        plan = _neurons_plan(mlp_layout(model_layout, checkpoint), model_layout, root, names, multiple)
    plan.facts["parameters"] = plan.parameters(checkpoint, names)
    return plan


def kept_columns(root: Path, block: int, layer: str, width: int, first: int | None) -> torch.Tensor:
    """The kept columns of ``layer`` in block ``block`` (of ``width``): its stats' ``removed_columns``,
    checked to be recorded, zero in the weight and as many as block 0's (``first``)."""
    stats_file = root / pruned_block_name(block) / pruned_layer_name(layer, "json")
    weight_file = stats_file.with_suffix(".safetensors")
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    removed = stats.get("removed_columns")
    if removed is None:
        raise ValueError(
            f"{stats_file}: no removed_columns (not pruned by a neurons:p or heads:p recipe of this "
            f"version); delete {root} and rerun"
        )
    if first is not None and len(removed) != first:
        raise ValueError(
            f"{stats_file}: {len(removed)} columns removed in block {block}, {first} in block 0: one shape "
            "cannot hold every block"
        )
    removed_index = torch.tensor(removed, dtype=torch.long)
    with open_safetensors(weight_file) as handle:
        weight = handle.get_tensor("weight")
    if removed and bool(weight.index_select(1, removed_index).any()):
        raise ValueError(f"{weight_file}: its removed columns are not zero; delete {root} and rerun")
    keep = torch.ones(width, dtype=torch.bool)
    keep[removed_index] = False
    return torch.nonzero(keep).squeeze(1)


def _neurons_plan(layout: Any, model_layout: Any, root: Path, names: list[str], multiple: int) -> Compaction:
    width = layout.width
    plan, first = Compaction(), None
    kept = torch.arange(width)
    for block in range(model_layout.num_blocks):
        prefix = model_layout.block_prefix(block)
        kept = kept_columns(root, block, layout.output, width, first)
        first = width - int(kept.numel())
        plan.index[f"{prefix}{layout.output}.weight"] = (1, kept)
        for feeder in layout.feeders:
            rows = torch.cat([kept, kept + width]) if feeder in layout.fused else kept
            for suffix in ("weight", "bias"):
                if f"{prefix}{feeder}.{suffix}" in names:
                    plan.index[f"{prefix}{feeder}.{suffix}"] = (0, rows)
    kept_width = int(kept.numel())
    plan.settings = {layout.width_key: kept_width}
    plan.facts = {
        "structure": "neurons",
        "model_type": layout.model_type,
        "width_key": layout.width_key,
        "original_width": width,
        "kept_width": kept_width,
        "removed_per_block": width - kept_width,
        "multiple": width_multiple(multiple, width),  # the kept width's (``neuron_count``)
        "output_projection": layout.output,
        "feeders": list(layout.feeders),
    }
    return plan


def _heads_plan(attention: Any, model_layout: Any, root: Path, names: list[str]) -> Compaction:
    d, g = attention.head_dim, attention.heads // attention.kv_heads
    width = attention.heads * d
    plan, first = Compaction(), None
    kept_heads = torch.arange(attention.heads)
    kept_groups = torch.arange(attention.kv_heads)
    for block in range(model_layout.num_blocks):
        prefix = model_layout.block_prefix(block)
        kept = kept_columns(root, block, attention.output, width, first)
        first = width - int(kept.numel())
        kept_heads = kept[::d] // d
        if kept.numel() % d or not torch.equal(
            kept, (kept_heads.unsqueeze(1) * d + torch.arange(d)).reshape(-1)
        ):
            raise ValueError(
                f"{root / pruned_block_name(block)}: the removed columns of {attention.output} are not whole "
                f"heads of {d}; delete {root} and rerun"
            )
        groups = torch.unique(kept_heads // g)
        removed_groups = attention.kv_heads - int(groups.numel())
        if removed_groups and not torch.equal(
            kept_heads, (groups.unsqueeze(1) * g + torch.arange(g)).reshape(-1)
        ):
            raise ValueError(f"{root / pruned_block_name(block)}: the removed heads are not whole groups")
        if not removed_groups and int(kept_heads.numel()) % attention.kv_heads:
            raise ValueError(f"{root / pruned_block_name(block)}: the groups keep different numbers of heads")
        kept_groups = groups
        kv_rows = (groups.unsqueeze(1) * d + torch.arange(d)).reshape(-1)
        plan.index[f"{prefix}{attention.output}.weight"] = (1, kept)
        for layer, rows in (
            (attention.query, kept),
            *((layer, kv_rows) for layer in (attention.key, attention.value) if removed_groups),
        ):
            for suffix in ("weight", "bias"):
                if f"{prefix}{layer}.{suffix}" in names:
                    plan.index[f"{prefix}{layer}.{suffix}"] = (0, rows)
        for name in attention.per_head:
            plan.index[f"{prefix}{name}"] = (0, kept_heads)
    heads, kv_heads = int(kept_heads.numel()), int(kept_groups.numel())
    plan.settings = attention.config({}, heads, kv_heads)
    plan.facts = {
        "structure": "heads",
        "model_type": attention.model_type,
        "original_heads": attention.heads,
        "kept_heads": heads,
        "original_kv_heads": attention.kv_heads,
        "kept_kv_heads": kv_heads,
        "head_dim": d,
        "kept_width": heads * d,  # the columns of the attention's output projection
        "removed_per_block": attention.heads - heads,
        "output_projection": attention.output,
        "projections": [attention.query, attention.key, attention.value],
    }
    return plan
