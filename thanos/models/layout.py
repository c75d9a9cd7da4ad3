"""A model's layout: what the stages that read tensors by name need to know, without building a module.

The checkpoint prefix of every block, its prunable layers in pruning order and their groups (layers that
share one input, hence one Hessian), the kind of every block (blocks of one kind have the same layers),
the model's width, dtype and longest sequence, and the config's MLP width (``thanos.models.neurons``).

The generic adapter finds it by tracing the model's own transformers code (``GenericAdapter.layout``:
seconds, for the modeling code's import and the model's skeleton). ``thanos model-info`` writes it into
the workflow's ``model_info.json`` (``to_info``); the prune, owl and compact jobs read it back from there
(``from_info``, ``thanos.models.open_layout``) in milliseconds, without importing transformers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

T = TypeVar("T")

Groups = dict[str, tuple[str, ...]]  # group (named after its first layer) -> its layers, in pruning order


@dataclass(frozen=True)
class ModelLayout:
    """Names and sizes of one model. ``kinds``: the groups of each kind of block; ``block_kind``: the kind
    of every block; ``mlp_config``: the config's MLP width under each name it gives it (``intermediate_size``,
    OPT's ``ffn_dim``)."""

    model_type: str
    block_template: str  # checkpoint name prefix of block i, with {i}: e.g. model.layers.{i}.
    kinds: tuple[Groups, ...]
    block_kind: tuple[int, ...]
    hidden_size: int
    dtype: str
    max_positions: int
    mlp_config: dict[str, Any]
    # experts the checkpoint stores fused (``thanos.models.experts``): (the layers' name before ``.{e}``,
    # the 3-D tensor's name in the block, whether it holds (in, out) matrices)
    fused: tuple[tuple[str, str, bool], ...] = ()

    @property
    def num_blocks(self) -> int:
        return len(self.block_kind)

    @cached_property
    def groups(self) -> Groups:
        """Every kind's groups (a group has the same layers in every kind it is in)."""
        merged: Groups = {}
        for kind in self.kinds:
            merged |= {group: members for group, members in kind.items() if group not in merged}
        return merged

    @property
    def layers(self) -> list[str]:
        """Prunable linear layers of a block, relative to the block, in pruning order (of every kind of
        block, when the blocks differ: ``block_layers``)."""
        return _layers(self.groups)

    def same_in_every_block(
        self, find: Callable[[int], T], what: str, refuse: Callable[[str], Exception]
    ) -> T:
        """``find(block)``, which must be the same for every block (block 0's); otherwise, or without blocks,
        ``refuse(why)`` is raised (``what``: the part compared, named in ``why``)."""
        found = None
        for block in range(self.num_blocks):
            current = find(block)
            if found is not None and current != found:
                raise refuse(f"block {block}'s {what} differs from block 0's")
            found = current
        if found is None:
            raise refuse("it has no blocks")
        return found

    def check_block(self, block: int) -> None:
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"block {block} out of range: the model has blocks 0..{self.num_blocks - 1}")

    def block_prefix(self, block: int) -> str:
        self.check_block(block)
        return self.block_template.format(i=block)

    def block_groups(self, block: int) -> Groups:
        self.check_block(block)
        return self.kinds[self.block_kind[block]]

    def block_layers(self, block: int) -> list[str]:
        """The prunable layers of block ``block``, in pruning order."""
        return _layers(self.block_groups(block))

    def block_kinds(self) -> list[int] | None:
        """The kind of every block, or None when all are alike."""
        return list(self.block_kind) if len(self.kinds) > 1 else None

    def group_of(self, layer: str, block: int | None = None) -> str:
        groups = self.groups if block is None else self.block_groups(block)
        for group, members in groups.items():
            if layer in members:
                return group
        where = "" if block is None else f" block {block} of"
        known = ", ".join(layer for members in groups.values() for layer in members)
        raise ValueError(f"unknown layer {layer!r} for{where} {self.model_type}; layers are {known}")

    def expert_views(self) -> dict[str, tuple[str, int, bool]]:
        """The layers that are one expert's slice of a fused checkpoint tensor: their weight's full name
        (``model.layers.0.mlp.experts.gate_up_proj.3.weight``) -> (the fused tensor's full name, the
        expert, transposed), for ``Checkpoint.add_views``."""
        if not self.fused:
            return {}
        fused = {base: (tensor, transposed) for base, tensor, transposed in self.fused}
        views = {}
        for block in range(self.num_blocks):
            prefix = self.block_prefix(block)
            for layer in self.block_layers(block):
                base, _, expert = layer.rpartition(".")
                if base in fused:
                    tensor, transposed = fused[base]
                    views[f"{prefix}{layer}.weight"] = (f"{prefix}{tensor}", int(expert), transposed)
        return views

    def to_info(self) -> dict[str, Any]:
        """The layout's part of ``model_info.json`` (docs/cli.md)."""
        info = {
            "model_type": self.model_type,
            "num_blocks": self.num_blocks,
            "layers": self.layers,
            "groups": {group: list(members) for group, members in self.groups.items()},
            "hidden_size": self.hidden_size,
            "dtype": self.dtype,
            "max_position_embeddings": self.max_positions,
            "block_prefix": self.block_template,
            "mlp_config": self.mlp_config,
        }
        if self.fused:
            info["fused_experts"] = [
                {"layers": base, "tensor": tensor, "transposed": transposed}
                for base, tensor, transposed in self.fused
            ]
        if len(self.kinds) > 1:  # blocks that differ: each kind's layers (thanos.files.pruned_layers)
            info["block_kinds"] = [_layers(kind) for kind in self.kinds]
            info["block_kind"] = list(self.block_kind)
        return info

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> ModelLayout | None:
        """The layout ``to_info`` wrote; None for a ``model_info.json`` of an earlier version that lacks
        some of it."""
        if "mlp_config" not in info:
            return None
        groups = {group: tuple(members) for group, members in info["groups"].items()}
        kinds = [info["layers"]] if "block_kind" not in info else info["block_kinds"]
        return cls(
            model_type=info["model_type"],
            block_template=info["block_prefix"],
            kinds=tuple(_kind_groups(layers, groups) for layers in kinds),
            block_kind=tuple(info.get("block_kind", [0] * info["num_blocks"])),
            hidden_size=info["hidden_size"],
            dtype=info["dtype"],
            max_positions=info["max_position_embeddings"],
            mlp_config=dict(info["mlp_config"]),
            fused=tuple(
                (entry["layers"], entry["tensor"], bool(entry["transposed"]))
                for entry in info.get("fused_experts", [])
            ),
        )


def _layers(groups: Groups) -> list[str]:
    return [layer for members in groups.values() for layer in members]


def _kind_groups(layers: list[str], groups: Groups) -> Groups:
    """The groups of a kind of block whose layers are ``layers`` (in pruning order, group after group)."""
    group_of = {layer: group for group, members in groups.items() for layer in members}
    kind: Groups = {}
    for layer in layers:
        kind.setdefault(group_of[layer], groups[group_of[layer]])
    return kind
