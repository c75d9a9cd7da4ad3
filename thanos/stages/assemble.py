"""Assemble stage: original tensors + pruned layers -> a Hugging Face model directory.

The output directory holds the original config, generation config and tokenizer files (copied byte for byte),
the weights as safetensors (one ``model.safetensors``, or shards with ``model.safetensors.index.json``; pruned
layers taken from ``ROOT/block{l}/{layer}.safetensors``, every other tensor copied unchanged, original
dtypes); ``thanos.stages.describe.card.describe_model`` writes the achieved sparsity (``sparsity.json``) and
the model card ``README.md`` (``config.json`` stays the input's); last, ``pruning_report.json``, with the
calibration provenance, package versions and intermediates' disk use (``thanos.stages.describe.provenance``)
and the size and sha256 of every other file (``thanos.files.digests``: what later readers check the model
against). A ``neurons:p`` recipe's model is written compact by default (``thanos.stages.compact``: the
removed MLP neurons cut out, ``config.json`` with the kept width); the layers such a recipe leaves unchanged
are not listed as pruned. Tensors are
streamed shard by shard (``safe_open`` + ``save_file``): peak memory is one output shard, never the whole
model. The directory is written atomically and its bytes depend only on the inputs (no timestamps; tensors in
a fixed order).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from thanos.data.safetensors_io import open_safetensors
from thanos.files import digests
from thanos.files.atomic import atomic_path
from thanos.files.fingerprint import check_unchanged
from thanos.files.layout import CHAIN_SUMMARY, RECOVERY_RECORD, WEIGHT_SUFFIXES, pruned_block_name
from thanos.files.pruned_layers import STAMP, block_layers, describe, mismatch, unfinished
from thanos.models.checkpoint import INDEX_FILE
from thanos.models.handle import ModelHandle, as_handle
from thanos.models.real import REPORT as REAL_REPORT
from thanos.recipes.recipe import Recipe
from thanos.stages.compact import Compaction, compaction
from thanos.stages.depth.blocks import map_tensors, removal
from thanos.stages.describe.card import describe_model
from thanos.stages.describe.provenance import RunRecord, calibration_provenance, disk_usage, package_versions
from thanos.stages.owl_plan import owl_blocks

log = logging.getLogger(__name__)

# the fix of a damaged pruned layer file
PRUNE_AGAIN = (
    "delete it and run the same command again: the layer is pruned again (the workflow: its prune job)"
)
# what the pruning report keeps of each block's recovery record
RECOVERY_FIELDS = ("loss_before", "loss_after", "epochs_kept", "val_losses", "seconds", "peak_rss_mib")

# not copied from the original: its weight index (ours replaces it), and our own reports about that
# model (a demo model's training report, a real model's conversion report: they describe the dense model)
SKIP_FILES = {
    INDEX_FILE,
    "pytorch_model.bin.index.json",
    "pruning_report.json",
    "train_report.json",
    REAL_REPORT,
}
DEFAULT_MAX_SHARD_BYTES = 2 * 1024**3
DTYPE_BYTES = {"F64": 8, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1, "I8": 1}  # others: 2


def parse_size(text: str | int) -> int:
    """'2GB', '500MB', '1GiB', '123' -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"cannot parse size {text!r} (examples: 2GB, 500MB, 1GiB)")
    number, unit = float(match.group(1)), (match.group(2) or "").upper()
    scale = {
        "": 1,
        "B": 1,
        "K": 1e3,
        "KB": 1e3,
        "M": 1e6,
        "MB": 1e6,
        "G": 1e9,
        "GB": 1e9,
        "T": 1e12,
        "TB": 1e12,
    }
    scale |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KI": 2**10, "MI": 2**20, "GI": 2**30}
    if unit not in scale:
        raise ValueError(f"cannot parse size {text!r} (examples: 2GB, 500MB, 1GiB)")
    return int(number * scale[unit])


def pruned_layers(root: Path) -> list[tuple[int, str, Path]]:
    """(block, layer, file) for every ROOT/block{l}/{layer}.safetensors, in (block, layer) order."""
    if not root.is_dir():
        raise FileNotFoundError(f"pruned root {root} does not exist; run the prune stage first")
    found = []
    for block_dir in root.iterdir():
        match = re.fullmatch(r"block(\d+)", block_dir.name)
        if not match or not block_dir.is_dir():
            continue
        for file in block_dir.glob("*.safetensors"):
            if file.name.startswith("."):
                continue
            found.append((int(match.group(1)), file.name[: -len(".safetensors")], file))
    if not found:
        raise FileNotFoundError(f"no pruned layers under {root} (expected block{{l}}/{{layer}}.safetensors)")
    return sorted(found, key=lambda t: (t[0], t[1]))


