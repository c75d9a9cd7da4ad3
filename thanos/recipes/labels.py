"""The words a reader sees for a method, a sparsity pattern, a recipe and a compact model's structure.

Every text that names one of them for people is made here, so the model card, ``thanos prune-model``'s
lines, the tables, the figures and the orderings check say the same thing the same way. Two registers
stand side by side, and differ on purpose (the tests pin both):

- sentences (the model card, ``thanos prune-model``): ``pattern_text`` (``unstructured 50 %``,
  ``2:4 + 10 % dense rows``: what the pattern removes), ``nm_note``, ``shape_text`` (what a compact
  model's shape changed), ``recipe_label`` (``Thanos 2:4``) and ``public_name`` (a model or a file as an
  uploaded card may name it: a hub id, or a local path's last part);
- table cells, figure titles and legends (``thanos.report``): ``method_label`` and
  ``method_alpha_label`` (``Thanos (α=0.1)``), ``row_label``, ``variant_label`` (``+ OWL``,
  ``+ recovery``), ``pattern_label`` (``Unstructured 50%``: a table's group header), ``pattern_title``
  (``Semi-structured 2:4``: a table's or a panel's title), ``KIND_TITLES`` (a figure's axis) and
  ``pattern_slug`` (``u50``, ``2-4``: a file name).

How a method is shown, its label, colour, whether its label shows alpha and its paper, is ``LABELS``: what
a method computes is ``thanos.pruning.methods``, which has one entry here per method, in the same order
(the order of the paper's tables: baselines first, Thanos last).

Imports: ``thanos.files.layout`` (the dense model's name), and for types only ``thanos.pruning.sparsity``
and ``thanos.recipes.recipe``. Torch-free, pandas-free.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.files.layout import DENSE
from thanos.pruning.structures import STRUCTURES

if TYPE_CHECKING:
    from collections.abc import Callable

    from thanos.pruning.sparsity import Sparsity
    from thanos.recipes.recipe import Recipe


@dataclass(frozen=True)
class MethodLabel:
    """``alpha_in_label``: alpha is one of the method's own hyper-parameters, so tables and figures always
    show it (other methods show it only when it is > 0); ``reference``: the method's paper, cited by the
    model card (Thanos: the card's BibTeX)."""

    label: str
    color: str
    alpha_in_label: bool = False
    reference: str = ""


LABELS: dict[str, MethodLabel] = {
    "magnitude": MethodLabel(label="Magnitude", color="#7f7f7f"),
    "sparsegpt": MethodLabel(
        label="SparseGPT",
        color="#1f77b4",
        reference="Frantar and Alistarh, SparseGPT: Massive Language Models Can Be Accurately Pruned in "
        "One-Shot (ICML 2023)",
    ),
    "wanda": MethodLabel(
        label="Wanda",
        color="#2ca02c",
        reference="Sun et al., A Simple and Effective Pruning Approach for Large Language Models (ICLR 2024)",
    ),
    "thanos": MethodLabel(label="Thanos", color="#d62728", alpha_in_label=True),
}
# "vocab": a model whose vocabulary alone was pruned (tokens chosen by their use on a text, by no method)
METHOD_NAMES = {DENSE: "Dense", "vocab": "Vocabulary"} | {name: shown.label for name, shown in LABELS.items()}

# --- sentences: the model card and ``thanos prune-model``


def _percent(pattern: Sparsity) -> str:
    return f"{100 * float(pattern.fraction):g} %"


def _blocks_text(pattern: Sparsity) -> str:
    if pattern.n:
        return f"{pattern.n} whole block{'s' if pattern.n > 1 else ''}"
    return f"whole blocks {100 * float(pattern.p):g} %"


def _tokens_text(pattern: Sparsity) -> str:
    if pattern.n:
        return f"{pattern.n:,} tokens kept"
    return f"{100 * float(pattern.p):g} % of the tokens removed"


# a pattern in a sentence, per kind (``pattern_text``); any other kind: unstructured
PATTERN_TEXTS: dict[str, Callable[[Sparsity], str]] = {
    "nm": lambda pattern: f"{pattern.n}:{pattern.m}",
    "structured": lambda pattern: f"structured {_percent(pattern)} (whole input columns)",
    "neurons": lambda pattern: (
        f"MLP neurons {_percent(pattern)} (kept width the nearest multiple of {pattern.multiple})"
    ),
    "heads": lambda pattern: (
        f"attention heads {_percent(pattern)} (of each key/value group's query heads; whole groups where "
        "each has one)"
    ),
    "depth": _blocks_text,
    "kv_heads": lambda pattern: f"key/value groups {_percent(pattern)} (with their query heads)",
    "vocab": _tokens_text,
}


def pattern_text(pattern: Sparsity, alpha: float | None, outlier_rows: int | None = None) -> str:
    """``2:4 + 10 % dense rows``, ``unstructured 50 %``, ``structured 30 % (whole input columns)``: a
    pattern in a sentence. ``outlier_rows``: the rows the written weights keep dense, where counted (the
    model card's ``SparsitySummary.outlier_rows``); none counted drops the dense rows that alpha asked for."""
    words = PATTERN_TEXTS.get(pattern.kind)
    text = words(pattern) if words is not None else f"unstructured {_percent(pattern)}"
    if alpha and (outlier_rows is None or outlier_rows > 0):
        text += f" + {100 * alpha:g} % dense rows"
    return text


def recipe_label(recipe: Recipe) -> str:
    """``Thanos 2:4``, ``Wanda unstructured 70 % (OWL per block: M 5, lambda 0.08)``, ``Depth: 6 whole
    blocks removed, replaced by a linear map ...``: a recipe in a sentence, as ``thanos prune-model``'s
    lines name the run."""
    pattern = pattern_text(recipe.sparsity, recipe.alpha)
    # depth: the blocks are chosen by a score, not by the method
    if recipe.sparsity.structure.whole_blocks and recipe.block_map:
        return (
            f"Depth: {pattern} removed, replaced by a linear map fitted on the calibration text (the run of "
            "blocks the map replaces best)"
        )
    if recipe.sparsity.structure.whole_blocks:
        return f"Depth: {pattern} removed (the lowest block influence on the calibration text)"
    if recipe.sparsity.structure.tokens:  # the tokens are chosen by their use on a text, not by the method
        return f"Vocabulary: {pattern} (the tokens the text uses most kept, then the earliest merges)"
    label = f"{LABELS[recipe.method].label} {pattern}"
    if recipe.owl:
        label += f" (OWL per block: M {recipe.owl_m:g}, lambda {recipe.owl_lambda:g})"
    return label


def nm_note(pattern: Sparsity, alpha: float | None) -> str | None:
    """For an n:m pattern, what the chosen alpha gives (None for other patterns): the model card and
    ``thanos prune-model``'s plan say it."""
    if not pattern.structure.n_of_m:
        return None
    nm = f"{pattern.n}:{pattern.m}"
    if not alpha:
        return (
            f"every row of every pruned layer is {nm}: n:m sparse kernels (e.g. torch's semi-structured "
            "sparsity on NVIDIA GPUs with sparse tensor cores) can use it; alpha 0.1 (the paper's Thanos "
            "setting) keeps 10 % of the rows dense for a lower perplexity"
        )
    return (
        f"{100 * alpha:g} % of the rows are kept dense (the paper's Thanos setting, lower perplexity): the "
        f"model is not {nm} in every row, so n:m sparse kernels cannot run it as is; alpha 0 gives exact {nm}"
    )


def blocks_text(blocks: list[int]) -> str:
    """``block 0`` or ``blocks 12, 13, 14``: never a bare number that reads as a count."""
    return f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {', '.join(map(str, blocks))}"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun agreeing: ``1 core``, ``2 cores``, ``1,024 tokens`` (``plural``: where it is not
    the noun and an s)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def shape_text(compact: dict[str, Any]) -> str:
    """What a compact model's shape changed, in one line: ``MLP width 96 -> 72 neurons per block
    (ffn_dim)``, ``attention heads 9 -> 6 per block (key/value heads 3 -> 3)``, ``blocks 30 -> 24 (removed
    blocks 12, ..., 17; replaced by a linear map in block 11)``. The model card's combined recipe and
    ``thanos prune-model``'s summary say it."""
    return SHAPE_TEXTS.get(compact.get("structure"), _width_shape)(compact)


