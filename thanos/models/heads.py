"""Where a block's attention heads live: the layer that reads them (the attention's output projection) and
the projections that write them, found from the model's layout, its config and the checkpoint's shapes, the
same way for every model type.

Query head h is rows ``h d .. (h + 1) d`` of the query projection and the same columns of the output
projection (``d`` = ``head_dim``); key/value group k is those rows of the key and value projections, read by
query heads ``k g .. (k + 1) g`` (g = heads / kv_heads, as ``repeat_kv`` repeats them). Removing a head's
columns of the output projection and its query rows leaves the block's output unchanged when those columns
are zero, which is what ``heads:p`` recipes prune (``kv_heads:p`` removes a group with its key and value
rows); ``thanos.stages.compact`` writes the smaller model, whose ``config.json`` states the new
``num_attention_heads``, ``num_key_value_heads`` and an explicit ``head_dim``.

A model where this is not clean is refused, naming the model type and why: no separate query, key, value
and output projections in a block (fused ``qkv_proj``/``query_key_value``, latent attention, blocks of linear
attention), projections whose shapes are not heads x ``head_dim``, another tensor of the attention with a
head dimension that is not a per-head tensor handled here (``sinks``, one per query head; a ``q_norm``/
``k_norm`` over the whole projection, as in OLMo 2, normalises across heads: removing one changes the
others), or model code that derives ``head_dim`` from the hidden size instead
of reading the config (``check_expressible`` builds the model with fewer heads on the meta device and
compares its shapes). Torch-free except that check.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.errors import Option, OptionError

if TYPE_CHECKING:
    from thanos.models.layout import ModelLayout
    from thanos.pruning.sparsity import Sparsity

QUERY, KEY, VALUE = ("q_proj", "query", "wq"), ("k_proj", "key", "wk"), ("v_proj", "value", "wv")
OUTPUT = ("o_proj", "out_proj", "wo", "dense")
FUSED = ("qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv")


class HeadsError(ValueError):
    """The model's attention heads cannot be removed (the message names the model type and why)."""


def _refuse(model_type: str, why: str) -> HeadsError:
    return HeadsError(
        f"model_type {model_type!r}: cannot remove attention heads ({why}); heads:p recipes need separate "
        "query, key, value and output projections of heads x head_dim in every block, and model code that "
        "reads head_dim from the config"
    )


