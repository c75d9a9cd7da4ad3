"""Linear-layer discovery: a block's prunable ``nn.Linear`` layers, in call order, grouped by the input
they share (one Hessian per group), found by one forward of the block on the meta device. Routers of
mixture-of-experts blocks stay dense (:data:`DENSE_LAYERS`, :func:`routers`).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import torch
from torch import nn

from thanos.models.experts import find_experts
from thanos.models.recording import tree_map
from thanos.models.skeleton import StructureError


class Discoverable(Protocol):
    """What discovery asks of an adapter (``thanos.models.generic.GenericAdapter``): a block of the model's
    own code, and the call that runs it."""

    model_type: str
    hidden_size: int
    dtype: torch.dtype

    def new_block(self, block: int) -> nn.Module: ...

    def block_call(self, block: int, hidden: torch.Tensor) -> tuple[tuple, dict]: ...


# linear layers never pruned: routers of mixture-of-experts blocks (they pick experts; a handful of
# parameters) -- Mixtral/Qwen-MoE `mlp.gate`, `router`, Qwen2-MoE `shared_expert_gate`
DENSE_LAYERS = (r"(^|\.)gate$", r"(^|\.)router(\.|$)", r"shared_expert_gate$")
DISCOVERY_TOKENS = 4  # tokens of the forward that discovers a block's linear layers


def routers(block: nn.Module) -> list[str]:
    """The routers of a block's mixture-of-experts modules, whatever their name: the ``nn.Linear`` layers
    beside an experts module (in the module that holds it) with one output per expert."""
    found = []
    for path, experts in find_experts(block).items():
        owner = path.rpartition(".")[0]
        for name, linear in block.get_submodule(owner).named_modules(prefix=owner):
            inside = name == path or name.startswith(f"{path}.")
            if isinstance(linear, nn.Linear) and not inside and linear.out_features == experts.num_experts:
                found.append(name)
    return found


class _Silent(nn.Module):
    """Stands in for a mixture-of-experts experts module while a block's linear layers are discovered."""

    def forward(self, hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.zeros_like(hidden)


def discover_groups(adapter: Discoverable, block: int) -> dict[str, tuple[str, ...]]:
    """The prunable linear layers of ``block`` grouped by the input they share, in call order.

    One forward of the block, on the meta device (shapes only, no memory), with a pre-hook on every
    ``nn.Linear``: layers handed the same tensor share a group, named after its first member. Layers
    matching :data:`DENSE_LAYERS` and mixture-of-experts routers (:func:`routers`) are left out (never
    pruned). Mixture-of-experts experts are not
    ``nn.Linear`` (``thanos.models.experts`` finds their matrices)."""
    module = adapter.new_block(block).to("meta")
    dense = set(routers(module))
    # experts route data-dependently (no forward on the meta device) and hold no nn.Linear: silenced
    for path in find_experts(module):
        owner, _, leaf = path.rpartition(".")
        module.get_submodule(owner)._modules[leaf] = _Silent()
    hidden = torch.zeros((1, DISCOVERY_TOKENS, adapter.hidden_size), dtype=adapter.dtype)
    args, kwargs = adapter.block_call(block, hidden)
    to_meta = lambda value: value.to("meta") if isinstance(value, torch.Tensor) else value  # noqa: E731
    args, kwargs = tree_map(to_meta, args), tree_map(to_meta, kwargs)
    calls: list[tuple[str, torch.Tensor]] = []
    handles = []
    for name, linear in module.named_modules():
        skip = name in dense or any(re.search(p, name) for p in DENSE_LAYERS)
        if isinstance(linear, nn.Linear) and not skip:
            handles.append(linear.register_forward_pre_hook(lambda m, a, n=name: calls.append((n, a[0]))))
    try:
        with torch.inference_mode():
            module(hidden.to("meta"), *args, **kwargs)
    except Exception as err:  # noqa: BLE001 - any failure means the same: the block cannot be traced
        raise StructureError(
            f"model_type {adapter.model_type!r}: a forward of block {block} on the meta device failed "
            f"({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        ) from err
    finally:
        for handle in handles:
            handle.remove()
    groups: dict[str, list[str]] = {}
    inputs: list[tuple[torch.Tensor, str]] = []
    for name, x in calls:
        if any(name in members for members in groups.values()):
            continue  # called again (e.g. shared across steps): one entry
        group = next((g for seen, g in inputs if seen is x), None)
        if group is None:
            group = name
            inputs.append((x, group))
            groups[group] = []
        groups[group].append(name)
    if not groups:
        conv1d = any(type(m).__name__ == "Conv1D" for m in module.modules())
        why = (
            "its projections are GPT-2-style Conv1D modules (transposed weights), not nn.Linear"
            if conv1d
            else "recurrent or state-space layers without linear projections cannot be pruned here"
        )
        raise StructureError(
            f"model_type {adapter.model_type!r}: block {block} calls no nn.Linear to prune: {why}"
        )
    return {group: tuple(members) for group, members in groups.items()}
