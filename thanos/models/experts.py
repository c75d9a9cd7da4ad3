"""Mixture-of-experts blocks, from transformers' own experts interface and weight conversions.

In transformers 5 the experts of a mixture-of-experts block (Mixtral, Qwen3-MoE, DeepSeek-V3, ...) are one
module holding fused 3-D parameters -- ``gate_up_proj`` (E, 2I, H) (``up_proj`` without a gate),
``down_proj`` (E, H, I), optional ``*_bias`` -- with the flags ``has_gate``, ``has_bias``,
``is_transposed`` that ``transformers.integrations.moe.use_experts_implementation`` gives it. Checkpoints
keep one 2-D matrix per expert (``experts.{e}.w1.weight``, ``experts.{e}.gate_proj.weight``, ...), which
transformers fuses when it loads them and splits again when it saves.

The pipeline prunes what the checkpoint stores: every per-expert matrix is a layer of its own, named as
on disk, and the matrices that read the same tokens share one Hessian group:

- ``experts.{e}`` input projections (gate and up): the block's hidden states of the tokens the router sent
  to expert e;
- ``experts.{e}`` down projection: that expert's gated intermediate activations of the same tokens.

Nothing here names a model type: the disk names come from transformers' reverse conversion of the
block's own parameters, the block is loaded through its forward conversion, and the expert computation
follows transformers' experts interface (``_apply_gate``, ``act_fn``, ``is_transposed``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# the output projection of an experts module (transformers' experts interface) reads the expert's gated
# intermediate activations; its input projection (gate_up_proj, or up_proj without a gate) the routed tokens
OUTPUT_PROJECTION = "down_proj"
# an expert whose routed tokens are fewer than this fraction of its fair share (tokens * top-k / experts)
# is pruned with the Hessian of every calibration token through it instead (pruning_report.json says so)
MIN_SHARE = 0.1


def is_experts(module: nn.Module) -> bool:
    """Whether ``module`` is a transformers experts module (fused 3-D expert weights)."""
    return hasattr(module, "has_gate") and hasattr(module, "is_transposed") and hasattr(module, "num_experts")


def find_experts(block: nn.Module) -> dict[str, nn.Module]:
    """The experts modules of a block, by path."""
    return {name: m for name, m in block.named_modules() if is_experts(m)}


@dataclass(frozen=True)
class ExpertLayer:
    """One expert's matrix as the checkpoint stores it: a 2-D tensor of its own, or (``fused``) slice
    ``expert`` of a 3-D tensor holding every expert, stored (in, out) when ``transposed``."""

    experts: str  # path of the experts module in the block (``mlp.experts``)
    param: str  # its fused parameter (``gate_up_proj``, ``down_proj``)
    expert: int
    fused: str | None = None  # the checkpoint's 3-D tensor (name in the block) when it stores them fused
    transposed: bool = False  # the fused tensor holds (in, out) matrices (gpt-oss), not (out, in)

    @property
    def role(self) -> str:
        return "output" if self.param == OUTPUT_PROJECTION else "input"


class Conversion:
    """transformers' conversion between the checkpoint's tensor names and layout and the modules' (fused
    experts, renamed submodules), for the tensors of one block at a time."""

    def __init__(self, model: nn.Module, modules: Iterable[str]) -> None:
        """``modules``: every tensor name of the model's modules (its ``state_dict`` keys)."""
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming

        self.model = model
        mapping = get_model_conversion_mapping(model)
        self.renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
        self.converters = [m for m in mapping if isinstance(m, WeightConverter)]
        self.prefix = getattr(model, "base_model_prefix", None)
        self.modules = dict.fromkeys(modules)

    def target(self, key: str) -> tuple[str, str | None]:
        """The module tensor a checkpoint tensor ``key`` (full name) loads into, and the source pattern of
        the converter that builds it from several (None when it is only renamed, or kept)."""
        from transformers.core_model_loading import rename_source_key

        target, pattern = rename_source_key(key, self.renamings, self.converters, self.prefix, self.modules)
        if target not in self.modules and key in self.modules:
            return key, None
        return target, pattern

    def to_disk(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Module tensors (full names) -> the checkpoint's tensors, as ``save_pretrained`` writes them."""
        from transformers.core_model_loading import revert_weight_conversion

        return revert_weight_conversion(self.model, state)

    def disk_name(self, name: str) -> str:
        """The checkpoint name of the 2-D module tensor ``name`` (full name)."""
        out = self.to_disk({name: torch.empty((1, 1), device="meta")})
        return next(iter(out)) if len(out) == 1 else name

    def to_modules(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Checkpoint tensors (full names) -> the modules' tensors, as ``from_pretrained`` loads them."""
        from transformers.core_model_loading import dot_natural_key

        by_pattern = {p: c for c in self.converters for p in c.source_patterns}
        out: dict[str, torch.Tensor] = {}
        pending: dict[str, Any] = {}
        for key in sorted(state, key=dot_natural_key):  # experts in index order, as transformers stacks them
            target, pattern = self.target(key)
            if pattern is None:
                out[target] = state[key]
                continue
            converter = pending.setdefault(target, copy.deepcopy(by_pattern[pattern]))
            converter.add_tensor(target, key, pattern, state[key])
        for target, converter in pending.items():
            for name, tensor in converter.convert(target, model=self.model, config=self.model.config).items():
                out[name] = tensor[0] if isinstance(tensor, list) else tensor
        return out


def expert_layers(conversion: Conversion, block: nn.Module, prefix: str) -> dict[str, ExpertLayer]:
    """The checkpoint's per-expert matrices of a block: layer name (the relative disk name without
    ``.weight``) -> which expert of which fused parameter.

    Found by transformers' reverse conversion of the block's own parameters: each fused parameter
    is given the expert index as its value (a broadcast view: no memory), so every per-expert tensor it
    splits into says which expert it is. A checkpoint that stores the experts fused, as gpt-oss
    (``mlp.experts.gate_up_proj``, (E, H, 2I)) and GraniteMoE (``block_sparse_moe.input_linear.weight``,
    (E, 2I, H)) do, gives one layer per expert named ``{tensor}.{e}`` (``mlp.experts.gate_up_proj.3``): a
    view of slice e of the checkpoint's tensor (``thanos.models.checkpoint.Checkpoint.add_views``), pruned
    as one matrix like the others and written back into the fused tensor."""
    layers: dict[str, ExpertLayer] = {}
    for path, experts in find_experts(block).items():
        for param, value in experts.named_parameters(recurse=False):
            if value.ndim != 3:
                continue
            marker = torch.arange(value.shape[0], dtype=torch.int32).view(-1, 1, 1).expand(value.shape)
            for name, tensor in conversion.to_disk({f"{prefix}{path}.{param}": marker}).items():
                relative = name.removeprefix(prefix)
                if tensor.ndim == 3 and tuple(tensor.shape) == tuple(value.shape):  # stored fused, renamed
                    base = relative.removesuffix(".weight")
                    for expert in range(tensor.shape[0]):
                        if int(tensor[expert, 0, 0]) != expert or int(tensor[expert, -1, -1]) != expert:
                            raise ValueError(f"{relative} does not hold expert {expert} at index {expert}")
                        layers[f"{base}.{expert}"] = ExpertLayer(
                            path, param, expert, relative, bool(experts.is_transposed)
                        )
                    continue
                if tensor.ndim != 2 or not relative.endswith(".weight"):
                    raise ValueError(
                        f"{prefix}{path}.{param} is stored as {relative} of shape "
                        f"{tuple(tensor.shape)}: neither one matrix per expert nor every expert in one "
                        "tensor of the module's shape; this layout of experts cannot be pruned"
                    )
                expert = int(tensor[0, 0])
                rows, columns = tensor.shape  # corners and centre: cheap at any size (no full comparison)
                probes = (tensor[-1, -1], tensor[rows // 2, columns // 2], tensor[0, -1], tensor[-1, 0])
                if any(int(value) != expert for value in probes):
                    raise ValueError(f"{relative} mixes several experts of {prefix}{path}.{param}")
                layers[relative.removesuffix(".weight")] = ExpertLayer(path, param, expert)
    return layers


def expert_groups(layers: dict[str, ExpertLayer]) -> dict[str, tuple[str, ...]]:
    """Per expert, the input projections (one group) and the output projection (another), in expert
    order; a group is named after its first matrix."""
    keyed: dict[tuple[str, int, str], list[str]] = {}
    for name, layer in layers.items():
        keyed.setdefault((layer.experts, layer.expert, layer.role), []).append(name)
    order = sorted(keyed, key=lambda k: (k[0], k[1], k[2] == "output"))
    return {keyed[k][0]: tuple(keyed[k]) for k in order}


def _linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, transposed: bool
) -> torch.Tensor:
    out = x @ weight if transposed else nn.functional.linear(x, weight)
    return out if bias is None else out + bias


def expert_intermediate(experts: nn.Module, expert: int, x: torch.Tensor) -> torch.Tensor:
    """Expert ``expert``'s gated intermediate activations for hidden states ``x`` (tokens, H): what its
    down projection receives (transformers' experts interface: up projection, ``_apply_gate`` or
    ``act_fn``)."""
    name = "gate_up_proj" if experts.has_gate else "up_proj"
    bias = getattr(experts, f"{name}_bias", None) if experts.has_bias else None
    weight = getattr(experts, name)[expert].to(x.dtype)
    out = _linear(x, weight, None if bias is None else bias[expert].to(x.dtype), experts.is_transposed)
    return experts._apply_gate(out) if experts.has_gate else experts.act_fn(out)


def routed_tokens(top_k_index: torch.Tensor, expert: int) -> torch.Tensor:
    """Indices of the tokens the router sent to ``expert``."""
    return (top_k_index == expert).any(dim=-1).nonzero().squeeze(-1)


def watch_experts(
    block: nn.Module,
    layers: dict[str, ExpertLayer],
    groups: list[str],
    add: Callable[[str, torch.Tensor], None],
    every_token: bool = False,
) -> list[Any]:
    """Hooks that hand ``add(group, X)`` the inputs of the expert groups ``groups`` of ``block``: the
    hidden states of the tokens the router sent to the expert (the experts module's own ``top_k_index``
    argument) and, for its output projection, the expert's intermediate activations of those tokens.
    ``every_token``: every token of the batch instead of the routed ones."""
    by_module: dict[str, list[tuple[str, ExpertLayer]]] = {}
    for group in groups:
        by_module.setdefault(layers[group].experts, []).append((group, layers[group]))
    handles = []
    for path, entries in by_module.items():

        def hook(module: nn.Module, args: tuple, kwargs: dict, entries: list = entries) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]
            top_k_index = args[1] if len(args) > 1 else kwargs["top_k_index"]
            hidden = hidden.reshape(-1, hidden.shape[-1])
            for group, layer in entries:
                x = hidden if every_token else hidden[routed_tokens(top_k_index, layer.expert)]
                if layer.role == "output":
                    x = expert_intermediate(module, layer.expert, x)
                add(group, x)

        handles.append(block.get_submodule(path).register_forward_pre_hook(hook, with_kwargs=True))
    return handles
