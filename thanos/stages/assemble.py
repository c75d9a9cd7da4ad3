"""Assemble stage: original tensors + pruned layers -> a Hugging Face model directory.

The output directory holds the original config, generation config and tokenizer files (copied byte for
byte), the weights as sharded safetensors with ``model.safetensors.index.json`` (pruned layers taken from
``ROOT/block{l}/{layer}.safetensors``, every other tensor copied unchanged, original dtypes) and
``pruning_report.json``; last, ``thanos.model_card.describe_model`` adds the sparsity metadata to
``config.json`` and writes the model card ``README.md``. Tensors are streamed shard by shard
(``safe_open`` + ``save_file``): peak memory is one output shard, never the whole model. The directory
is written atomically and its bytes depend only on the inputs (no timestamps; tensors in a fixed order).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import re
import shutil
from pathlib import Path
from typing import Any

from safetensors import safe_open
from safetensors.torch import save_file

from thanos.atomic import atomic_path
from thanos.model_card import describe_model

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".ckpt")
SKIP_FILES = {"model.safetensors.index.json", "pytorch_model.bin.index.json", "pruning_report.json"}
DEFAULT_MAX_SHARD_BYTES = 2 * 1024**3
VERSION_PACKAGES = ("torch", "transformers", "safetensors", "zarr", "numpy", "snakemake", "thanos-prune")


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


def resolve_model_dir(model: str | os.PathLike) -> Path:
    """A local HF directory, or a hub id resolved to its local snapshot (download if allowed)."""
    path = Path(model)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(model)))
    except Exception as err:  # noqa: BLE001 - any hub failure becomes one clear error
        raise FileNotFoundError(
            f"model {model!r} is neither a local directory nor a downloadable hub id ({err}); "
            "point models.<name>.path at a local Hugging Face directory"
        ) from err


def original_tensors(model_dir: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (sorted by name)."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_dir / weight_map[name] for name in sorted(weight_map)}
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no safetensors weights in {model_dir}; convert the model first "
            "(AutoModelForCausalLM.from_pretrained(...).save_pretrained(dir, safe_serialization=True))"
        )
    names: dict[str, Path] = {}
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                names[name] = file
    return dict(sorted(names.items()))


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


def tensor_name(block: int, layer: str, names: list[str], block_prefix: str | None) -> str:
    """The original tensor name of a pruned layer's weight."""
    if block_prefix:
        name = block_prefix.format(i=block, l=block, block=block) + f"{layer}.weight"
        if name not in names:
            raise ValueError(f"pruned layer block {block} {layer}: tensor {name} is not in the model")
        return name
    suffix = f".{block}.{layer}.weight"
    matches = [n for n in names if n.endswith(suffix)]
    if len(matches) != 1:
        raise ValueError(f"pruned layer block {block} {layer}: {len(matches)} tensors end with {suffix}")
    return matches[0]


def load_recipe(recipe: str | os.PathLike | dict) -> dict[str, Any]:
    """A recipe from a dict, a JSON file path or inline JSON text (starting with '{')."""
    if isinstance(recipe, dict):
        return dict(recipe)
    text = str(recipe).strip()
    if text.startswith("{"):
        return json.loads(text)
    path = Path(text)
    if not path.is_file():
        raise FileNotFoundError(f"recipe JSON {path} not found (pass a file or inline JSON)")
    return json.loads(path.read_text())


def calibration_provenance(tokens: str | os.PathLike | None) -> dict[str, Any] | None:
    if tokens is None:
        return None
    import zarr

    path = Path(tokens)
    if not path.exists():
        raise FileNotFoundError(f"calibration store {path} not found")
    attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    if not attrs.get("complete"):
        raise ValueError(
            f"calibration store {path} is incomplete (no complete attribute); delete it and rerun"
        )
    return attrs


def disk_usage(paths: list[str | os.PathLike]) -> dict[str, int]:
    usage = {}
    for p in paths:
        path = Path(p)
        total = 0
        if path.is_file():
            total = path.stat().st_size
        elif path.is_dir():
            for dirpath, _, files in os.walk(path):
                for f in files:
                    with_path = Path(dirpath) / f
                    if not with_path.is_symlink():
                        total += with_path.stat().st_size
        usage[str(p)] = total
    return usage


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in VERSION_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["thanos"] = versions.pop("thanos-prune")
    return versions


