"""Scan ``results/`` into pandas DataFrames, tolerating whatever is missing.

Layout (docs/cli.md): ``results/{model}/dense/eval/{perplexity,zeroshot}.json`` for the dense model,
``results/{model}/{recipe}/model/pruning_report.json`` (its ``recipe`` gives method, sparsity, alpha,
blocksize; its ``layers`` the per-layer stats) and ``results/{model}/{recipe}/eval/*.json`` per recipe.
A file that is missing or unreadable leaves its cells empty (NaN) and is logged, never raised.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from thanos.files.layout import DENSE, NOT_MODELS
from thanos.pruning import methods
from thanos.pruning.sparsity import Sparsity, parse_sparsity
from thanos.pruning.structures import COMBINING, kind_of
from thanos.recipes.labels import (
    pattern_label,
    per_original_token,
    row_label,
    shown_alpha,
    tokens_differ,
    variant_label,
)
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.stages.describe.sparsity import combined_parameters, combined_parts

log = logging.getLogger(__name__)

# the dense model first, then the methods in their registry order (thanos/pruning/methods.py)
METHOD_ORDER = {DENSE: 0} | {name: i for i, name in enumerate(methods.names(), start=1)}
KIND_ORDER = {
    "dense": 0,
    "unstructured": 1,
    "structured": 2,
    "nm": 3,
    "neurons": 4,
    "heads": 5,
    "kv_heads": 6,
    "depth": 7,
    "combined": 8,  # a combined recipe (depth:4+neurons:0.3): its structures, each on the part before's model
}
# the structures a recipe removes, written smaller (``params_removed``): the ``structure`` column
STRUCTURES = tuple(COMBINING)  # the kinds a structural recipe removes (thanos.pruning.structures)
# the paper's appendix column order and labels
TASK_LABELS = {
    "arc_challenge": "ArcC",
    "arc_easy": "ArcE",
    "boolq": "BoolQ",
    "hellaswag": "HellaSwag",
    "openbookqa": "OBQA",
    "piqa": "PiQA",
    "winogrande": "WinoGrande",
}

RECIPE_COLUMNS = [
    "model",
    "recipe",
    "method",
    "sparsity",
    "kind",
    "fraction",
    "n",
    "m",
    "alpha",
    "blocksize",
    "damp",
    "chain",
    "profile",
    "recovered",
    "distilled",
    "overall_sparsity",
    "params_removed",  # structural recipes (neurons, heads, depth written smaller): 1 - kept / original
    "structure",  # what a structural recipe removes: neurons, heads, kv_heads, depth, or depth+neurons ...
    "prune_seconds",
    "ppl",
    "seqlen",
    "ppl_dataset",
    "bits_per_byte",  # the perplexity's loss per byte of text (comparable across tokenizers)
    "ppl_text_tokens",  # the tokens the perplexity text became: differs where the tokenizer does
    "ppl_own_tokens",  # a pruned vocabulary's perplexity per its own token (``ppl``: per original token)
    "zs_mean",
]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        log.warning("skipping unreadable %s: %s", path, err)
        return None
    if not isinstance(data, dict):
        log.warning("skipping %s: not a JSON object", path)
        return None
    return data


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _recipe(report: dict[str, Any] | None, variant: str) -> Recipe | None:
    """The recipe of a variant: its pruning report's, or read from its name
    (``thanos.recipes.names.from_name``); None when neither is a valid recipe (a report of another tool, a
    name of no known method)."""
    data = (report or {}).get("recipe") or from_name(variant)
    if not isinstance(data, dict):
        return None
    try:
        return Recipe.from_report(data)
    except ValueError:
        return None


def _sparsity_fields(sparsity: Sparsity | None) -> dict[str, Any]:
    if sparsity is None:
        return {"sparsity": None, "kind": "unknown", "fraction": math.nan, "n": math.nan, "m": math.nan}
    return {
        "sparsity": str(sparsity),
        "kind": sparsity.kind,
        "fraction": sparsity.fraction,
        "n": sparsity.n if sparsity.structure.n_of_m else math.nan,
        "m": sparsity.m if sparsity.structure.n_of_m else math.nan,
    }


def tokenizers_differ(frame: pd.DataFrame) -> bool:
    """Whether some model's variants cut one perplexity text into different numbers of tokens (a pruned
    vocabulary): then the bits per byte are shown beside the perplexity (tables), or instead of it (the
    quality-against-size figure)."""
    scored = frame.dropna(subset=["bits_per_byte", "ppl_text_tokens"])
    return bool((scored.groupby(["model", "ppl_dataset", "seqlen"])["ppl_text_tokens"].nunique() > 1).any())


def _vocabulary_fields(vocabulary: dict[str, Any]) -> dict[str, Any]:
    """The row of a model whose vocabulary alone was pruned (its ``vocabulary.json``): the pattern, the
    parameters removed; method ``vocab`` (the tokens are chosen by their use on a text, by no method)."""
    try:
        sparsity = parse_sparsity(str(vocabulary.get("sparsity")))
    except ValueError:
        return {}
    fields = _sparsity_fields(sparsity) | {"method": "vocab", "structure": "vocab"}
    return fields | _vocabulary_removed(vocabulary, 0.0)


def _vocabulary_after(vocabulary: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A combined recipe's row whose last part is the vocabulary: its structure and the parameters removed
    from the input model, the vocabulary's share included."""
    removed = _float(row.get("params_removed"))
    fields = {"structure": f"{row['structure']}+vocab" if row.get("structure") else None}
    return fields | _vocabulary_removed(vocabulary, 0.0 if math.isnan(removed) else removed)