def _blocks_shape(compact: dict[str, Any]) -> str:
    removed = blocks_text(compact["removed_blocks"])
    folded = [entry["folded_into"] for entry in compact.get("maps") or [] if "folded_into" in entry]
    maps = f"; replaced by a linear map in {blocks_text(folded)}" if folded else ""
    return f"blocks {compact['original_blocks']} -> {compact['kept_blocks']} (removed {removed}{maps})"


def _tokens_shape(compact: dict[str, Any]) -> str:
    return f"vocabulary {compact['original_tokens']:,} -> {compact['kept_tokens']:,} tokens"


def _heads_shape(compact: dict[str, Any]) -> str:
    width = compact["kept_heads"] * compact["head_dim"]
    return (
        f"attention heads {compact['original_heads']} -> {compact['kept_heads']} per block "
        f"(key/value heads {compact['original_kv_heads']} -> {compact['kept_kv_heads']}; "
        f"{width} = {compact['kept_heads']} x {compact['head_dim']} wide)"
    )


def _width_shape(compact: dict[str, Any]) -> str:
    multiple = f", a multiple of {compact['multiple']}" if compact.get("multiple", 1) > 1 else ""
    return (
        f"MLP width {compact['original_width']} -> {compact['kept_width']} neurons per block "
        f"({compact['width_key']}{multiple})"
    )