def _shards(names: list[str], sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
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
    model: str | os.PathLike,
    pruned_root: str | os.PathLike,
    recipe: str | os.PathLike | dict,
    out: str | os.PathLike,
    calibration: str | os.PathLike | None = None,
    intermediates: list[str | os.PathLike] | None = None,
    model_info: str | os.PathLike | None = None,
    model_name: str | None = None,
    max_shard_size: str | int = DEFAULT_MAX_SHARD_BYTES,
) -> dict[str, Any]:
    """Write the pruned HF model directory ``out``; return the pruning report."""
    import torch

    model_dir = resolve_model_dir(model)
    root = Path(pruned_root)
    recipe_dict = load_recipe(recipe)
    info = json.loads(Path(model_info).read_text()) if model_info else {}
    max_bytes = parse_size(max_shard_size)
    sources = original_tensors(model_dir)
    names = list(sources)
    provenance = calibration_provenance(calibration)
    config = json.loads((model_dir / "config.json").read_text())

    # pruned tensors and their stats
    replace: dict[str, Path] = {}
    layers = []
    order = {name: i for i, name in enumerate(info.get("layers", []))}
    found = sorted(pruned_layers(root), key=lambda t: (t[0], order.get(t[1], len(order)), t[1]))
    for block, layer, file in found:
        name = tensor_name(block, layer, names, info.get("block_prefix"))
        replace[name] = file
        stats_file = file.with_suffix(".json")
        stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
        layers.append({"block": block, "layer": layer, "tensor": name, **stats})

    # sizes and metadata of every output tensor, without reading the data
    sizes: dict[str, int] = {}
    dtypes: dict[str, Any] = {}
    for name in names:
        with safe_open(sources[name], framework="pt") as handle:
            sl = handle.get_slice(name)
            shape, dtype = list(sl.get_shape()), sl.get_dtype()
        if name in replace:
            with safe_open(replace[name], framework="pt") as handle:
                if "weight" not in handle.keys():  # noqa: SIM118
                    raise ValueError(f"{replace[name]} has no tensor 'weight'")
                psl = handle.get_slice("weight")
                if list(psl.get_shape()) != shape or psl.get_dtype() != dtype:
                    raise ValueError(
                        f"{replace[name]}: shape/dtype {psl.get_shape()}/{psl.get_dtype()} differ from the "
                        f"original {name} {shape}/{dtype}; delete it and rerun its prune job"
                    )
        n = 1
        for s in shape:
            n *= s
        sizes[name] = n * {"F64": 8, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1, "I8": 1}.get(dtype, 2)
        dtypes[name] = dtype
    shards = _shards(names, sizes, max_bytes)

    # report: overall sparsity of pruned layers from the stats (recomputed from the tensors if missing)
    total = removed = 0
    for entry in layers:
        file = replace[entry["tensor"]]
        with safe_open(file, framework="pt") as handle:
            w = handle.get_tensor("weight")
        zeros = int((w == 0).sum())
        entry.setdefault("shape", list(w.shape))
        entry["zeros"] = zeros
        entry.setdefault("achieved_sparsity", zeros / w.numel())
        total += w.numel()
        removed += round(float(entry["achieved_sparsity"]) * w.numel())
        del w

    out = Path(out)
    with atomic_path(out, is_dir=True) as tmp:
        weight_map: dict[str, str] = {}
        for i, shard in enumerate(shards):
            shard_name = (
                "model.safetensors"
                if len(shards) == 1
                else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            )
            tensors: dict[str, torch.Tensor] = {}
            for name in shard:
                source, key = (replace[name], "weight") if name in replace else (sources[name], name)
                with safe_open(source, framework="pt") as handle:
                    tensors[name] = handle.get_tensor(key).contiguous()
                weight_map[name] = shard_name
            save_file(tensors, str(tmp / shard_name), metadata={"format": "pt"})
            del tensors
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        for file in sorted(model_dir.iterdir()):
            if (
                file.is_file()
                and not file.name.startswith(".")
                and file.name not in SKIP_FILES
                and not file.name.endswith(WEIGHT_SUFFIXES)
            ):
                shutil.copyfile(file, tmp / file.name)
        report = {
            "recipe": recipe_dict,
            "model": {
                "name": model_name,
                "path": str(model),
                "model_type": config.get("model_type"),
                "num_blocks": info.get("num_blocks"),
                "dtype": info.get("dtype", config.get("torch_dtype") or config.get("dtype")),
            },
            "layers": layers,
            "num_pruned_layers": len(layers),
            "pruned_parameters": total,
            "overall_sparsity": removed / total if total else 0.0,
            "calibration": provenance,
            "versions": package_versions(),
            "intermediates_bytes": None,
            "intermediates": None,
        }
        usage = disk_usage(list(intermediates or []))
        report["intermediates"] = usage
        report["intermediates_bytes"] = sum(usage.values())
        (tmp / "pruning_report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        describe_model(tmp, report)  # config.json sparsity metadata, README.md model card
    log.info(
        "assembled %s: %d tensors in %d shard(s), %d pruned layers, overall sparsity %.4f",
        out,
        len(names),
        len(shards),
        len(layers),
        report["overall_sparsity"],
    )
    return report