@dataclass(frozen=True)
class AttentionLayout:
    """A block's attention: ``output`` reads ``heads`` x ``head_dim`` columns; ``query`` writes them,
    ``key`` and ``value`` ``kv_heads`` x ``head_dim`` rows. ``per_head``: other tensors of the attention
    (relative to the block) with one entry per query head (attention sinks)."""

    model_type: str
    heads: int
    kv_heads: int
    head_dim: int
    query: str
    key: str
    value: str
    output: str
    per_head: tuple[str, ...] = ()
    config_keys: dict[str, str] = field(default_factory=dict)  # heads/kv_heads -> the config's key

    def to_dict(self) -> dict[str, Any]:
        return {
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "query": self.query,
            "key": self.key,
            "value": self.value,
            "output": self.output,
        }

    def removed(self, pattern: Sparsity) -> tuple[int, int]:
        """(query heads, key/value groups) that ``pattern`` removes from every block."""
        from thanos.pruning.sparsity import head_count

        r, whole = head_count(pattern, self.heads, self.kv_heads)
        if whole:
            return r * (self.heads // self.kv_heads), r
        return r * self.kv_heads, 0

    def config(self, config: dict[str, Any], heads: int, kv_heads: int) -> dict[str, Any]:
        """``config`` with ``heads`` query heads, ``kv_heads`` groups and an explicit ``head_dim`` (other
        keys and their order unchanged)."""
        return config | {
            self.config_keys["heads"]: heads,
            self.config_keys["kv_heads"]: kv_heads,
            "head_dim": self.head_dim,
        }


def head_config(model_type: str, config: dict[str, Any]) -> tuple[int, int, int, dict[str, str]]:
    """(heads, kv_heads, head_dim, the config's keys of the first two) from ``config.json``'s content."""
    heads_key = next((k for k in ("num_attention_heads", "n_head", "num_heads") if k in config), None)
    if heads_key is None or not isinstance(config[heads_key], int):
        raise _refuse(model_type, "its config states no num_attention_heads")
    heads = config[heads_key]
    kv_key = "num_key_value_heads"
    kv_heads = config.get(kv_key) or heads
    if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
        raise _refuse(
            model_type, f"its config's {kv_key} {config.get(kv_key)!r} does not divide {heads} heads"
        )
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    return heads, kv_heads, head_dim, {"heads": heads_key, "kv_heads": kv_key}


def attention_layout(model_dir: str | Path, layout: ModelLayout, checkpoint: Any) -> AttentionLayout:
    """The attention layout of the model at ``model_dir`` (``thanos.models.open_layout`` gives the
    other two), checked on every block."""
    model_type = layout.model_type
    config = json.loads((Path(model_dir) / "config.json").read_text())
    heads, kv_heads, head_dim, keys = head_config(model_type, config)

    def find(block: int) -> AttentionLayout:
        roles = _block_layout(model_type, layout.block_layers(block))
        sizes = (heads, kv_heads, head_dim)
        return _checked(model_type, roles, sizes, keys, checkpoint, layout.block_prefix(block))

    return layout.same_in_every_block(find, "attention", lambda why: _refuse(model_type, why))


def _block_layout(model_type: str, layers: list[str]) -> tuple[str, ...]:
    """(query, key, value, output) of one block, by their names."""
    for layer in layers:
        if layer.rpartition(".")[2] in FUSED:
            raise _refuse(model_type, f"its query, key and value share one fused projection {layer}")
    roles = []
    for names in (QUERY, KEY, VALUE, OUTPUT):
        matches = [layer for layer in layers if layer.rpartition(".")[2] in names]
        parents = {layer.rpartition(".")[0] for layer in matches}
        if len(matches) != 1:
            what = "no" if not matches else f"{len(matches)}"
            raise _refuse(
                model_type, f"a block has {what} {'/'.join(names)} projection(s) in {', '.join(layers)}"
            )
        roles.append((matches[0], parents))
    if len({next(iter(parents)) for _, parents in roles}) != 1:
        raise _refuse(model_type, "its query, key, value and output projections are not in one module")
    return tuple(layer for layer, _ in roles)


def _checked(
    model_type: str,
    roles: tuple[str, ...],
    sizes: tuple[int, int, int],
    keys: dict[str, str],
    checkpoint: Any,
    prefix: str,
) -> AttentionLayout:
    """The block's layout with its shapes checked against the config's (heads, kv_heads, head_dim) and its
    other per-head tensors."""
    query, key, value, output = roles
    heads, kv_heads, head_dim = sizes
    shape = {layer: list(checkpoint.shape(f"{prefix}{layer}.weight")) for layer in roles}
    q_rows, kv_rows = heads * head_dim, kv_heads * head_dim
    expected = {query: q_rows, key: kv_rows, value: kv_rows}
    for layer, rows in expected.items():
        if shape[layer][0] != rows:
            raise _refuse(
                model_type,
                f"{layer} has {shape[layer][0]} rows, not {heads} heads x head_dim {head_dim} = {rows}",
            )
    if shape[output][1] != q_rows:
        raise _refuse(
            model_type, f"{output} reads {shape[output][1]} columns, not {heads} heads x {head_dim}"
        )
    parent = query.rpartition(".")[0]
    per_head = []
    known = {f"{layer}.{suffix}" for layer in roles for suffix in ("weight", "bias")}
    for name in checkpoint.names(f"{prefix}{parent}."):
        local = name[len(prefix) :]
        if local in known:
            continue
        dims = list(checkpoint.shape(name))
        leaf = local.rpartition(".")[0].rpartition(".")[2] or local
        if dims == [head_dim]:  # one norm shared by every head (Qwen3's q_norm, k_norm)
            continue
        if len(dims) == 1 and dims[0] in (q_rows, kv_rows) and "norm" in leaf:
            raise _refuse(
                model_type,
                f"{local} normalises the whole projection ({dims[0]} values) across heads, so removing heads "
                "changes the heads kept",
            )
        if dims == [heads] and "sink" in local:
            per_head.append(local)
        elif any(d in (heads, kv_heads, q_rows, kv_rows) for d in dims):
            raise _refuse(model_type, f"{local} {dims} has a dimension of the heads that is not handled")
    return AttentionLayout(
        model_type,
        heads,
        kv_heads,
        head_dim,
        query,
        key,
        value,
        output,
        tuple(per_head),
        keys,
    )


def config_refusal(model_dir: str | Path, changes: dict[str, Any]) -> str | None:
    """Why the model type's config class refuses the model's ``config.json`` with ``changes``, in its own
    words, as ``from_pretrained`` would read the written one (transformers 5 refuses a Llama whose hidden
    size is not a multiple of its head count, even with ``head_dim`` set); None when it loads it."""
    from transformers import AutoConfig

    config = json.loads((Path(model_dir) / "config.json").read_text())
    try:
        type(AutoConfig.from_pretrained(str(model_dir))).from_dict(config | changes)
    except Exception as err:  # noqa: BLE001 - whatever the config class's validation raises
        return " ".join(str(err).split()).rsplit("Error: ", 1)[-1]
    return None


def check_config_accepts(model_dir: str | Path, attention: AttentionLayout, pattern: Sparsity) -> None:
    """Refuse, before anything runs, a ``pattern`` whose head count the model type's config refuses,
    naming the settings it accepts."""
    from thanos.pruning.sparsity import head_settings

    removed, removed_groups = attention.removed(pattern)
    heads, kv_heads = attention.heads - removed, attention.kv_heads - removed_groups
    refusal = config_refusal(model_dir, attention.config({}, heads, kv_heads))
    if refusal is None:
        return
    settings = head_settings(pattern.kind, attention.heads, attention.kv_heads)
    accepted = [
        f"{text} ({left} head{'s' * (left != 1)})"
        for text, left, groups in settings
        if config_refusal(model_dir, attention.config({}, left, groups)) is None
    ]
    raise OptionError(
        Option("sparsity", str(pattern)),
        f" leaves {heads} query heads in {kv_heads} key/value groups, which the config of model_type "
        f"{attention.model_type!r} refuses ({refusal.rstrip('.')}); the settings it accepts: "
        f"{', '.join(accepted) or 'none'}",
    )


def check_expressible(model_dir: str | Path, attention: AttentionLayout, pattern: Sparsity) -> None:
    """Refuse, naming the model type, a model whose code cannot hold the heads ``pattern`` leaves: the
    model is built from the changed config on the meta device (no memory, no weights) and its attention's
    shapes compared with the ones the compact checkpoint will have."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    check_config_accepts(model_dir, attention, pattern)
    removed, removed_groups = attention.removed(pattern)
    heads, kv_heads = attention.heads - removed, attention.kv_heads - removed_groups
    config = AutoConfig.from_pretrained(str(model_dir))
    for name, value in attention.config({}, heads, kv_heads).items():
        setattr(config, name, value)
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as err:  # noqa: BLE001 - whatever the model's own code raises on the new config
        raise _refuse(
            attention.model_type, f"its code refuses {heads} heads: {type(err).__name__}: {err}"
        ) from None
    shapes = {name: list(t.shape) for name, t in model.state_dict().items()}
    d = attention.head_dim
    want = {
        attention.query: [heads * d, None],
        attention.key: [kv_heads * d, None],
        attention.value: [kv_heads * d, None],
        attention.output: [None, heads * d],
    }
    for layer, dims in want.items():
        found = [shape for name, shape in shapes.items() if name.endswith(f".0.{layer}.weight")]
        if not found or any(w is not None and w != f for w, f in zip(dims, found[0], strict=True)):
            raise _refuse(
                attention.model_type,
                f"with {heads} heads of head_dim {d} in its config its code builds {layer} as "
                f"{found[0] if found else 'nothing'}, not {dims}: it derives head_dim from the hidden size",
            )


def removed_parameters(attention: AttentionLayout, checkpoint: Any, prefix: str, pattern: Sparsity) -> int:
    """Parameters ``pattern`` removes from the block at ``prefix`` (weights, biases and per-head tensors)."""
    removed, groups = attention.removed(pattern)
    d = attention.head_dim
    total = 0
    for layer, rows in ((attention.query, removed), (attention.key, groups), (attention.value, groups)):
        for suffix in ("weight", "bias"):
            name = f"{prefix}{layer}.{suffix}"
            if name in checkpoint:
                shape = checkpoint.shape(name)
                total += rows * d * math.prod(shape[1:])
    total += removed * d * checkpoint.shape(f"{prefix}{attention.output}.weight")[0]
    return total + removed * len(attention.per_head)
