"""What a pruned model holds, counted on its written weights: ``sparsity.json``, the sidecar.

``summarize`` reads every tensor of a model directory's safetensors (one in memory at a time) and counts
the zeros of every pruned layer, per layer type, of the pruned layers together and of all parameters;
the linear modules left dense are found by building the model on the meta device. ``sidecar`` is the
content of ``sparsity.json`` (``SIDECAR``): the method, pattern, recipe and tool version; those counts;
``structure``: ``n:m`` when every row of every pruned layer holds the pattern (no outlier rows kept
dense), else ``unstructured``; for an OWL recipe, ``profile`` and ``blocks`` (OWL's M, lambda and
target, and per block the outlier ratio, OWL's sparsity and the sparsity written). ``read_sidecar`` reads
the counts back instead of counting again. The model card (``thanos.stages.describe.card``) states them.

The file depends only on the report and the tensors (sorted keys): the same inputs give the same bytes.
Torch-free to import (the results' tables read a combined recipe's parts here): the tensors are read by
the functions that count them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thanos.pruning.sparsity import Sparsity, parse_sparsity
from thanos.pruning.structures import STRUCTURES
from thanos.recipes.labels import public_name
from thanos.recipes.recipe import Recipe

SIDECAR = "sparsity.json"
SIDECAR_FORMAT = 1  # the version of sparsity.json's layout


@dataclass
class LayerType:
    """The pruned layers of one kind (e.g. every ``mlp.down_proj``) summed over blocks."""

    layers: int = 0
    weights: int = 0
    zeros: int = 0
    rows: int = 0
    outlier_rows: int = 0

    @property
    def sparsity(self) -> float:
        return self.zeros / self.weights if self.weights else 0.0


@dataclass
class SparsitySummary:
    """Achieved sparsity of a pruned model, counted on its written weights: every pruned layer, per layer
    type, the pruned layers together and all parameters."""

    pruned_weights: int
    pruned_zeros: int
    parameters: int
    zeros: int
    per_type: dict[str, LayerType] = field(default_factory=dict)
    dense_linear: list[str] = field(default_factory=list)  # linear modules left dense (e.g. lm_head)
    per_layer: dict[str, dict[str, Any]] = field(default_factory=dict)  # tensor -> shape, zeros, rows kept

    @property
    def pruned_sparsity(self) -> float:
        return self.pruned_zeros / self.pruned_weights if self.pruned_weights else 0.0

    @property
    def global_sparsity(self) -> float:
        return self.zeros / self.parameters if self.parameters else 0.0

    @property
    def outlier_rows(self) -> int:
        return sum(t.outlier_rows for t in self.per_type.values())

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.per_type.values())


def _weight_map(model_dir: Path) -> dict[str, str]:
    from thanos.data.safetensors_io import open_safetensors

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return json.loads(index.read_text())["weight_map"]
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{model_dir} holds no model.safetensors(.index.json)")
    with open_safetensors(single) as handle:
        return dict.fromkeys(handle.keys(), single.name)  # noqa: SIM118


def _linear_modules(config: dict[str, Any]) -> list[str]:
    """Names of the model's linear modules (built on the meta device: no memory, no weights): every
    ``nn.Linear``, and every other module holding a 2-D ``weight`` it multiplies by, as the routers of
    mixture-of-experts blocks do in transformers 5 (``MixtralTopKRouter``); embeddings are not."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    plain = {k: v for k, v in config.items() if k != "quantization_config"}
    hf_config = AutoConfig.for_model(**plain)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)

    def linear(module: torch.nn.Module) -> bool:
        if isinstance(module, torch.nn.Linear):
            return True
        weight = module._parameters.get("weight")
        return weight is not None and weight.dim() == 2 and not isinstance(module, torch.nn.Embedding)

    return sorted(name for name, module in model.named_modules() if linear(module))


