"""The knobs a size search (``params:p``, ``thanos.runner.size``) turns, and the parameters a mix of them
leaves, predicted before anything is pruned.

An **axis** is one structure of a combined recipe: ``depth`` (blocks removed: ``depth:1`` .. half the
blocks), ``heads`` (query heads of each key/value group: ``heads:r/g``, never all of them), ``neurons`` (the
kept MLP width, every multiple of the width's multiple (``--width-multiple``) down to 40 % of the width)
and ``vocab`` (tokens removed, ``vocab:0.05`` .. ``vocab:0.6``). Each axis's **settings** are explicit
patterns in increasing size (the head counts only those the model type's config accepts: transformers
refuses a Llama whose hidden size is not a multiple of its head count); a **mix** holds at most one setting
per axis and is written as the combined recipe that runs it (``depth:3+neurons:0.25+vocab:0.2``).

**Predicted parameters**: the model the mix writes built from its config on the meta device (no memory,
no weights: its blocks, heads, width and vocabulary changed as the pruning changes them) and its parameters
counted, a tied head once; the search counts the written model too and records both (``search.json``).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

from thanos.pruning.sparsity import (
    WIDTH_MULTIPLE,
    Sparsity,
    depth_count,
    head_count,
    head_settings,
    neuron_count,
    parse_sparsity,
    short_fraction,
    vocab_count,
    width_multiple,
)
from thanos.runner.patterns import AXES

MOST_NEURONS = Fraction(6, 10)  # the largest fraction of the MLP width a setting removes
VOCAB_STEPS = [Fraction(i, 20) for i in range(1, 13)]  # vocab:0.05 .. vocab:0.6


@dataclass(frozen=True)
class Knobs:
    """The dense model's sizes the axes turn: its config, blocks, query heads in key/value groups, MLP
    width (and its config key), BPE tokens (None: its tokenizer cannot lose tokens, no vocab axis)."""

    model: str
    config: dict[str, Any] = field(hash=False, compare=False)
    blocks: int
    heads: int
    kv_heads: int
    width_key: str
    width: int
    tokens: int | None
    multiple: int = WIDTH_MULTIPLE
    fewest_tokens: int = 0  # the special tokens and the byte alphabet, closed under the merges

    def settings(self, axis: str) -> list[str]:
        """The axis's explicit patterns, in increasing size."""
        if axis not in SETTINGS:
            raise ValueError(f"unknown axis {axis!r}; choose from {', '.join(AXES)}")
        return SETTINGS[axis](self)

    def _depth_settings(self) -> list[str]:
        return [f"depth:{k}" for k in range(1, max(1, self.blocks // 2) + 1) if k < self.blocks]

    def _head_settings(self) -> list[str]:  # only the head counts the model type accepts and builds
        settings = head_settings("heads", self.heads, self.kv_heads)
        return [
            pattern
            for pattern, *_ in settings
            if self.accepts(self.changes({"heads": pattern})) and self._builds({"heads": pattern})
        ]

    def _builds(self, mix: dict[str, str]) -> bool:
        """Whether transformers builds the model the mix writes (OPT's config accepts 3 heads of a hidden
        size of 64; its attention refuses them)."""
        from thanos.models.skeleton import StructureError

        try:
            self.predicted(mix)
        except StructureError:
            return False
        return True

    def _neuron_settings(self) -> list[str]:
        step = width_multiple(self.multiple, self.width)
        kept = range(self.width - step, math.ceil(self.width * (1 - MOST_NEURONS)) - 1, -step)

        def kept_width(w: int) -> str:
            exact = Fraction(self.width - w, self.width)
            return f"neurons:{short_fraction(exact, lambda p: self._kept(p) == w)}"

        return [kept_width(w) for w in kept if w > 0]

    def _vocab_settings(self) -> list[str]:
        if not self.tokens:  # a tokenizer that cannot lose tokens offers no setting
            return []
        tokens = self.tokens
        return [
            f"vocab:{float(p):g}" for p in VOCAB_STEPS if tokens - math.ceil(p * tokens) >= self.fewest_tokens
        ]

    def accepts(self, config: dict[str, Any]) -> bool:
        """Whether ``config`` (a mix's ``changes``) is one the model type's config class loads."""
        return _accepts(self.model, json.dumps(config, sort_keys=True))

    def _kept(self, p: Fraction) -> int:
        return self.width - neuron_count(p, self.width, self.multiple)

    def predicted(self, mix: dict[str, str]) -> int:
        """The parameters of the model the mix (axis -> pattern) writes."""
        return _count(self.model, json.dumps(self.changes(mix), sort_keys=True))

    def changes(self, mix: dict[str, str]) -> dict[str, Any]:
        """config.json of the model the mix writes (the keys the pruning changes), its parts applied in the
        order they run."""
        config = dict(self.config)
        for axis in AXES:
            if axis in mix:
                config = CHANGES[axis](self, config, parse_sparsity(mix[axis]))
        return config

    def _fewer_blocks(self, config: dict[str, Any], pattern: Sparsity) -> dict[str, Any]:
        from thanos.stages.depth.blocks import shortened_config

        k = depth_count(pattern, self.blocks)
        return shortened_config(config.get("model_type", ""), config, list(range(self.blocks - k)))

    def _fewer_heads(self, config: dict[str, Any], pattern: Sparsity) -> dict[str, Any]:
        removed, whole = head_count(pattern, self.heads, self.kv_heads)
        config["head_dim"] = config.get("head_dim") or config["hidden_size"] // self.heads
        if whole:
            config["num_key_value_heads"] = self.kv_heads - removed
            removed *= self.heads // self.kv_heads
        else:
            removed *= self.kv_heads
        config["num_attention_heads"] = self.heads - removed
        return config

    def _fewer_neurons(self, config: dict[str, Any], pattern: Sparsity) -> dict[str, Any]:
        config[self.width_key] = self._kept(pattern.p)
        return config

    def _fewer_tokens(self, config: dict[str, Any], pattern: Sparsity) -> dict[str, Any]:
        if self.tokens:
            config["vocab_size"] = vocab_count(pattern, self.tokens)
        return config


# each axis's settings and the config keys its setting changes (an axis is a kind of the structures' table
# that a size turns: ``thanos.pruning.structures.AXES``)
SETTINGS: dict[str, Callable[[Knobs], list[str]]] = {
    "depth": Knobs._depth_settings,
    "heads": Knobs._head_settings,
    "neurons": Knobs._neuron_settings,
    "vocab": Knobs._vocab_settings,
}
CHANGES: dict[str, Callable[[Knobs, dict[str, Any], Sparsity], dict[str, Any]]] = {
    "depth": Knobs._fewer_blocks,
    "heads": Knobs._fewer_heads,
    "neurons": Knobs._fewer_neurons,
    "vocab": Knobs._fewer_tokens,
}


@lru_cache(maxsize=512)
def _accepts(model: str, config_text: str) -> bool:
    from thanos.models.heads import config_refusal

    return config_refusal(model, json.loads(config_text)) is None


@lru_cache(maxsize=8)
def _config(model: str) -> Any:
    """The model's config as transformers reads it, once (each count changes a copy)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model)


@lru_cache(maxsize=512)
def _count(model: str, config_text: str) -> int:
    """Parameters of the model of ``config_text`` (config.json's content), a tied head once: where every
    block of the model after its first holds as many parameters as its second (``_uniform``), those of its
    first block and of its first two counted on their skeletons and the rest of its blocks added at that
    difference (SmolLM2-135M: 4.5 ms a mix where the whole skeleton took 20, ``bench/size_counts.py``; a
    search counts ~120 mixes); else the whole skeleton's."""
    config = json.loads(config_text)
    blocks = config.get("num_hidden_layers")
    if not isinstance(blocks, int) or blocks < 2 or not _uniform(model):
        return _built(model, config_text)
    one, two = _first_counts(model, config)
    return one + (blocks - 1) * (two - one)


@lru_cache(maxsize=8)
def _uniform(model: str) -> bool:
    """Whether every block of the dense ``model`` after its first holds as many parameters as its second:
    its whole skeleton's count is its first block's and its first two's extrapolated (a hybrid of blocks of
    other sizes is not, nor are several dense blocks before experts; they are counted whole)."""
    config = json.loads((Path(model) / "config.json").read_text())
    blocks = config.get("num_hidden_layers")
    if not isinstance(blocks, int) or blocks < 2:
        return False
    try:
        one, two = _first_counts(model, config)
    except ValueError:  # a per-block setting the first blocks cannot keep
        return False
    return one + (blocks - 1) * (two - one) == _built(model, json.dumps(config, sort_keys=True))


def _first_counts(model: str, config: dict[str, Any]) -> tuple[int, int]:
    """The parameters of the model of ``config`` (config.json's content) cut to its first block, and to its
    first two (per-block settings cut alike; ValueError where one cannot be)."""
    from thanos.stages.depth.blocks import shortened_config

    model_type = config.get("model_type", "")
    one, two = (shortened_config(model_type, config, list(range(n))) for n in (1, 2))
    return _built(model, json.dumps(one, sort_keys=True)), _built(model, json.dumps(two, sort_keys=True))


@lru_cache(maxsize=1024)
def _built(model: str, config_text: str) -> int:
    """Parameters of the skeleton of the model of ``config_text`` (``thanos.models.skeleton.build_skeleton``:
    parameters on the meta device, no initialisation, a tied head once)."""
    from thanos.models.skeleton import build_skeleton

    config = copy.deepcopy(_config(model))
    for key, value in json.loads(config_text).items():
        setattr(config, key, value)
    return sum(p.numel() for p in build_skeleton(config).parameters())


def knobs(model: str | Path, multiple: int | None = None) -> Knobs:
    """The dense model's knobs, from its config and tokenizer."""
    from thanos.models.neurons import mlp_width

    config = json.loads((Path(model) / "config.json").read_text())
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    key, width = mlp_width(config.get("model_type", ""), config)
    tokens, fewest = _tokens(Path(model))
    return Knobs(
        str(model), config, config["num_hidden_layers"], heads, kv_heads, key, width, tokens,
        multiple or WIDTH_MULTIPLE, fewest,
    )  # fmt: skip


def _tokens(model: Path) -> tuple[int | None, int]:
    """(the BPE tokens a vocab setting counts from, the fewest a vocabulary keeps); None where the tokenizer
    cannot lose tokens."""
    from thanos.models.vocabulary_files import vocabulary_sizes

    try:
        return vocabulary_sizes(model)
    except (OSError, ValueError, KeyError):
        return None, 0


def recipe_of(mix: dict[str, str]) -> str:
    """The combined recipe that runs the mix (its parts in the order they run)."""
    return "+".join(mix[axis] for axis in AXES if axis in mix)
