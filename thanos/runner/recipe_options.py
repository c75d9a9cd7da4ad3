"""How to prune, as ``prune_model``'s keywords and ``thanos prune-model``'s flags give it: ``RecipeOptions``
(the method, the pattern and the recipe's options, each declared once with its help) and ``recipes()``, the
recipe or a combined pattern's parts in the order they run, each checked by ``check_runnable``, what a
workflow entry is checked by too."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from thanos.errors import Option, OptionError
from thanos.options import option
from thanos.pruning import methods
from thanos.pruning.sparsity import FRACTION_KINDS
from thanos.pruning.structures import STRUCTURES, kind_of, takes
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import DEFAULT_DAMP, Recipe
from thanos.recipes.training import Distillation
from thanos.runner.patterns import combined_parts


def positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class RecipeOptions:
    """How to prune: the method, the pattern and the method's options (``thanos.recipes.recipe.Recipe``)."""

    method: str = field(metadata=option("pruning method", choices=list(methods.METHODS)))
    sparsity: str | float = field(
        metadata=option(
            "0.5 (unstructured), 2:4, 4:8, structured:0.3, neurons:0.3 (MLP neurons, model written "
            "smaller), heads:0.33 (attention query heads of each key/value group, model written smaller), "
            "kv_heads:0.25 (whole key/value groups), depth:6 or depth:0.2 (whole blocks), vocab:0.3 or "
            "vocab:16000 (tokens removed, or kept), structures joined with + (depth:4+neurons:0.3+vocab:0.3: "
            "blocks, then heads, then neurons, then the vocabulary, each on the model the previous part "
            "wrote), or params:0.25 (the mix of --axes that removes that fraction of the parameters with the "
            "least loss on held-out calibration windows; params:0.15,0.25,0.35: each size to OUT/params0.15 "
            "and so on, with the quality-against-size curve OUT/sizes.csv and OUT/sizes.png)"
        )
    )
    alpha: float | None = field(
        default=None,
        metadata=option(
            "fraction of rows kept dense (outliers). Default 0 for n:m, so the model is exactly n:m (2:4 "
            "kernels can run it); --alpha 0.1 is the paper's Thanos n:m setting (lower perplexity, not n:m "
            "in every row). Default 0.1 for Thanos structured, else 0",
            type=float,
        ),
    )
    blocksize: int | None = field(
        default=None,
        metadata=option("B (default: Thanos 128 unstructured / 512 n:m, SparseGPT 128)", type=positive),
    )
    damp: float | None = field(
        default=None,
        metadata=option(f"damping, fraction of mean(diag H) (default {DEFAULT_DAMP})", type=float),
    )
    profile: str | None = field(
        default=None,
        metadata=option(
            "uniform (default): every block at --sparsity; owl: a sparsity per block by its outlier ratio "
            "(OWL, Yin et al. 2024), the same overall sparsity, unstructured only",
            choices=["uniform", "owl"],
        ),
    )
    owl_m: float | None = field(
        default=None, metadata=option("OWL's outlier threshold M (default 5)", type=float)
    )
    owl_lambda: float | None = field(default=None, metadata=option("OWL's lambda (default 0.08)", type=float))
    exclude: Sequence[str] | None = field(
        default=None,
        metadata=option(
            "leave dense the layers this regular expression matches (searched in the layer's name within "
            "its block, e.g. 'self_attn' or 'mlp\\.down_proj'); repeatable. Routers and lm_head are never "
            "pruned",
            action="append",
            metavar="REGEX",
        ),
    )
    compact: bool | None = field(
        default=None,
        metadata=option(
            "neurons:P, heads:P, kv_heads:P only: write the model without the removed neurons or heads "
            "(default); --no-compact writes zeros in the original shape",
            action=argparse.BooleanOptionalAction,
        ),
    )
    block_map: bool | None = field(
        default=None,
        metadata=option(
            "depth:K only: replace each run of removed blocks by a linear map fitted on the calibration "
            "activations, folded into the block before it (default); --no-block-map leaves them out",
            action=argparse.BooleanOptionalAction,
        ),
    )
    width_multiple: int | None = field(
        default=None,
        metadata=option(
            "neurons:P only: the kept MLP width is the multiple of this nearest to (1 - P) x the width, "
            "where the dense width is a multiple of it (default 32, what llama.cpp's block quantizations "
            "need; 256 for its k-quants)",
            type=positive,
        ),
    )
    vocab_text: str | None = field(
        default=None,
        metadata=option(
            "vocab:N/vocab:p parts (and params:P's vocabulary candidates) only: the text whose use of the "
            "tokens chooses those kept, a text/jsonl/parquet file or directory read with --text-field "
            "(default: the calibration's documents)",
            metavar="TEXT",
        ),
    )
    recover: bool | dict[str, Any] | None = field(
        default=None,
        metadata=option(
            "recover every pruned block: its kept weights trained to match the dense block's outputs "
            "(zeros kept); the --recover-* options set how",
            action="store_true",
        ),
    )
    # {tokens, source, lr, ...} (``thanos.recipes.training.Distillation``): the pruned model distilled
    # toward the dense one (the --distill-* options; --distill-tokens turns it on)
    distill: dict[str, Any] | Distillation | None = None

    def recipes(self) -> tuple[Recipe, ...]:
        """The recipe, or a combined pattern's parts (``depth:4+neurons:0.3``) in the order they run, each
        checked; a depth part recovers nothing (no weight of the blocks it keeps is pruned), only a depth
        part takes ``block_map``, only the width parts ``compact`` (``--no-compact``: their zeros), and the
        last part distils (toward the model the first part read)."""
        parts = combined_parts(self.sparsity)
        if self.vocab_text is not None and parts is not None and not takes(kind_of(parts[-1]), "vocab_text"):
            raise OptionError(
                Option("vocab_text", self.vocab_text),
                f"chooses the tokens of a vocab part, and {self.sparsity} has none; leave it out",
            )
        if parts is None:
            return (self._recipe(self.sparsity, self.recover, self.block_map, self.distill, self.compact),)
        last = len(parts) - 1
        if STRUCTURES[kind_of(parts[-1])].tokens and self.distill is not None:
            raise OptionError(
                Option("distill"),
                f"{self.sparsity} ends with the vocabulary, which is not distilled; distil the written model "
                "with thanos distill",
            )
        return tuple(
            self._recipe(
                part,
                self.recover if STRUCTURES[kind_of(part)].recovers else None,
                self.block_map if takes(kind_of(part), "block_map") else None,
                self.distill if i == last else None,
                self.compact if takes(kind_of(part), "compact") else None,
            )
            for i, part in enumerate(parts)
        )

    def _recipe(
        self,
        sparsity: str | float,
        recover: Any,
        block_map: bool | None = None,
        distill: Any = None,
        compact: bool | None = None,
    ) -> Recipe:
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        options = {name: value for name, value in given.items() if value is not None}
        options |= {
            "sparsity": sparsity,
            "exclude": [self.exclude]
            if isinstance(self.exclude, str)
            else list(self.exclude or ()),  # one or many
            "recover": recover,
            "block_map": block_map,
            "distill": distill,
            "compact": compact,
        }
        kind = kind_of(str(sparsity))
        if combined_parts(self.sparsity) is not None:  # the neurons part's width, the vocab part's text
            for name in ("width_multiple", "vocab_text"):
                if not takes(kind, name):
                    options.pop(name, None)
        try:
            recipe = Recipe(None, **options, key="prune-model")
        except ConfigError as err:
            raise _named(err, given) from None
        return check_runnable(recipe, sparsity, options)


