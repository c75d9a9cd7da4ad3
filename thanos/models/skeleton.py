"""The model's skeleton: its own ``*ForCausalLM`` built from its config with every parameter on the meta
device (no memory; buffers such as rotary frequencies computed as usual), its decoder layers (the outermost
``nn.ModuleList`` of ``num_hidden_layers`` modules of one class), and tensors set by name, tied ones kept
tied. ``StructureError``: a model that cannot be run block by block, named with why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# mixture-of-experts experts run transformers' reference loop over the experts (exact, any device and dtype,
# also on the meta device where grouped_mm needs bf16)
EXPERTS = {"experts_implementation": "eager"}


class StructureError(ValueError):
    """The model cannot be run block by block: names the model type and why; adds what is supported."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}; supported: decoder-only causal LMs of the installed transformers made of repeated "
            "layers with nn.Linear projections (the tested types: the README's table of supported models)"
        )


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device and their buffers as usual (rotary
    frequencies, masks): a model of any size costs nothing, and its buffers are right."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:  # one on meta already is kept: ties stay ties
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def build_skeleton(config: PretrainedConfig) -> nn.Module:
    """The model's own ``*ForCausalLM`` with its parameters on the meta device."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    if getattr(config, "is_encoder_decoder", False):
        raise StructureError(
            f"model_type {config.model_type!r} is an encoder-decoder model: only decoder-only causal LMs "
            "are pruned block by block"
        )
    try:
        with params_on_meta(), no_init_weights():  # the weights come from the checkpoint
            try:
                model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **EXPERTS)
            except ValueError as err:
                if "sdpa" not in str(err).lower() and "attention" not in str(err).lower():
                    raise
                model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", **EXPERTS)
            model.tie_weights()  # skipped with the initialisation
    except ValueError as err:
        text = " ".join(str(err).split())[:300]
        raise StructureError(
            f"model_type {config.model_type!r}: transformers cannot build it as a causal LM ({text}); remote "
            "code (trust_remote_code) is not run"
        ) from err
    return model.eval()


def find_layers(model: nn.Module, count: int) -> tuple[str, nn.ModuleList]:
    """The decoder layers: the outermost ``nn.ModuleList`` of ``count`` modules of one class."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count and count > 0:
            if len({type(layer) for layer in module}) == 1:
                found.append((name.count("."), name, module))
    if not found:
        raise StructureError(
            f"no list of {count} decoder layers in {type(model).__name__}: the model cannot be pruned block "
            "by block (decoder-only models built from repeated layers are supported)"
        )
    _, name, layers = min(found, key=lambda item: item[:2])
    return name, layers


def set_tensor(root: nn.Module, names: list[str], value: torch.Tensor) -> None:
    """Give the parameter (or buffer) known by ``names`` (aliases of one tied tensor) the value ``value``;
    the aliases stay one object."""
    param = None
    for name in names:
        owner, _, leaf = name.rpartition(".")
        module = root.get_submodule(owner)
        if leaf in module._parameters:
            param = param if param is not None else nn.Parameter(value, requires_grad=False)
            module._parameters[leaf] = param
        else:
            module._buffers[leaf] = value


def tensor_aliases(model: nn.Module) -> dict[int, list[str]]:
    """Every name of every parameter, by identity: tied weights (``lm_head`` and the embeddings) share."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return names