def _vocabulary_removed(vocabulary: dict[str, Any], removed: float) -> dict[str, Any]:
    """``params_removed`` of a model whose vocabulary was pruned after ``removed`` of the input model's
    parameters were (``vocabulary.json``'s parameters before and after it); {} where they are not known."""
    before, after = _float(vocabulary.get("parameters_before")), _float(vocabulary.get("parameters_after"))
    if before > 0 and not math.isnan(after):
        return {"params_removed": 1 - (1 - removed) * after / before}
    return {}


def _per_original_token(result: dict[str, Any] | None, dense: dict[str, Any] | None) -> dict[str, Any]:
    """``ppl`` of a model whose tokenizer cuts the perplexity text into other tokens than the dense model's
    (a pruned vocabulary): per token of the dense tokenization, from its bits per byte
    (``thanos.recipes.labels.per_original_token``), its own per token kept as ``ppl_own_tokens``; NaN
    without the dense model's result on the same text (a perplexity per token compares only models of one
    tokenization). {} where the tokens are the dense model's."""
    if not result or not dense or not tokens_differ(result, dense):
        return {}
    converted = per_original_token(result, dense)
    return {"ppl": math.nan if converted is None else converted, "ppl_own_tokens": _float(result.get("ppl"))}


def _eval_fields(eval_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    row: dict[str, Any] = {}
    tasks: dict[str, Any] = {}
    ppl = _read_json(eval_dir / "perplexity.json")
    if ppl is not None:
        row |= {"ppl": _float(ppl.get("ppl")), "seqlen": ppl.get("seqlen"), "ppl_dataset": ppl.get("dataset")}
        row |= {"bits_per_byte": _float(ppl.get("bits_per_byte")), "ppl_text_tokens": ppl.get("text_tokens")}
    zs = _read_json(eval_dir / "zeroshot.json")
    if zs is not None:
        row["zs_mean"] = _float(zs.get("mean_acc"))
        for task, metrics in (zs.get("tasks") or {}).items():
            if isinstance(metrics, dict):
                tasks[task] = metrics
    return row, tasks


Shown = Collection[str] | None  # the ``model/variant`` pairs a report shows (None: every one found)


def variants(results: str | Path, only: Shown = None) -> list[tuple[str, str, Path]]:
    """(model, variant, dir) for every dense/recipe directory under ``results`` that has something to show;
    ``only``: of these ``model/variant`` pairs alone (a workflow's report: its config's models and recipes,
    not one a config named before and dropped, evaluated under other settings)."""
    root = Path(results)
    if not root.is_dir():
        raise FileNotFoundError(f"results directory not found: {root}")
    found = []
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in NOT_MODELS):
        for var in sorted(p for p in model_dir.iterdir() if p.is_dir()):
            if (
                var.name == "dense"
                or (var / "model" / "pruning_report.json").is_file()
                or (var / "eval").is_dir()
            ):
                found.append((model_dir.name, var.name, var))
    return [item for item in found if only is None or f"{item[0]}/{item[1]}" in only]