# a compact record's shape in one line, by its structure (``sparsity.json``'s: the table's ``sidecar``)
SHAPE_TEXTS = {"depth": _blocks_shape, "vocab": _tokens_shape, "heads": _heads_shape, "neurons": _width_shape}


# --- table cells, figure titles and legends: ``thanos.report``

KIND_TITLES = {"unstructured": "Unstructured", "nm": "Semi-structured n:m", "structured": "Structured"}


def _alpha_in_label(method: str) -> bool:
    return method in LABELS and LABELS[method].alpha_in_label


def method_label(method: str, alpha: float | None = None) -> str:
    """``Thanos (α=0.1)`` for Thanos with a known alpha, else the method's name (``Dense`` for the dense
    model; an unknown method as it is spelt)."""
    name = METHOD_NAMES.get(method, method)
    if _alpha_in_label(method) and alpha is not None and not math.isnan(alpha):
        return f"{name} (α={alpha:g})"
    return name


def shown_alpha(method: str, alpha: float) -> float:
    """The alpha a label shows: always Thanos's (a hyper-parameter of every Thanos recipe), another
    method's only when it keeps outlier rows (alpha > 0); NaN when nothing is shown."""
    return alpha if _alpha_in_label(method) or (not math.isnan(alpha) and alpha > 0) else math.nan


def method_alpha_label(method: str, alpha_shown: float = math.nan, blocksize: float | None = None) -> str:
    """``Thanos (α=0.1)``, ``SparseGPT``, ``Wanda (α=0.1)``: the method with the alpha it shows
    (``shown_alpha``); with a ``blocksize`` (a figure's lines that differ only in it) ``Thanos (α=0.1),
    B=64``. The orderings' claims, the tables' rows (``row_label``) and the figures' legends."""
    label = method_label(method, alpha_shown)
    if not _alpha_in_label(method) and not math.isnan(alpha_shown):
        label += f" (α={alpha_shown:g})"
    if blocksize is not None and not math.isnan(blocksize):
        label += f", B={blocksize:g}"
    return label


def row_label(method: str, kind: str, sparsity: str, alpha_shown: float) -> str:
    """A table's row: ``method_alpha_label``, except that n:m with alpha > 0 says what it is: ``Thanos
    (2:4 + 10% dense rows)``."""
    if is_n_of_m(kind) and not math.isnan(alpha_shown) and alpha_shown > 0:
        return f"{METHOD_NAMES.get(method, method)} ({sparsity} + {100 * alpha_shown:g}% dense rows)"
    return method_alpha_label(method, alpha_shown)


def variant_label(label: str, owl: bool = False, recovered: bool = False, distilled: bool = False) -> str:
    """``label`` of a recipe with OWL's per-block sparsities, recovery and/or distillation: ``Wanda + OWL``,
    ``SparseGPT + OWL + recovery``, ``Thanos + distillation`` (tables' rows, figures' legends)."""
    return (
        label
        + (" + OWL" if owl else "")
        + (" + recovery" if recovered else "")
        + (" + distillation" if distilled else "")
    )


def pattern_label(kind: str, fraction: float, sparsity: str | None) -> str:
    """``Unstructured 50%``, ``Structured 30%``, ``4:8``, ``0%`` (dense): a table's group of rows, the
    orderings' pattern, a figure's line or panel."""
    if kind == "dense":
        return "0%"
    structure = STRUCTURES.get(kind)
    if structure is not None and structure.label is not None:
        return f"{structure.label} {fraction * 100:g}%"
    return str(sparsity)


STRUCTURE_NAMES = {kind: s.name for kind, s in STRUCTURES.items() if s.name is not None}


