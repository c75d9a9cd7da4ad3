"""Compact output: a ``neurons:p`` recipe's model written smaller, the removed MLP neurons gone.

The pruned output projection of every block (``thanos.stages.prune``) is zero in the columns its stats list
as ``removed_columns``, the same number in every block. The assemble stage drops those columns from it, the
matching rows (and bias entries) from its feeders (``thanos.models.neurons``) and writes ``config.json`` with
the kept width (``intermediate_size``, OPT's ``ffn_dim``): a standard checkpoint of the same architecture,
whose logits are those of the same recipe written with zeros in the original shape (a removed neuron only
ever reached the output through its zero column). Every other tensor and config value is unchanged.

``compaction(...)`` plans it (checks every block, reads no weight but the pruned output projections); the
plan maps tensor names to the index kept along one dimension.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from thanos.data.safetensors_io import open_safetensors
from thanos.files.layout import pruned_block_name, pruned_layer_name
from thanos.models.neurons import MLPLayout, mlp_layout
from thanos.pruning.sparsity import NEURON_MULTIPLE


@dataclass
class Compaction:
    """The plan: ``index`` maps a tensor name to (dimension, kept indices); ``facts`` go to the report."""

    layout: MLPLayout
    kept_width: int
    index: dict[str, tuple[int, torch.Tensor]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

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
        """``config.json`` with the kept width (other keys and their order unchanged)."""
        config = json.loads(text)
        config[self.layout.width_key] = self.kept_width
        return json.dumps(config, indent=2) + "\n"


def compaction(
    model_dir: str | Path, pruned_root: str | Path, names: list[str], model_info: dict[str, Any] | None = None
) -> Compaction:
    """Plan the compaction of the model at ``model_dir`` pruned under ``pruned_root`` (``names``: the
    checkpoint's tensor names; ``model_info``: the content of its ``model_info.json``, whose layout names the
    layers); refused, naming the block, when a block's removed columns are not recorded, not zero, or not as
    many as block 0's."""
    from thanos.models import open_layout

    _, model_layout, checkpoint = open_layout(model_dir, model_info)
    layout = mlp_layout(model_layout, checkpoint)
    root = Path(pruned_root)
    width, removed_count = layout.width, None
    plan = Compaction(layout, kept_width=width)
    removed_parameters = 0
    for block in range(model_layout.num_blocks):
        prefix = model_layout.block_prefix(block)
        stats_file = root / pruned_block_name(block) / pruned_layer_name(layout.output, "json")
        weight_file = stats_file.with_suffix(".safetensors")
        stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        removed = stats.get("removed_columns")
        if removed is None:
            raise ValueError(
                f"{stats_file}: no removed_columns (not pruned by a neurons:p recipe of this version); "
                f"delete {root} and rerun"
            )
        if removed_count is not None and len(removed) != removed_count:
            raise ValueError(
                f"{stats_file}: {len(removed)} neurons removed in block {block}, {removed_count} in block 0: "
                "one width cannot hold every block"
            )
        removed_count = len(removed)
        removed_index = torch.tensor(removed, dtype=torch.long)
        with open_safetensors(weight_file) as handle:
            weight = handle.get_tensor("weight")
        if removed and bool(weight.index_select(1, removed_index).any()):
            raise ValueError(f"{weight_file}: its removed columns are not zero; delete {root} and rerun")
        keep = torch.ones(width, dtype=torch.bool)
        keep[removed_index] = False
        kept = torch.nonzero(keep).squeeze(1)
        plan.index[f"{prefix}{layout.output}.weight"] = (1, kept)
        for feeder in layout.feeders:
            rows = torch.cat([kept, kept + width]) if feeder in layout.fused else kept
            for suffix in ("weight", "bias"):
                if f"{prefix}{feeder}.{suffix}" in names:
                    plan.index[f"{prefix}{feeder}.{suffix}"] = (0, rows)
        plan.kept_width = int(kept.numel())
    for name in plan.index:
        shape = checkpoint.shape(name)
        removed_parameters += math.prod(shape) - math.prod(plan.shape(name, shape))
    parameters = sum(math.prod(checkpoint.shape(name)) for name in names)
    plan.facts = {
        "model_type": layout.model_type,
        "width_key": layout.width_key,
        "original_width": width,
        "kept_width": plan.kept_width,
        "removed_per_block": width - plan.kept_width,
        "multiple": NEURON_MULTIPLE,
        "output_projection": layout.output,
        "feeders": list(layout.feeders),
        "parameters": {"original": parameters, "kept": parameters - removed_parameters},
    }
    return plan