def summarize(model_dir: str | Path, report: dict[str, Any], described: bool = False) -> SparsitySummary:
    """The zeros of every tensor of ``model_dir``'s safetensors (one tensor in memory at a time), per
    pruned layer (the report's ``layers`` name them) and in all. ``described``: ``model_dir`` was written
    by ``describe_model``, so its ``sparsity.json`` holds these counts and nothing is read again (else the
    linear modules left dense are found by building the model on the meta device, seconds of transformers
    imports)."""
    from thanos.data.safetensors_io import open_safetensors

    model_dir = Path(model_dir)
    if described:
        return read_sidecar(model_dir / SIDECAR, report)
    layers = report.get("layers") or []
    pruned = {entry["tensor"]: entry for entry in layers}
    experts: dict[str, list[dict[str, Any]]] = {}  # a fused tensor -> its pruned experts' entries
    for entry in layers:
        if "fused" in entry:
            experts.setdefault(entry["fused"]["tensor"], []).append(entry)
    per_layer: dict[str, dict[str, Any]] = {}
    parameters = zeros = 0
    for name, file in sorted(_weight_map(model_dir).items()):
        with open_safetensors(model_dir / file) as handle:
            tensor = handle.get_tensor(name)
        count = int((tensor == 0).sum())
        parameters += tensor.numel()
        zeros += count
        if name in pruned:
            rows = int(pruned[name].get("outlier_rows") or 0)
            per_layer[name] = {"shape": list(tensor.shape), "zeros": count, "outlier_rows": rows}
        for entry in experts.get(name, []):  # one expert's (out, in) matrix in a fused tensor
            W = tensor[entry["fused"]["expert"]]
            W = W.T if entry["fused"]["transposed"] else W
            rows = int(entry.get("outlier_rows") or 0)
            per_layer[entry["tensor"]] = {
                "shape": list(W.shape),
                "zeros": int((W == 0).sum()),
                "outlier_rows": rows,
            }
        del tensor
    missing = sorted(set(pruned) - set(per_layer))
    if missing:
        raise ValueError(f"{model_dir}: pruned layer(s) {', '.join(missing)} are not in its weights")
    config = json.loads((model_dir / "config.json").read_text())
    modules = {name.removesuffix(".weight") for name in pruned}  # fused experts are no linear module
    dense_linear = [name for name in _linear_modules(config) if name not in modules]
    return _summary(layers, per_layer, parameters, zeros, dense_linear)


def _summary(
    layers: list[dict[str, Any]],
    per_layer: dict[str, dict[str, Any]],
    parameters: int,
    zeros: int,
    dense_linear: list[str],
) -> SparsitySummary:
    """Per-layer counts summed per layer type (in the report's layer order) and over the pruned layers."""
    per_type: dict[str, LayerType] = {}
    for entry in layers:
        counts = per_layer[entry["tensor"]]
        rows, columns = (int(s) for s in counts["shape"])
        kind = per_type.setdefault(entry["layer"], LayerType())
        kind.layers += 1
        kind.weights += rows * columns
        kind.zeros += int(counts["zeros"])
        kind.rows += rows
        kind.outlier_rows += int(counts["outlier_rows"])
    pruned_weights = sum(kind.weights for kind in per_type.values())
    pruned_zeros = sum(kind.zeros for kind in per_type.values())
    return SparsitySummary(pruned_weights, pruned_zeros, parameters, zeros, per_type, dense_linear, per_layer)


def structure(pattern: Sparsity, summary: SparsitySummary | None) -> str:
    """``n:m`` (e.g. ``2:4``) when every row of every pruned layer holds the pattern, ``neurons`` for MLP
    neurons removed, ``heads`` for attention heads, ``depth`` for whole blocks, ``vocab`` for tokens, else
    ``unstructured`` (outlier rows kept dense, or an unstructured or structured recipe). ``summary`` None: a
    structure only (another part of a combined recipe)."""
    if pattern.structure.n_of_m and summary is not None and summary.outlier_rows == 0:
        return f"{pattern.n}:{pattern.m}"
    return STRUCTURES[pattern.kind].sidecar or "unstructured"  # whole neurons, heads, blocks, tokens


def combined_record(report: dict[str, Any]) -> dict[str, Any]:
    """What a report records of the combined recipe its model is the last part of (the whole recipe, its
    earlier parts, the base model); {} for any other model."""
    return (report.get("workflow") or {}).get("combined") or {}


def combined_parts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every part of the combined recipe whose model a report describes, in the order they ran, each
    ``{"sparsity", "compact"}``: the parts before the report's own recipe, its own, and the vocabulary
    written over its model after it (``then``); the report's own alone for any other model."""
    combined = combined_record(report)
    own = {"sparsity": str(report["recipe"]["sparsity"]), "compact": report.get("compact")}
    return [*combined.get("parts", []), own, *combined.get("then", [])]


def combined_parameters(report: dict[str, Any]) -> tuple[int, int] | None:
    """(the base model's parameters, the written model's) of a combined recipe's model, from its first
    and last parts' counts; None where they are not recorded."""
    parts = combined_parts(report)
    first, last = ((part.get("compact") or {}).get("parameters") or {} for part in (parts[0], parts[-1]))
    counts = (first.get("original"), last.get("kept"))
    if all(isinstance(n, int | float) and not isinstance(n, bool) and n > 0 for n in counts):
        return int(counts[0]), int(counts[1])  # type: ignore[arg-type]
    return None


