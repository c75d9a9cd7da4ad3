"""Where a block's MLP neurons live: the layer that reads them (the MLP's output projection) and the layers
that write them (its feeders), found from the model's layout (``thanos.models.layout``) and the checkpoint's
shapes, the same way for every model type.

A neuron j of the MLP is column j of the output projection (Llama-like ``mlp.down_proj``, OPT ``fc2``,
GPT-NeoX ``mlp.dense_4h_to_h``) and row j (and bias entry j) of every feeder (``mlp.gate_proj`` and
``mlp.up_proj``, ``fc1``, ``mlp.dense_h_to_4h``); a fused feeder of twice the width (Phi-3's
``gate_up_proj``, split in two halves by its forward) holds it in rows j and width + j. Removing the
column and those rows leaves the block's output unchanged when the column is zero, which is what
``neurons:p`` recipes prune (``thanos.stages.compact`` writes the smaller model).

The width is the config's ``intermediate_size`` (OPT: ``ffn_dim``). It is found as the one linear layer of
the block whose input has that width; its feeders are the linear layers beside it (same parent module)
whose output has the width (or twice it). A model where this is not clean is refused, naming the model type
and why: no or several such layers, per-block widths (a list in the config), blocks of other widths, or any
other tensor of the block with a dimension of the width (e.g. a norm over the neurons, or a hidden size equal
to the width, which makes the layers ambiguous). Torch-free: shapes come from the safetensors headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thanos.models.layout import ModelLayout

WIDTH_KEYS = ("intermediate_size", "ffn_dim")  # the config key of the MLP width, first found


class NeuronsError(ValueError):
    """The model's MLP neurons cannot be removed (the message names the model type and why)."""


@dataclass(frozen=True)
class MLPLayout:
    """A block's MLP: ``output`` reads the ``width`` neurons (its input columns); ``feeders`` write them
    (their rows, and bias entries); ``fused`` feeders hold two halves of ``width`` rows each."""

    model_type: str
    width_key: str
    width: int
    output: str
    feeders: tuple[str, ...]
    fused: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "width_key": self.width_key,
            "width": self.width,
            "output": self.output,
            "feeders": list(self.feeders),
            "fused": list(self.fused),
        }


def _refuse(model_type: str, why: str) -> NeuronsError:
    return NeuronsError(
        f"model_type {model_type!r}: cannot remove MLP neurons ({why}); neurons:p recipes need one MLP "
        "output projection per block whose input columns are the config's intermediate_size neurons; use "
        "structured:p (zeros in the original shape) for this model"
    )


def mlp_config(config: Any) -> dict[str, Any]:
    """The config's MLP width under each name of ``WIDTH_KEYS`` it gives (what the layout keeps)."""
    return {key: getattr(config, key) for key in WIDTH_KEYS if getattr(config, key, None) is not None}


def mlp_width(model_type: str, config: Mapping[str, Any]) -> tuple[str, int]:
    """(config key, width) of the MLP from the config's width entries (``mlp_config``); refused when
    absent or per block."""
    for key in WIDTH_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
        raise _refuse(model_type, f"its config's {key} is {value!r}, not one width for every block")
    raise _refuse(model_type, f"its config states no MLP width ({' or '.join(WIDTH_KEYS)})")


def mlp_layout(layout: ModelLayout, checkpoint: Any) -> MLPLayout:
    """The MLP layout of the model of ``layout`` (``thanos.models.open_layout``), checked on every block of
    ``checkpoint``."""
    model_type = layout.model_type
    key, width = mlp_width(model_type, layout.mlp_config)

    def find(block: int) -> MLPLayout:
        prefix = layout.block_prefix(block)
        return _block_layout(model_type, key, width, layout.block_layers(block), checkpoint, prefix)

    return layout.same_in_every_block(find, "MLP", lambda why: _refuse(model_type, why))


def _block_layout(
    model_type: str, key: str, width: int, layers: list[str], checkpoint: Any, prefix: str
) -> MLPLayout:
    shapes = {layer: list(checkpoint.shape(f"{prefix}{layer}.weight")) for layer in layers}
    outputs = [layer for layer, shape in shapes.items() if shape[1] == width]
    if len(outputs) != 1:
        what = "no linear layer" if not outputs else f"{len(outputs)} linear layers ({', '.join(outputs)})"
        raise _refuse(model_type, f"{what} of a block take(s) {key}={width} inputs")
    output = outputs[0]
    parent = output.rpartition(".")[0]
    feeders = tuple(
        layer
        for layer, shape in shapes.items()
        if layer != output and layer.rpartition(".")[0] == parent and shape[0] in (width, 2 * width)
    )
    if not feeders:
        raise _refuse(model_type, f"no linear layer beside {output} writes its {width} inputs")
    fused = tuple(layer for layer in feeders if shapes[layer][0] == 2 * width)
    expected = {f"{output}.weight": 1}
    for layer in feeders:
        expected[f"{layer}.weight"] = 0
        expected[f"{layer}.bias"] = 0
    for name in checkpoint.names(prefix):
        local = name[len(prefix) :]
        shape = list(checkpoint.shape(name))
        if local in expected:
            continue
        if width in shape or (fused and 2 * width in shape):
            raise _refuse(model_type, f"{local} {shape} also has a dimension of the MLP width {width}")
    return MLPLayout(model_type, key, width, output, feeders, fused)