def collect(results: str | Path, only: Shown = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two frames: one row per (model, variant) with recipe metadata, ppl and mean zero-shot accuracy;
    and one row per (model, variant, task) with ``acc``, ``acc_norm`` and stderrs."""
    rows, task_rows, evaluated = [], [], {}
    for model, variant, path in variants(results, only):
        if variant == "dense":
            row: dict[str, Any] = {"model": model, "recipe": "dense", "method": "dense", "sparsity": "0%"}
            row |= {"kind": "dense", "fraction": 0.0, "n": math.nan, "m": math.nan}
        else:
            report = _read_json(path / "model" / "pruning_report.json")
            recipe = _recipe(report, variant)
            row = {"model": model, "recipe": variant, "method": recipe.method if recipe else "unknown"}
            row |= _sparsity_fields(recipe.sparsity if recipe else None)
            vocabulary = _read_json(path / "model" / "vocabulary.json")
            alone = vocabulary is not None and (
                report is None or ("vocabulary" in report and not _combined(report))
            )
            if alone:  # a vocabulary alone: nothing else pruned (its report, where written, says so too)
                row |= _vocabulary_fields(vocabulary)
                report = None
            for key in ("alpha", "blocksize", "damp"):
                row[key] = _float(getattr(recipe, key, None))
            row["chain"] = recipe.chain if recipe else None
            row["profile"] = recipe.profile if recipe else "uniform"
            row["recovered"] = bool(recipe and recipe.recover is not None)
            row["distilled"] = bool(report and report.get("distillation"))
            if report is not None:
                row["overall_sparsity"] = _float(report.get("overall_sparsity"))
                row |= _structure_fields(report, row)
                secs = [_float(layer.get("seconds")) for layer in own_layers(report)]
                row["prune_seconds"] = sum(s for s in secs if not math.isnan(s)) if secs else math.nan
                if vocabulary is not None and not _combined(report).get("then"):
                    row |= _vocabulary_after(vocabulary, row)  # an earlier version's, not in its report
            search = _read_json(path / "model" / "search.json")
            if search is not None:  # a size (params:P): the request, and the recipe its search chose
                row |= {"sparsity": f"{search.get('request')}: {search.get('chosen')}", "kind": "combined"}
        fields, tasks = _eval_fields(path / "eval")
        row |= fields
        rows.append(row)
        evaluated[(model, variant)] = _read_json(path / "eval" / "perplexity.json")
        for task, metrics in tasks.items():
            task_rows.append(
                {"model": model, "recipe": variant, "task": task}
                | {k: _float(metrics.get(k)) for k in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr")}
            )
    for row in rows:  # a pruned vocabulary's perplexity, per token of the dense model's tokenization
        row |= _per_original_token(
            evaluated[(row["model"], row["recipe"])], evaluated.get((row["model"], DENSE))
        )
    frame = (
        pd.DataFrame(rows).reindex(columns=RECIPE_COLUMNS) if rows else pd.DataFrame(columns=RECIPE_COLUMNS)
    )
    task_frame = pd.DataFrame(
        task_rows, columns=["model", "recipe", "task", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr"]
    )
    return frame, task_frame


def _combined(report: dict[str, Any]) -> dict[str, Any]:
    """What the report of a combined recipe's last part records of the whole; {} for any other report."""
    return (report.get("workflow") or {}).get("combined") or {}


def _structure_fields(report: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """What a structural recipe's report says it removed: ``params_removed`` (1 - kept / original, the
    original being the input model's: a combined recipe's first part's) and ``structure``; a combined
    recipe's row takes its whole pattern (``sparsity``, ``kind`` ``combined``)."""
    combined = _combined(report)
    parts = combined_parts(report)
    fields: dict[str, Any] = {}
    if (counts := combined_parameters(report)) is not None:
        fields["params_removed"] = 1 - counts[1] / counts[0]
    kinds = [kind_of(str(part.get("sparsity"))) for part in parts]
    if all(kind in STRUCTURES for kind in kinds):
        fields["structure"] = "+".join(kinds)
    if combined:
        fields |= {"sparsity": combined.get("sparsity"), "kind": "combined", "fraction": math.nan}
    return fields


def own_layers(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-layer stats of the layers a recipe pruned. A distilled model's report (``distillation``)
    carries those of the model it was trained from, which pruned them: none are its own."""
    if report.get("distillation"):
        return []
    return [layer for layer in report.get("layers") or [] if isinstance(layer, dict)]


def collect_layers(results: str | Path, only: Shown = None) -> pd.DataFrame:
    """One row per pruned layer of every recipe (``own_layers``: none of a distilled one): model, recipe,
    method, sparsity, kind, alpha, block, layer, numel (weights), seconds, objective, device."""
    rows = []
    for model, variant, path in variants(results, only):
        if variant == "dense":
            continue
        report = _read_json(path / "model" / "pruning_report.json")
        if report is None:
            continue
        recipe = _recipe(report, variant)
        base = {"model": model, "recipe": variant, "method": recipe.method if recipe else "unknown"}
        fields = _sparsity_fields(recipe.sparsity if recipe else None)
        base |= {key: fields[key] for key in ("sparsity", "kind")}
        if combined := _combined(report):  # its layers are its last part's: shown under the whole recipe
            base |= {"sparsity": combined.get("sparsity"), "kind": "combined"}
        base["alpha"] = _float(recipe.alpha if recipe else None)
        for order, layer in enumerate(own_layers(report)):
            shape = layer.get("shape") or []
            numel = math.prod(int(s) for s in shape) if shape else math.nan
            rows.append(
                base
                | {
                    "block": layer.get("block"),
                    "layer": layer.get("layer"),
                    "order": order,
                    "numel": numel,
                    "seconds": _float(layer.get("seconds")),
                    "objective": _float(layer.get("objective")),
                    "device": layer.get("device"),
                }
            )
    columns = ["model", "recipe", "method", "sparsity", "kind", "alpha", "block", "layer", "order", "numel"]
    return pd.DataFrame(rows, columns=[*columns, "seconds", "objective", "device"])


def as_float(value: Any) -> float:
    """``float(value)``, NaN for None or anything that is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def sortable(value: float | None) -> float:
    """A sort key that puts missing values (None, NaN) first."""
    return -1.0 if value is None or math.isnan(value) else value


def pattern_sort_key(kind: str, fraction: float, m: float) -> tuple:
    """Paper order: unstructured, structured, then n:m (4:8 before 2:4), by fraction within each."""
    fraction = -1.0 if math.isnan(fraction) else fraction
    m = 0.0 if math.isnan(m) else m
    return (KIND_ORDER.get(kind, 9), fraction, -m)


def is_owl(profile: Any) -> bool:
    """Whether a recipe's blocks got OWL's sparsities (``profile: owl``); older results have no profile."""
    return profile == "owl"


def is_set(flag: Any) -> bool:
    """A cell of a yes/no column of ``collect``'s frame (``recovered``, ``distilled``): True, or 1.0 where
    pandas made the column float; a missing cell (older results have no such column) is no."""
    return flag is True or flag == 1.0


def labelled_recipes(frame: pd.DataFrame) -> pd.DataFrame:
    """Recipes of ``collect``'s frame with a known pattern, plus the display columns the tables and figures
    share: ``group`` (the sparsity pattern), ``group_label`` (``Unstructured 50%``, ``2:4``),
    ``alpha_shown``, ``label`` (the row label: ``Thanos (α=0.1)``, ``Wanda + OWL``, ``SparseGPT + recovery``,
    ``Thanos + distillation``, made unique within a group by block size, damping, then recipe name) and
    ``order`` (paper order: pattern, method, uniform before OWL, unrecovered before recovered, undistilled
    before distilled, alpha, block size)."""
    pruned = frame[(frame["method"] != "dense") & (frame["kind"] != "unknown")].copy()
    if pruned.empty:
        return pruned.assign(group=[], group_label=[], label=[], order=[])
    pruned["group_label"] = [
        pattern_label(k, f, s)
        for k, f, s in zip(pruned["kind"], pruned["fraction"], pruned["sparsity"], strict=True)
    ]
    pruned["group"] = pruned["sparsity"].astype(str)
    pruned["alpha_shown"] = [
        shown_alpha(m, a) for m, a in zip(pruned["method"], pruned["alpha"].astype(float), strict=True)
    ]
    pruned["label"] = [
        row_label(m, k, s, a)
        for m, k, s, a in zip(
            pruned["method"], pruned["kind"], pruned["sparsity"], pruned["alpha_shown"], strict=True
        )
    ]
    owl = [is_owl(p) for p in pruned["profile"]]
    recovered = [is_set(r) for r in pruned["recovered"]]
    distilled = [is_set(d) for d in pruned["distilled"]]
    pruned["label"] = [
        variant_label(lab, o, r, d)
        for lab, o, r, d in zip(pruned["label"], owl, recovered, distilled, strict=True)
    ]
    # disambiguate rows of one group that share a label: blocksize, then damping, then recipe name
    for extra, fmt in (("blocksize", "B={:g}"), ("damp", "damp={:g}"), ("recipe", "{}")):
        dup = pruned.groupby(["group", "label"])[extra].transform(lambda s: s.astype(str).nunique() > 1)
        if dup.any():
            pruned.loc[dup, "label"] = [
                f"{lab}, {fmt.format(v)}" if not (isinstance(v, float) and math.isnan(v)) else lab
                for lab, v in zip(pruned.loc[dup, "label"], pruned.loc[dup, extra], strict=True)
            ]
    pruned["order"] = [
        (*pattern_sort_key(k, f, m), METHOD_ORDER.get(meth, 9), o, r, d, sortable(a), sortable(b), lab)
        for k, f, m, meth, o, r, d, a, b, lab in zip(
            pruned["kind"],
            pruned["fraction"],
            pruned["m"].astype(float),
            pruned["method"],
            owl,
            recovered,
            distilled,
            pruned["alpha_shown"],
            pruned["blocksize"].astype(float),
            pruned["label"],
            strict=True,
        )
    ]
    return pruned