def combined_sidecar(report: dict[str, Any], summary: SparsitySummary) -> dict[str, Any]:
    """``structure`` (``depth+neurons`` for ``depth:4+neurons:0.3``: every part's) and, for a combined
    recipe's model, ``combined``: the whole recipe, its parts, the model it started from and, where known,
    the parameters of that model and of this one."""
    own = structure(Recipe.from_report(report["recipe"]).sparsity, summary)
    combined = combined_record(report)
    if not combined:
        return {"structure": own}
    parts = [part["sparsity"] for part in combined_parts(report)]
    mine = len(combined.get("parts", []))  # the report's own part's place among them
    kinds = [own if i == mine else structure(parse_sparsity(part), None) for i, part in enumerate(parts)]
    base = public_name(combined["base_model"])
    record = {"sparsity": combined["sparsity"], "parts": parts, "base_model": base}
    if (counts := combined_parameters(report)) is not None:
        record["parameters"] = {"base_model": counts[0], "written": counts[1]}
    return {"structure": "+".join(kinds), "combined": record}


def sidecar(report: dict[str, Any], summary: SparsitySummary) -> dict[str, Any]:
    """The content of ``sparsity.json``."""
    recipe = report["recipe"]
    return {
        "format": SIDECAR_FORMAT,
        "tool": {"name": "thanos-prune", "version": (report.get("versions") or {}).get("thanos")},
        "method": recipe["method"],
        "sparsity": str(recipe["sparsity"]),
        **combined_sidecar(report, summary),
        "alpha": float(hyper_parameter(report, "alpha") or 0.0),
        "recipe": recipe,
        "pruned_layers": {
            "layers": len(summary.per_layer),
            "weights": summary.pruned_weights,
            "zeros": summary.pruned_zeros,
            "sparsity": summary.pruned_sparsity,
        },
        "all_parameters": {
            "parameters": summary.parameters,
            "zeros": summary.zeros,
            "sparsity": summary.global_sparsity,
        },
        "layers": {
            name: {**counts, "sparsity": counts["zeros"] / math.prod(counts["shape"])}
            for name, counts in summary.per_layer.items()
        },
        "dense_linear": summary.dense_linear,
        **({"compact": report["compact"]} if report.get("compact") else {}),
        **owl_sidecar(report),
        **({"recovered": True, "recovery": recipe["recover"]} if recipe.get("recover") else {}),
    }


def owl_sidecar(report: dict[str, Any]) -> dict[str, Any]:
    """An OWL recipe's ``profile`` and ``blocks`` (planned and written sparsity per block); {} else."""
    owl = report.get("owl")
    if not owl:
        return {}
    keys = ("block", "parameters", "outlier_ratio", "sparsity", "written_zeros", "written_sparsity")
    return {
        "profile": {
            "name": "owl",
            "owl_m": owl["owl_m"],
            "owl_lambda": owl["owl_lambda"],
            "target": owl["target"],
            "written_sparsity": owl["written_sparsity"],
            "citation": owl["citation"],
        },
        "blocks": [{key: block[key] for key in keys} for block in owl["blocks"]],
    }


def read_sidecar(path: Path, report: dict[str, Any]) -> SparsitySummary:
    """The summary that ``sparsity.json`` at ``path`` records (for the layers of ``report``)."""
    keys = ("shape", "zeros", "outlier_rows")
    try:
        data = json.loads(path.read_text())
        layers = {name: {key: counts[key] for key in keys} for name, counts in data["layers"].items()}
        every, dense = data["all_parameters"], data["dense_linear"]
        return _summary(report.get("layers") or [], layers, every["parameters"], every["zeros"], dense)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"{path}: not a sparsity.json of this model ({type(err).__name__}: {err}); run the workflow "
            "again: its assemble job rewrites the model directory"
        ) from err


def write_sidecar(model_dir: Path, report: dict[str, Any]) -> SparsitySummary:
    """Count ``model_dir``'s weights (``summarize``) and write its ``sparsity.json``; the counts."""
    summary = summarize(model_dir, report)
    text = json.dumps(sidecar(report, summary), indent=2, sort_keys=True) + "\n"
    (model_dir / SIDECAR).write_text(text, encoding="utf-8")
    return summary


def hyper_parameter(report: dict[str, Any], key: str) -> Any:
    """A recipe hyper-parameter: the recipe's value, else the one every layer used (the method's default)."""
    if report["recipe"].get(key) is not None:
        return report["recipe"][key]
    values = {entry.get(key) for entry in report.get("layers") or []}
    return values.pop() if len(values) == 1 else None
