"""Tiny models compared with their pruned versions: logits (dense, blocks skipped in memory), parameters
stored, every block pruned with magnitude, the dense chain's stores recorded from a forward, and the rows of
the tested models each structure takes; what a size search measured."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from thanos.data.storage import write_activations
from thanos.demo.tested_models import TESTED_MODELS
from thanos.models import open_model
from thanos.models.generic import find_layers
from thanos.recipes.recipe import Recipe
from thanos.stages.prune import prune

# model_type -> tiny-model options: phi3's fused qkv_proj has 2 x 64 rows at the tiny default sizes, the
# width of its MLP: an MLP width of 96 keeps its layers apart (the default is refused, see below)
OPTIONS = {"phi3": {"intermediate_size": 96}}


# rows of the matrix whose MLP is not one output projection of intermediate_size inputs per block: mixture
# of experts (many expert projections, or dense first blocks of another width); refused, named
NO_NEURONS = ("mixtral", "qwen3_moe", "gpt_oss", "granitemoe", "glm4_moe", "deepseek_v3", "qwen3_next")


def logits(model_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()(ids).logits


def stored_parameters(model_dir: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in model_dir.glob("*.safetensors"):
        with safe_open(str(file), "pt") as handle:
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())  # noqa: SIM118
    return total


def prune_with_magnitude(model: Path, root: Path, sparsity: str = "neurons:0.3") -> None:
    """Every block pruned by the prune stage (magnitude needs no calibration)."""
    _, adapter, _ = open_model(model)
    for block in range(adapter.num_blocks):
        prune(model, block, Recipe("r", "magnitude", sparsity), root / f"block{block}", device="cpu")


# rows of the matrix whose attention cannot lose heads, and why the refusal says so
HEADS_REFUSED = {
    "phi3": "fused projection self_attn.qkv_proj",
    "gpt_neox": "fused projection attention.query_key_value",
    "opt": "derives head_dim from the hidden size",
    "deepseek_v3": "no k_proj/key/wk projection",  # latent attention
    "qwen3_next": "no q_proj/query/wq projection",  # blocks of linear attention
    "olmo2": "normalises the whole projection",  # its q_norm mixes the heads
}


# the dense rows, and gpt-oss for its attention sinks (one per query head)
HEADS_DENSE = [
    t for t in TESTED_MODELS if t not in HEADS_REFUSED and "experts" not in TESTED_MODELS[t]["family"]
]


HEADS_ROWS = [*HEADS_DENSE, "gpt_oss"]


def skipped_logits(
    model_dir: Path,
    removed: list[int],
    ids: torch.Tensor,
    maps: dict[int, torch.Tensor] | None = None,
    layer: str = "",
    projections: dict[int, tuple[torch.Tensor, torch.Tensor | None]] | None = None,
) -> torch.Tensor:
    """The dense model's logits with the ``removed`` blocks skipped in memory (each returns its input),
    the output of ``layer`` of each block p in ``maps`` multiplied by its map T (the maps applied between
    the kept blocks), and ``layer``'s weight and bias of each block in ``projections`` replaced."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    _, layers = find_layers(model, model.config.num_hidden_layers)
    for block, (weight, bias) in (projections or {}).items():
        linear = layers[block].get_submodule(layer)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)

    def skip(module: torch.nn.Module, args: tuple, kwargs: dict, output: object) -> object:
        hidden = args[0] if args else kwargs["hidden_states"]
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    for block in removed:
        layers[block].register_forward_hook(skip, with_kwargs=True)
    for block, T in (maps or {}).items():
        layers[block].get_submodule(layer).register_forward_hook(lambda m, a, out, T=T: out @ T)
    with torch.inference_mode():
        return model(ids).logits


def dense_stores(model_dir: Path, ids: torch.Tensor, root: Path) -> list[Path]:
    """``inputs_0 .. inputs_L`` as the dense chain stores them, recorded from the whole model's forward
    (each block's input, and the last block's output)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    blocks = model.config.num_hidden_layers
    _, layers = find_layers(model, blocks)
    seen: dict[int, torch.Tensor] = {}

    def record(block: int):
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            seen[block] = args[0] if args else kwargs["hidden_states"]

        return hook

    def last(module: torch.nn.Module, args: tuple, output: object) -> None:
        seen[blocks] = output[0] if isinstance(output, tuple) else output

    hooks = [layer.register_forward_pre_hook(record(b), with_kwargs=True) for b, layer in enumerate(layers)]
    hooks.append(layers[-1].register_forward_hook(last))
    with torch.inference_mode():
        model(ids)
    for hook in hooks:
        hook.remove()
    stores = []
    for block in range(blocks + 1):
        path = root / f"inputs_{block}"
        with write_activations(
            path, ids.shape[0], ids.shape[1], seen[block].shape[-1], torch.float32, block
        ) as w:
            w.write(0, seen[block])
        stores.append(path)
    return stores


def measured_name(model: Path) -> str:
    """A model a size search measured, named as its candidate: a table point's pattern as its directory
    (``depth1``: a point is measured where it was assembled, in the search's working directory, its report
    naming its recipe), a written size's model by its directory (``params0.2``)."""
    from thanos.runner.size_search import candidate_name

    model = Path(model)
    if model.name == "model" and "search" in model.parts:
        return candidate_name(json.loads((model / "pruning_report.json").read_text())["recipe"]["sparsity"])
    return model.name
