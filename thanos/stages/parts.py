"""The workflow's jobs of the recipes ``thanos prune-model`` runs in one call: a ``depth:k`` recipe's block
choice, and each part of a combined recipe (``depth:4+neurons:0.3``). Both call the engine
(``thanos.stages.engine.run_recipe``), the code ``thanos prune-model`` runs, so they write the same files.

- ``choose_blocks``: the block choice and the maps of a ``depth:k`` recipe (``depth.json``), from the dense
  chain's stores the workflow's own jobs wrote (given, never computed here); its ``assemble`` job then writes
  the shortened model.
- ``run_part``: one part of a combined recipe, every stage of it in one process on the model the part before
  wrote, in its own working directory ``results/{model}/{recipe}/parts/{i}`` laid out as ``thanos
  prune-model``'s (``thanos.files.layout.Layout``, no calibration key), so that a killed part resumes where
  it stopped (the engine's ledger). The first part reads the workflow's calibration tokens and dense chain
  of the input model (``Given``); the later parts calibrate on the model they read, as ``thanos prune-model``
  runs them. The last part's report records the whole recipe (``combined_record``), as ``thanos
  prune-model``'s does.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.files.layout import CHAIN_SUMMARY, Layout, StoreKind
from thanos.files.ledger import remove
from thanos.recipes.recipe import Recipe
from thanos.stages.engine import Calibration, RecipeFiles, RunOptions, Steps, run_recipe


@dataclass(frozen=True)
class Given:
    """What the workflow's own jobs wrote of the input model, which a first part reads instead of computing
    it: ``model_info.json``, the calibration tokens and the dense chain's stores (None: not needed)."""

    model_info: Path
    tokens: Path | None = None
    dense_dir: Path | None = None


def choose_blocks(
    model: str, recipe: Recipe, dense_dir: Path, model_info: Path, out: Path, device: str = "auto"
) -> Steps:
    """A ``depth:k`` recipe's ``depth.json`` (``out``; its maps in ``depth_maps/`` beside it) from the dense
    chain's stores in ``dense_dir`` (inputs of every block and the last block's output), as ``thanos
    prune-model`` chooses them."""
    if not recipe.sparsity.structure.whole_blocks:
        raise ValueError(f"{recipe.name}: {recipe.sparsity} removes no whole block; only depth:K recipes do")
    files = RecipeFiles(
        out.parent, out.parent / CHAIN_SUMMARY, model_info=model_info, dense_dir=dense_dir, depth=out
    )
    return run_recipe(model, recipe, files, options=RunOptions(device))


def part_files(work: Path, recipe: Recipe, out: Path, given: Given | None) -> RecipeFiles:
    """Where a part runs: ``thanos prune-model``'s layout of ``work`` (``results/{model}/{recipe}/parts/
    {i}``), its model written to ``out``, with what the workflow ``given`` in place of its own."""
    layout = Layout(str(work.parent), sequential=recipe.sequential)
    files = dataclasses.replace(RecipeFiles.of(layout, work.name, recipe), model_dir=out)
    if given is None:
        return files
    return dataclasses.replace(
        files, model_info=given.model_info, tokens=given.tokens, dense_dir=given.dense_dir
    )


def run_part(
    model: str,
    recipe: Recipe,
    work: Path,
    out: Path,
    calibration: Calibration | None,
    given: Given | None,
    options: RunOptions,
) -> Steps:
    """One part of a combined recipe on ``model`` (the input model, or the part before's model): every stage
    missing or out of date, its model written to ``out``. ``given``: the first part's upstream outputs of
    the workflow's jobs (``calibration`` None); else ``calibration`` and every stage computed in ``work``.
    Retention: the stores of the kinds ``options.drop`` names are deleted once ``out`` is written."""
    if (given is None) == (calibration is None):
        raise ValueError("a part reads either the workflow's stores (given) or a calibration of its own")
    files = part_files(work, recipe, out, given)
    if options.record is not None:  # its calibration's provenance and intermediates, as prune-model's
        paths = (files.pruned_root, files.tokens, files.dense_dir, files.chain_dir)
        record = dataclasses.replace(
            options.record, calibration=files.tokens, intermediates=tuple(p for p in paths if p)
        )
        options = dataclasses.replace(options, record=record)
    steps = run_recipe(model, recipe, files, calibration, options)
    if given is None and files.dense_dir is not None:  # its own dense chain: only its reruns read it
        _drop(files.dense_dir, options.drop)
    return steps


def _drop(chain_dir: Path, kinds: tuple[StoreKind, ...]) -> None:
    """Delete a chain's stores of ``kinds`` (retention: ``activations``, ``hessians`` false)."""
    for kind in kinds:
        for store in chain_dir.glob(f"{kind}_*.zarr"):
            remove(store)


def combined_record(sparsity: str, base_model: str, earlier: list[Path]) -> dict[str, Any]:
    """What a later part's report records of the combined recipe so far (``workflow.combined``; the last
    part's: the whole), built here for ``thanos prune-model``'s parts and the workflow's alike: the pattern,
    the model the first part read and each earlier part (``earlier``: the models they wrote, in order): the
    model it read, its model, its pattern and shape change read from its model's report."""
    parts = []
    for read, written in zip([base_model, *map(str, earlier)], earlier, strict=False):
        report = json.loads((written / "pruning_report.json").read_text())
        recipe = Recipe.from_report(report["recipe"])
        part = {"sparsity": str(recipe.sparsity), "model": read, "out": str(written)}
        part["compact"] = report.get("compact")
        if recipe.block_map is not None:  # a depth part: with or without its maps
            part["block_map"] = recipe.block_map
        parts.append(part)
    return {"sparsity": sparsity, "base_model": base_model, "parts": parts}
