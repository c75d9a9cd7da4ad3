"""The model adapter interface: everything the pipeline needs to know about one architecture family.

The stages that run the model talk to a ``ModelAdapter``: it knows the model's layout (module names, where
the blocks live in the checkpoint, ``thanos.models.layout``) and how to run one decoder block on its own.
Stages that only read tensors by name take the layout alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from thanos.models.checkpoint import Checkpoint
from thanos.models.layout import ModelLayout

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def config_dtype(config: PretrainedConfig) -> torch.dtype:
    """The model's dtype from its config (``dtype`` / ``torch_dtype``), float32 if unset."""
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def max_positions(config: Any) -> int | None:
    """The model's maximum sequence length, under whichever name its config gives it (None: not stated)."""
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def module_from_state(factory: Any, state: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> nn.Module:
    """Build ``factory(*args, **kwargs)`` on the meta device and give it exactly ``state`` (strict)."""
    with torch.device("meta"):
        module = factory(*args, **kwargs)
    module.load_state_dict(state, strict=True, assign=True)
    for name, buf in module.named_buffers():
        if buf.is_meta:
            raise ValueError(f"{type(module).__name__}: buffer {name} has no value after loading")
    return module.eval()


def block_output(out: Any) -> torch.Tensor:
    """A decoder layer's hidden states: transformers 5 returns a tensor, 4.x a tuple."""
    return out[0] if isinstance(out, tuple) else out


class ModelAdapter(ABC):
    """One model (its ``config``): its layout (names, ``thanos.models.layout``) and the modules it is run
    with, one block at a time. The layout's names are the adapter's too (``adapter.block_prefix(i)``)."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.config = config
        if getattr(config, "_attn_implementation", None) is None:
            config._attn_implementation = "sdpa"

    # ---- description -------------------------------------------------------------------------------
    @property
    @abstractmethod
    def layout(self) -> ModelLayout:
        """The model's names: blocks, their prunable layers and groups (what ``model_info.json`` holds)."""

    @property
    def model_type(self) -> str:
        return self.config.model_type

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def dtype(self) -> torch.dtype:
        return config_dtype(self.config)

    @property
    def max_positions(self) -> int:
        """The longest sequence the model takes (no limit stated: 2**20)."""
        return max_positions(self.config) or 1 << 20

    @property
    def num_blocks(self) -> int:
        return self.layout.num_blocks

    @property
    def block_template(self) -> str:
        return self.layout.block_template

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        return self.layout.groups

    @property
    def layers(self) -> list[str]:
        return self.layout.layers

    def check_block(self, block: int) -> None:
        self.layout.check_block(block)

    def block_prefix(self, block: int) -> str:
        return self.layout.block_prefix(block)

    def block_groups(self, block: int) -> dict[str, tuple[str, ...]]:
        return self.layout.block_groups(block)

    def block_layers(self, block: int) -> list[str]:
        return self.layout.block_layers(block)

    def block_kinds(self) -> list[int] | None:
        return self.layout.block_kinds()

    def group_of(self, layer: str, block: int | None = None) -> str:
        return self.layout.group_of(layer, block)

    def check_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Refuse a checkpoint that lacks a prunable layer's weight (``{block prefix}{layer}.weight``),
        naming it: the model stores its layers under other names or fused."""
        for block in range(self.num_blocks):
            for layer in self.block_layers(block):
                name = f"{self.block_prefix(block)}{layer}.weight"
                if name not in checkpoint:
                    fused = (
                        "; its mixture-of-experts experts are stored fused under the modules' names "
                        "(save_pretrained(..., save_original_format=False) writes them so), not in the "
                        "layout of this model type's checkpoints: save the model with transformers' "
                        "default save_pretrained"
                        if self.experts
                        else ""
                    )
                    raise ValueError(
                        f"{checkpoint.model_dir}: no tensor {name} in the checkpoint (model_type "
                        f"{self.model_type!r}){fused}"
                    )

    # ---- building modules from the checkpoint ------------------------------------------------------
    @abstractmethod
    def new_block(self, block: int) -> nn.Module:
        """An empty decoder layer (called under the meta device)."""

    def load_block(
        self, checkpoint: Checkpoint, block: int, overrides: dict[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """Decoder block ``block`` with its weights (only its own tensors are read).

        ``overrides`` maps layer names (``self_attn.q_proj``) to replacement weights (pruned ones).
        """
        return module_from_state(self.new_block, self.block_state(checkpoint, block, overrides), block)

    def block_state(
        self, checkpoint: Checkpoint, block: int, overrides: dict[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """Block ``block``'s checkpoint tensors by name within the block, ``overrides`` (layer -> weight,
        shape checked) in place of their layers' weights."""
        prefix = self.block_prefix(block)
        state = checkpoint.prefixed(prefix)
        copied: set[str] = set()  # fused tensors copied before an expert's slice is replaced in them
        for layer, weight in (overrides or {}).items():
            key = f"{layer}.weight"
            if prefix + key in checkpoint.views:  # one expert of a fused tensor: written into its slice
                source, expert, transposed = checkpoint.views[prefix + key]
                source = source.removeprefix(prefix)
                if source not in copied:
                    state[source] = state[source].clone()
                    copied.add(source)
                target = state[source][expert]
                expected = tuple(target.T.shape if transposed else target.shape)
                if tuple(weight.shape) != expected:
                    raise ValueError(
                        f"block {block} layer {layer}: replacement weight has shape {tuple(weight.shape)}, "
                        f"the model's is {expected}"
                    )
                target.copy_((weight.T if transposed else weight).to(target.dtype))
                continue
            if key not in state:
                raise ValueError(f"block {block} has no layer {layer!r}")
            if tuple(weight.shape) != tuple(state[key].shape):
                raise ValueError(
                    f"block {block} layer {layer}: replacement weight has shape {tuple(weight.shape)}, "
                    f"the model's is {tuple(state[key].shape)}"
                )
            state[key] = weight.to(state[key].dtype)
        return state

    @abstractmethod
    def load_embedding(self, checkpoint: Checkpoint) -> nn.Module:
        """Module mapping token ids (batch, seq) to block 0's inputs (batch, seq, hidden)."""

    @abstractmethod
    def load_head(self, checkpoint: Checkpoint) -> nn.Module:
        """Module mapping the last block's outputs to (final hidden states, logits)."""

    # ---- running one block alone --------------------------------------------------------------------
    @abstractmethod
    def block_kwargs(self, block: int, hidden: torch.Tensor) -> dict[str, Any]:
        """Keyword arguments a decoder layer needs besides the hidden states (mask, positions, RoPE)."""

    def run_block(self, module: nn.Module, block: int, hidden: torch.Tensor) -> torch.Tensor:
        """Block ``block``'s outputs for inputs ``hidden`` (batch, seq, hidden), no KV cache."""
        with torch.inference_mode():
            return block_output(module(hidden, **self.block_kwargs(block, hidden)))

    def train_block(self, module: nn.Module, block: int, hidden: torch.Tensor) -> torch.Tensor:
        """Block ``block``'s outputs for ``hidden`` with autograd (recovery trains the block's weights)."""
        return block_output(module(hidden, **self.block_kwargs(block, hidden)))

    def trained_parameters(self, module: nn.Module, layers: list[str]) -> dict[str, nn.Parameter]:
        """The parameters of a loaded block that hold ``layers``' weights, by name (recovery trains them)."""
        return {f"{layer}.weight": module.get_submodule(layer).weight for layer in layers}

    def layer_weights(self, module: nn.Module, block: int, layers: list[str]) -> dict[str, torch.Tensor]:
        """``layers``' weights as the checkpoint stores them, read from a loaded block ``block``."""
        return {layer: module.get_submodule(layer).weight.detach() for layer in layers}

    @property
    def experts(self) -> dict[str, Any]:
        """Layers that are one expert's matrix of a mixture-of-experts block (``thanos.models.experts``):
        layer -> ``ExpertLayer``; none for dense models."""
        return {}

    def watch_inputs(
        self,
        module: nn.Module,
        block: int,
        add: Callable[[str, torch.Tensor], None],
        only: set[str] | None = None,
        every_token: bool = False,
    ) -> list[Any]:
        """Hooks on block ``block``'s ``module`` that hand ``add(group, X)`` the inputs of every group
        (those in ``only``) during its forwards; remove them when done. ``every_token`` concerns expert
        groups: every token instead of those the router sent to the expert."""
        handles = []
        for group, members in self.block_groups(block).items():
            if only is None or group in only:
                linear = self.linear(module, members[0])  # the members share this input
                handles.append(linear.register_forward_pre_hook(lambda m, a, g=group: add(g, a[0])))
        return handles

    def linear(self, module: nn.Module, layer: str) -> nn.Linear:
        """The ``nn.Linear`` named ``layer`` inside a block module."""
        found = module.get_submodule(layer)
        if not isinstance(found, nn.Linear):
            raise ValueError(f"{layer} is not a linear layer of the block")
        return found