def structure_label(structure: str, method: str) -> str:
    """A structural recipe's line in the quality-against-size figure: ``Whole blocks`` (the blocks are
    chosen by their scores, whatever the method), ``Thanos: MLP neurons``, ``Thanos: whole blocks + MLP
    neurons`` (a combined recipe, its parts in the order they run)."""
    names = " + ".join(STRUCTURE_NAMES.get(kind, kind) for kind in structure.split("+"))
    if structure in STRUCTURES and not STRUCTURES[structure].by_method:  # chosen by scores or use
        return names.capitalize()
    return f"{METHOD_NAMES.get(method, method)}: {names}"


def pattern_title(kind: str, fraction: float, sparsity: str | None) -> str:
    """A pattern as a title says it (a table's, a figure panel's): ``Semi-structured 2:4``, else as
    ``pattern_label``."""
    label = pattern_label(kind, fraction, sparsity)
    return f"Semi-structured {label}" if is_n_of_m(kind) else label


def is_n_of_m(kind: str) -> bool:
    """Whether a table's kind (a structure's, or ``dense``, ``combined``) is ``n:m``."""
    return kind in STRUCTURES and STRUCTURES[kind].n_of_m


def pattern_slug(kind: str, fraction: float, sparsity: str) -> str:
    """``u50``, ``s30``, ``2-4``, ``depth1+neurons0.3``: a pattern in a file name (the recipe-name convention
    of the workflow)."""
    if is_n_of_m(kind):
        return str(sparsity).replace(":", "-")
    if kind == "combined" or (
        kind in STRUCTURES and STRUCTURES[kind].whole_blocks
    ):  # depth1, depth1+neurons0.3; a size's "params:0.2: neurons:0.37": params0.2_neurons0.37 (no space)
        return re.sub(r"[^\w.+-]+", "_", str(sparsity).replace(":", "")).strip("_")
    return f"{kind[0]}{fraction * 100:g}"


def public_name(path: str | Path) -> str:
    """How a model card or ``sparsity.json`` names a model or a file: a hub id as it is, a snapshot of the
    hub's cache (``.../models--ORG--NAME/snapshots/REVISION``) by its hub id, any other local path by its
    last part (they are meant to be uploaded: no local directory in them)."""
    text = str(path)
    if not text.startswith(("/", ".", "~")) and text.count("/") <= 1 and not Path(text).exists():
        return text
    parts = Path(text).expanduser().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")  # the cache's "/" (ids hold no "--")
    return Path(text).name or text


# --- perplexities of models whose tokenizers differ (a perplexity.json's content) ---------------------


def per_original_token(result: dict[str, Any], dense: dict[str, Any]) -> float | None:
    """The perplexity per token of the dense model's tokenization of ``result`` (a ``perplexity.json``'s
    content) against ``dense``'s on the same text: exp(nats per byte x the dense model's bytes per token);
    None when either lacks its bytes or the texts differ."""
    if not result.get("bytes") or not dense.get("bytes") or result.get("checksum") != dense.get("checksum"):
        return None
    nats = result["total_nll"] / result["bytes"] * dense["bytes"] / dense["tokens"]
    return math.exp(nats) if nats < 700 else float("inf")


def tokens_differ(result: dict[str, Any], dense: dict[str, Any]) -> bool:
    """Whether the two results cut the same text into different tokens (so their perplexities per token are
    not comparable: the bits per byte are)."""
    return result.get("text_tokens") != dense.get("text_tokens")


def shown_perplexity(result: dict[str, Any], dense: dict[str, Any] | None) -> tuple[float, str]:
    """(perplexity, what it is per) to show beside the dense model's: its own per token, or, where the two
    cut the text into different tokens, per original token (``per_original_token``)."""
    if dense and tokens_differ(result, dense):
        converted = per_original_token(result, dense)
        if converted is not None:
            return converted, " per original token"
    return float(result["ppl"]), ""


def bytes_text(result: dict[str, Any], dense: dict[str, Any] | None, mark: str = "") -> str | None:
    """The bits per byte beside the dense model's (``mark`` around the value: ``**`` in the card), and,
    where the tokens differ, the perplexity per the model's own token and how many tokens the text became;
    None without bytes."""
    if result.get("bits_per_byte") is None:
        return None
    text = f"{mark}{result['bits_per_byte']:.3f}{mark} bits per byte"
    if dense and dense.get("bits_per_byte") is not None:
        text += f" (the dense model {dense['bits_per_byte']:.3f})"
    if dense and tokens_differ(result, dense) and shown_perplexity(result, dense)[1]:
        own, before = int(result["text_tokens"]), int(dense["text_tokens"])
        text += (
            f"; {result['ppl']:.2f} per its own token, the text {own:,} tokens instead of {before:,} "
            f"({100 * (own / before - 1):+.1f} %)"
        )
    return text