def tensor_name(
    block: int, layer: str, names: list[str], block_prefix: str | None, views: dict | None = None
) -> str:
    """The original tensor name of a pruned layer's weight (a view's name for one expert of a fused
    tensor: ``views``, ``ModelLayout.expert_views``)."""
    if block_prefix:
        name = block_prefix.format(i=block, l=block, block=block) + f"{layer}.weight"
        if name not in names and name not in (views or {}):
            raise ValueError(f"pruned layer block {block} {layer}: tensor {name} is not in the model")
        return name
    suffix = f".{block}.{layer}.weight"
    matches = [n for n in names if n.endswith(suffix)]
    if len(matches) != 1:
        raise ValueError(f"pruned layer block {block} {layer}: {len(matches)} tensors end with {suffix}")
    return matches[0]


def shard_names(names: list[str], sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
    """``names`` cut in order into shards of at most ``max_bytes`` (a larger tensor gets its own shard)."""
    shards: list[list[str]] = [[]]
    current = 0
    for name in names:
        if shards[-1] and current + sizes[name] > max_bytes:
            shards.append([])
            current = 0
        shards[-1].append(name)
        current += sizes[name]
    return shards


def assemble(
    model: str | os.PathLike | ModelHandle,
    pruned_root: str | os.PathLike,
    recipe: Recipe,
    out: str | os.PathLike,
    model_info: str | os.PathLike | None = None,
    owl: str | os.PathLike | None = None,
    max_shard_size: str | int = DEFAULT_MAX_SHARD_BYTES,
    record: RunRecord | None = None,
    depth: str | os.PathLike | None = None,
    describe: bool = True,
) -> dict[str, Any]:
    """Write the pruned HF model directory ``out``; return the pruning report.

    ``describe`` false: the model is written without its card, ``sparsity.json`` and the digests of its
    files (a size's table point, measured where it is assembled and deleted: ``thanos.runner.size_search``).

    ``depth``: a ``depth:k`` recipe's ``depth.json`` (``thanos.stages.depth.blocks``): the model is written
    without the blocks it removes, the others renumbered; no layer is pruned (``pruned_root`` is not read).

    ``owl``: an OWL recipe's ``owl.json`` (``thanos.stages.owl_plan``): the report's ``owl`` holds it, with
    the sparsity of every block counted on the written weights beside the planned one.

    ``record``: what the report records of the run (``RunRecord``: the model's name, the calibration
    store's provenance, the intermediates' disk use, how the workflow ran).

    Everything is read and checked before anything is written, so a bad input leaves no output behind.
    With ``model_info`` (the workflow always passes it), the model must be the one it describes and every
    layer it lists must have a pruned file of ``recipe`` (``check_against_model_info``).
    """
    record = record or RunRecord()
    handle = as_handle(model, model_info)
    model_dir = handle.path
    info = json.loads(Path(model_info).read_text()) if model_info else {}
    max_bytes = parse_size(max_shard_size)
    sources = handle.weight_map
    provenance = calibration_provenance(record.calibration)
    config = json.loads((model_dir / "config.json").read_text())
    names, replace, layers, compact = _tensors_to_write(
        handle, sorted(sources), pruned_root, recipe, info, model_info, depth
    )
    fused = fused_parts(replace, info)
    sizes = tensor_sizes(names, sources, replace, compact, fused)
    shards = shard_names(names, sizes, max_bytes)
    total, removed = count_pruned(layers, replace)
    owl_report = owl_blocks(owl, layers, recipe) if owl is not None else None

    out = Path(out)
    with atomic_path(out, is_dir=True) as tmp:
        write_shards(tmp, shards, sources, replace, sizes, compact, fused)
        copy_model_files(model_dir, tmp)
        if compact is not None:
            config_file = tmp / "config.json"
            config_file.write_text(compact.config(config_file.read_text()))
        model_facts = _model_facts(record, handle.reference, config, info)
        report = _report(recipe, record, model_facts, layers, (total, removed), provenance)
        if compact is not None:
            report["compact"] = compact.facts
        if depth is not None:
            report["depth"] = json.loads(Path(depth).read_text())
        if owl_report is not None:
            report["owl"] = owl_report
        if recipe.recover is not None:
            report["recovery"] = recovery_report(Path(pruned_root), recipe, int(info.get("num_blocks") or 0))
        if describe:
            describe_model(tmp, report)  # sparsity.json, README.md model card
            report["files"] = digests.record(tmp)  # what every later reader checks the model against
        (tmp / digests.REPORT).write_text(json.dumps(report, indent=2, default=str) + "\n")
    log.info(
        "assembled %s: %d tensors in %d shard(s), %d pruned layers, overall sparsity %.4f",
        out,
        len(names),
        len(shards),
        len(layers),
        report["overall_sparsity"],
    )
    return report


def _tensors_to_write(
    model: ModelHandle,
    names: list[str],
    pruned_root: str | os.PathLike,
    recipe: Recipe,
    info: dict[str, Any],
    info_path: str | os.PathLike | None,
    depth: str | os.PathLike | None,
) -> tuple[list[str], dict[str, Path], list[dict], Compaction | None]:
    """(the output's tensor names, {tensor name: pruned layer file}, the report's pruned layers, the
    compaction or block removal), checked against the model info ``info`` (read from ``info_path``): a
    ``depth`` recipe's kept tensors (no layer replaced), else every pruned layer of ``recipe`` under
    ``pruned_root``; with a compact recipe, the compaction of the removed neurons or heads."""
    compact = None
    if depth is not None:
        if info:
            check_unchanged(model.path, info.get("fingerprint"), str(info_path))
        replace, layers = map_tensors(depth), []
        compact = removal(model, names, depth, info or None)
        names = [name for name in names if compact.keeps(name)]
    else:
        check_against_model_info(model.path, Path(pruned_root), recipe, info, info_path)
        replace, layers = pruned_tensors(Path(pruned_root), names, info, recipe)
    if recipe.compact:
        compact = compaction(model, pruned_root, names, info, recipe.sparsity)
    return names, replace, layers, compact


def _model_facts(
    record: RunRecord, model: str | os.PathLike, config: dict[str, Any], info: dict[str, Any]
) -> dict[str, Any]:
    """The report's ``model``: its name, path, type, blocks and dtype."""
    return {
        "name": record.model_name,
        "path": str(model),
        "model_type": config.get("model_type"),
        "num_blocks": info.get("num_blocks"),
        "dtype": info.get("dtype", config.get("torch_dtype") or config.get("dtype")),
    }


def _report(
    recipe: Recipe,
    record: RunRecord,
    model: dict[str, Any],
    layers: list[dict],
    counts: tuple[int, int],
    provenance: dict[str, Any] | None,
) -> dict[str, Any]:
    """The pruning report (before the model card's and the files' parts): the recipe, the model, every
    pruned layer, the pruned and removed weights (``counts``), the calibration's provenance, package versions,
    the intermediates' disk use and how the workflow ran."""
    total, removed = counts
    usage = disk_usage(list(record.intermediates))
    return {
        "recipe": recipe.to_dict(),
        "model": model,
        "layers": layers,
        "num_pruned_layers": len(layers),
        "pruned_parameters": total,
        "overall_sparsity": removed / total if total else 0.0,
        "calibration": provenance,
        "versions": package_versions(),
        "intermediates_bytes": sum(usage.values()),
        "intermediates": usage,
        "workflow": record.workflow,
    }


def recovery_report(root: Path, recipe: Recipe, num_blocks: int) -> dict[str, Any]:
    """A recovered recipe's options and every block's ``recovery.json`` (losses, epochs kept, seconds, peak
    memory), from ``root`` (``PRUNED/recovered``); a block without its record is refused, named."""
    blocks = []
    for block in range(num_blocks):
        record = root / pruned_block_name(block) / RECOVERY_RECORD
        if not record.is_file():
            raise ValueError(f"{record} is missing: block {block} was not recovered; run the recipe again")
        data = json.loads(record.read_text())
        blocks.append({key: data[key] for key in RECOVERY_FIELDS} | {"block": block})
    return {"options": recipe.recover.to_dict(), "blocks": blocks}


def check_against_model_info(
    model_dir: Path, root: Path, recipe: Recipe, info: dict[str, Any], info_path: str | os.PathLike | None
) -> None:
    """With a ``model_info.json``: the model is still the one it describes (its input fingerprint), and
    every layer it lists, in every block, has a finished pruned file of ``recipe`` under ``root`` (a
    missing one would be published unpruned). Raises naming the changed files or the layers."""
    if not info:  # the layers found that record their pruning are of the recipe (the card names it)
        problems = {
            (block, layer): why
            for block, layer, file in (pruned_layers(root) if root.is_dir() else [])
            if "method" in _stats(file)
            and (why := mismatch(file.parent, layer, recipe.to_dict())) is not None
        }
        if problems:
            raise ValueError(
                f"{root}: {len(problems)} pruned layer(s) are not of recipe {recipe.name} "
                f"({recipe.to_dict()['method']} {recipe.sparsity}), and the model would be published as "
                f"its result: {describe(problems)}; give the recipe that pruned them, or --pruned-root of "
                "this recipe's layers"
            )
        return
    check_unchanged(model_dir, info.get("fingerprint"), str(info_path))
    if not root.is_dir():
        return  # pruned_layers says so
    problems = recipe_unfinished(root, recipe, info)
    if not problems:
        return
    if (root / CHAIN_SUMMARY).is_file():
        fix = f"delete {root / CHAIN_SUMMARY} and run the workflow again: the recipe's job recomputes them"
    else:
        blocks = sorted({block for block, _ in problems})
        dirs = ", ".join(str(root / pruned_block_name(block)) for block in blocks)
        fix = f"delete {dirs} and run the workflow again: their prune jobs recompute them"
    raise ValueError(
        f"{root}: {len(problems)} pruned layer(s) of recipe {recipe.name} are missing or not of this recipe "
        f"and would be published unpruned: {describe(problems)}; {fix}"
    )


def recipe_unfinished(root: Path, recipe: Recipe, info: dict[str, Any]) -> dict[tuple[int, str], str]:
    """{(block, layer): why} for each layer of ``model_info.json`` (``info``) that ``recipe`` prunes and
    that is not finished under ``root`` (``thanos.files.pruned_layers.unfinished``)."""
    layers = lambda block: recipe.layers(block_layers(info, block), info["layers"])  # noqa: E731
    return unfinished(root, int(info["num_blocks"]), layers, recipe.to_dict())


def _stats(file: Path) -> dict[str, Any]:
    """A pruned layer's stats (its ``.json`` beside ``file``), {} where it has none readable."""
    try:
        stats = json.loads(file.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}
    return stats if isinstance(stats, dict) else {}


def pruned_tensors(
    root: Path, names: list[str], info: dict[str, Any], recipe: Recipe | None = None
) -> tuple[dict[str, Path], list[dict]]:
    """The pruned layers under ``root``: {original tensor name: file} and one report entry per layer (its
    stats json, if any), in block order and, within a block, in the model's layer order. With a model
    info, only the layers the recipe prunes: a file left by an earlier run of a layer the recipe now
    excludes is not published."""
    replace: dict[str, Path] = {}
    layers = []
    order = {name: i for i, name in enumerate(info.get("layers", []))}
    wanted = None
    if info.get("layers") and recipe is not None:
        wanted = {
            (block, layer)
            for block in range(int(info["num_blocks"]))
            for layer in recipe.layers(block_layers(info, block), info["layers"])
        }
    found = sorted(pruned_layers(root), key=lambda t: (t[0], order.get(t[1], len(order)), t[1]))
    views = expert_views(info)
    for block, layer, file in found:
        if wanted is not None and (block, layer) not in wanted:
            continue
        name = tensor_name(block, layer, names, info.get("block_prefix"), views)
        stats_file = file.with_suffix(".json")
        stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        if stats.get("kept_dense"):  # a layer a neurons recipe does not prune: not in the report's layers,
            if "recovery" in stats:  # and written as recovery trained it, or as the original tensor
                replace[name] = file
            continue
        replace[name] = file
        stats.pop(STAMP, None)  # where the file was, not what it holds: not part of the report
        entry = {"block": block, "layer": layer, "tensor": name, **stats}
        if name in views:  # where the expert's matrix is written: for the counts on the written weights
            source, expert, transposed = views[name]
            entry["fused"] = {"tensor": source, "expert": expert, "transposed": transposed}
        layers.append(entry)
    return replace, layers


def expert_views(info: dict[str, Any]) -> dict[str, tuple[str, int, bool]]:
    """The model's layers that are one expert's slice of a fused tensor (``ModelLayout.expert_views``)."""
    from thanos.models.layout import ModelLayout

    layout = ModelLayout.from_info(info) if info.get("fused_experts") else None
    return layout.expert_views() if layout is not None else {}


# a fused tensor's replaced experts: [(expert, transposed, the pruned layer's file)]
FusedParts = dict[str, list[tuple[int, bool, Path]]]


def fused_parts(replace: dict[str, Path], info: dict[str, Any]) -> FusedParts:
    """The pruned experts of every fused tensor, by the fused tensor's name."""
    parts: FusedParts = {}
    for name, (source, expert, transposed) in expert_views(info).items():
        if name in replace:
            parts.setdefault(source, []).append((expert, transposed, replace[name]))
    return parts


def tensor_sizes(
    names: list[str],
    sources: dict[str, Path],
    replace: dict[str, Path],
    compact: Compaction | None = None,
    fused: FusedParts | None = None,
) -> dict[str, int]:
    """Bytes of every output tensor (compacted, with ``compact``), from the headers only; a pruned layer
    whose shape or dtype differs from the original's (an expert's slice of a ``fused`` tensor) is
    refused."""
    sizes: dict[str, int] = {}
    for name in names:
        with open_safetensors(sources[name]) as handle:
            sl = handle.get_slice(name)
            shape, dtype = list(sl.get_shape()), sl.get_dtype()
        if name in replace:
            check_replacement(replace[name], name, shape, dtype)
        for expert, transposed, file in (fused or {}).get(name, []):
            rows, columns = shape[1:]
            check_replacement(file, f"{name}[{expert}]", [columns, rows] if transposed else shape[1:], dtype)
        if compact is not None:
            shape = compact.shape(name, shape)
        sizes[name] = math.prod(shape) * DTYPE_BYTES.get(dtype, 2)
    return sizes


def check_replacement(file: Path, name: str, shape: list[int], dtype: str) -> None:
    """``file`` holds a tensor ``weight`` with the original tensor's shape and dtype."""
    with open_safetensors(file) as handle:
        if "weight" not in handle.keys():  # noqa: SIM118
            raise ValueError(f"{file} has no tensor 'weight'")
        psl = handle.get_slice("weight")
        if list(psl.get_shape()) != shape or psl.get_dtype() != dtype:
            raise ValueError(
                f"{file}: shape/dtype {psl.get_shape()}/{psl.get_dtype()} differ from the "
                f"original {name} {shape}/{dtype}; {PRUNE_AGAIN}"
            )


def count_pruned(layers: list[dict], replace: dict[str, Path]) -> tuple[int, int]:
    """(parameters, removed parameters) of the pruned layers; completes each report entry with its
    zeros, and its shape and achieved sparsity when the stats did not give them."""
    total = removed = 0
    for entry in layers:
        with open_safetensors(replace[entry["tensor"]]) as handle:
            w = handle.get_tensor("weight")
        bad = int((~w.isfinite()).sum()) if w.is_floating_point() else 0
        if bad:
            raise ValueError(
                f"{replace[entry['tensor']]} (tensor {entry['tensor']}) holds {bad} NaN or Inf values; "
                + PRUNE_AGAIN
            )
        zeros = int((w == 0).sum())
        entry.setdefault("shape", list(w.shape))
        entry["zeros"] = zeros
        entry.setdefault("achieved_sparsity", zeros / w.numel())
        total += w.numel()
        removed += round(float(entry["achieved_sparsity"]) * w.numel())
    return total, removed


def write_shards(
    tmp: Path,
    shards: list[list[str]],
    sources: dict[str, Path],
    replace: dict[str, Path],
    sizes: dict[str, int],
    compact: Compaction | None = None,
    fused: FusedParts | None = None,
) -> None:
    """The weights as safetensors shards, one shard in memory at a time: a single ``model.safetensors``,
    or several shards and ``model.safetensors.index.json`` (as ``save_pretrained`` writes them); with
    ``compact``, the removed neurons or heads cut out and each tensor written under its new name; a
    ``fused`` tensor with its pruned experts written into their slices (in the input's layout)."""
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards):
        shard_name = (
            "model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        )
        tensors = {}
        for name in shard:
            source, key = (replace[name], "weight") if name in replace else (sources[name], name)
            with open_safetensors(source) as handle:
                tensor = handle.get_tensor(key).contiguous()
            for expert, transposed, file in (fused or {}).get(name, []):
                with open_safetensors(file) as handle:
                    W = handle.get_tensor("weight")
                tensor[expert] = W.T if transposed else W
            # a kept block's new name may be a removed or later block's old one: never written over
            written = name
            if compact is not None:
                tensor, written = compact.apply(name, tensor), compact.written_name(name)
            tensors[written] = tensor
            weight_map[written] = shard_name
        save_file(tensors, str(tmp / shard_name), metadata={"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def copy_model_files(model_dir: Path, tmp: Path) -> None:
    """Config, generation config, tokenizer and other non-weight files of the model, byte for byte."""
    for file in sorted(model_dir.iterdir()):
        if (
            file.is_file()
            and not file.name.startswith(".")
            and file.name not in SKIP_FILES
            and not file.name.endswith(WEIGHT_SUFFIXES)
        ):
            shutil.copyfile(file, tmp / file.name)