def _named(err: ConfigError, given: dict[str, Any]) -> OptionError:
    """The recipe's error as an ``OptionError`` naming the option at fault with the value given."""
    if err.field is None:
        return OptionError(Option("sparsity", repr(given["sparsity"])), err.problem)
    path = err.field.split(".")  # recover.epochs: the entry of the recover dict
    value = given.get(path[0])
    for part in path[1:]:
        value = value.get(part) if isinstance(value, dict) else None
    return OptionError(Option(err.field, repr(value)), err.problem)


def check_runnable(recipe: Recipe, sparsity: str | float, given: dict[str, Any]) -> Recipe:
    """Refuse what a valid recipe still cannot run with (``given``: the options its user gave, ``thanos
    prune-model``'s and a workflow entry's alike): recovery of a depth or vocab recipe, a vocabulary's
    distillation, a pattern that prunes nothing, a block size or damping the method does not use."""
    if not recipe.sparsity.structure.recovers and recipe.recover is not None:
        raise OptionError(
            (Option("recover"), Option("sparsity", str(sparsity))),
            f"removing {recipe.sparsity.structure.name} prunes no weight of the kept blocks, so there is "
            "nothing to recover; combine it with a width (depth:4+neurons:0.3 ",
            Option("recover"),
            " recovers the neurons part)",
        )
    if recipe.sparsity.structure.tokens and recipe.distill is not None:
        raise OptionError(
            (Option("distill"), Option("sparsity", str(sparsity))),
            "the vocabulary is not distilled; distil the written model with thanos distill",
        )
    if recipe.sparsity.structure.whole_blocks and given.get("compact") is False:
        raise OptionError(
            Option("compact", repr(False)),
            f"{sparsity} removes whole blocks, which cannot be written as zeros; leave it out",
        )
    if given.get("compact") is not None and not takes(recipe.sparsity.kind, "compact"):
        raise OptionError(
            Option("compact", repr(given["compact"])),
            f"{sparsity} keeps every tensor's shape (only heads:p and neurons:p recipes are written smaller "
            "or as zeros); leave it out",
        )
    if recipe.sparsity.kind in FRACTION_KINDS and recipe.sparsity.p == 0:
        raise OptionError(
            Option("sparsity", repr(sparsity)), "prunes nothing; give a fraction above 0 (e.g. 0.5)"
        )
    method = methods.get(recipe.method)
    uses = {
        "damp": method.updates_weights,
        "blocksize": method.default_blocksize(recipe.sparsity.kind) is not None,
    }
    unused = [name for name in ("blocksize", "damp") if given.get(name) is not None and not uses[name]]
    if unused:
        them = "them; leave them" if len(unused) > 1 else "it; leave it"
        problem = f"{recipe.method} {sparsity} does not use {them} out"
        raise OptionError(tuple(Option(name) for name in unused), problem, join=" and ")
    return recipe
