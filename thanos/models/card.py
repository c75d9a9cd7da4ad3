"""A pruned model directory that says what it is, where no loader trips on it: a sidecar and a model card.

The weights are stored dense, zeros included, and ``config.json`` stays the input model's, byte for byte
(a quantized input keeps its ``quantization_config``): the model loads wherever the dense one loads. No
sparsity block is added to ``config.json``: runtimes read a compressed-tensors ``sparsity_config`` as a
request for sparse kernels and refuse it or need extra packages (README "What a pruned model is good
for"). ``describe_model(model_dir, report)`` is called once at the end of assembly (and ``model_card``
again by ``thanos prune-model`` on its output, with the evaluation and the command). It writes

- ``sparsity.json`` (``SIDECAR``): the method, pattern, recipe and tool version; the sparsity of every
  pruned layer, of the pruned layers together and of all parameters, counted on the weights as written
  (zeros of the tensors in the safetensors files); ``structure``: ``n:m`` when every row of every
  pruned layer holds the pattern (no outlier rows kept dense), else ``unstructured``; the linear layers
  left dense.
- for an OWL recipe, ``profile`` and ``blocks``: OWL's M, lambda and target, and per block the
  outlier ratio, OWL's sparsity and the sparsity written.
- ``README.md``: a model card with the base model, method, pattern, alpha and the outlier rows kept dense,
  the achieved sparsity overall and per layer type, the calibration provenance, the evaluation if any,
  the command that reproduces the model and the paper's BibTeX entry.

Both files depend only on the report and the tensors (no dates, sorted keys): assembling the same inputs
twice gives the same bytes.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thanos.data.safetensors_io import open_safetensors
from thanos.pruning.sparsity import parse_sparsity
from thanos.report.labels import LABELS

CARD = "README.md"
SIDECAR = "sparsity.json"
SIDECAR_FORMAT = 1  # the version of sparsity.json's layout
PAPER_ARXIV = "arXiv:2504.05346"
PAPER_URL = "https://github.com/vectozavr/thanos"
CITATION = """@article{ilin2025thanos,
  title   = {Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model Compression},
  author  = {Ilin, Ivan and Richt{\\'a}rik, Peter},
  journal = {arXiv preprint arXiv:2504.05346},
  year    = {2025}
}"""


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
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return json.loads(index.read_text())["weight_map"]
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{model_dir} holds no model.safetensors(.index.json)")
    with open_safetensors(single) as handle:
        return dict.fromkeys(handle.keys(), single.name)  # noqa: SIM118


def _linear_modules(config: dict[str, Any]) -> list[str]:
    """Names of the model's nn.Linear modules (built on the meta device: no memory, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    plain = {k: v for k, v in config.items() if k != "quantization_config"}
    hf_config = AutoConfig.for_model(**plain)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sorted(name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear))


def summarize(model_dir: str | Path, report: dict[str, Any], described: bool = False) -> SparsitySummary:
    """The zeros of every tensor of ``model_dir``'s safetensors (one tensor in memory at a time), per
    pruned layer (the report's ``layers`` name them) and in all. ``described``: ``model_dir`` was written
    by ``describe_model``, so its ``sparsity.json`` holds these counts and nothing is read again (else the
    linear modules left dense are found by building the model on the meta device, seconds of transformers
    imports)."""
    model_dir = Path(model_dir)
    if described:
        return read_sidecar(model_dir / SIDECAR, report)
    layers = report.get("layers") or []
    pruned = {entry["tensor"]: entry for entry in layers}
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
        del tensor
    missing = sorted(set(pruned) - set(per_layer))
    if missing:
        raise ValueError(f"{model_dir}: pruned layer(s) {', '.join(missing)} are not in its weights")
    config = json.loads((model_dir / "config.json").read_text())
    modules = {name.removesuffix(".weight") for name in pruned}
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


def structure(recipe: dict[str, Any], summary: SparsitySummary) -> str:
    """``n:m`` (e.g. ``2:4``) when every row of every pruned layer holds the pattern, ``neurons`` for MLP
    neurons removed, else ``unstructured`` (outlier rows kept dense, or an unstructured or structured
    recipe)."""
    pattern = parse_sparsity(recipe["sparsity"])
    if pattern.kind == "nm" and summary.outlier_rows == 0:
        return f"{pattern.n}:{pattern.m}"
    if pattern.kind == "neurons":  # whole MLP neurons: cut out (compact), or zero columns
        return "neurons"
    return "unstructured"


def sidecar(report: dict[str, Any], summary: SparsitySummary) -> dict[str, Any]:
    """The content of ``sparsity.json``."""
    recipe = report["recipe"]
    return {
        "format": SIDECAR_FORMAT,
        "tool": {"name": "thanos-prune", "version": (report.get("versions") or {}).get("thanos")},
        "method": recipe["method"],
        "sparsity": str(recipe["sparsity"]),
        "structure": structure(recipe, summary),
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


def owl_lines(report: dict[str, Any]) -> list[str]:
    """The model card's section on OWL's per-block sparsities (none for uniform sparsity)."""
    owl = report.get("owl")
    if not owl:
        return []
    lines = [
        "## Sparsity per block (OWL)",
        "",
        f"{owl['citation']}: M {owl['owl_m']:g}, lambda "
        f"{owl['owl_lambda']:g}, from the dense model's activations; target {owl['target']}, written "
        f"{_percent(owl['written_sparsity'])} of the pruned layers' weights.",
        "",
        "| block | outlier ratio | OWL sparsity | written sparsity |",
        "| --: | --: | --: | --: |",
    ]
    for block in owl["blocks"]:
        lines.append(
            f"| {block['block']} | {100 * block['outlier_ratio']:.3f} % | {_percent(block['sparsity'])} | "
            f"{_percent(block['written_sparsity'])} |"
        )
    return [*lines, ""]


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


# --- the model card ---------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def hyper_parameter(report: dict[str, Any], key: str) -> Any:
    """A recipe hyper-parameter: the recipe's value, else the one every layer used (the method's default)."""
    if report["recipe"].get(key) is not None:
        return report["recipe"][key]
    values = {entry.get(key) for entry in report.get("layers") or []}
    return values.pop() if len(values) == 1 else None


def pattern_text(sparsity: str, alpha: float | None, summary: SparsitySummary | None = None) -> str:
    """``2:4 + 10 % dense rows``, ``unstructured 50 %``, ``structured 30 % (whole input columns)``."""
    pattern = parse_sparsity(sparsity)
    if pattern.kind == "nm":
        text = f"{pattern.n}:{pattern.m}"
    elif pattern.kind == "structured":
        text = f"structured {100 * float(pattern.fraction):g} % (whole input columns)"
    elif pattern.kind == "neurons":
        text = f"MLP neurons {100 * float(pattern.fraction):g} % (kept width rounded up to a multiple of 8)"
    else:
        text = f"unstructured {100 * float(pattern.fraction):g} %"
    if alpha and (summary is None or summary.outlier_rows > 0):
        text += f" + {100 * alpha:g} % dense rows"
    return text


def nm_note(sparsity: str, alpha: float | None) -> str | None:
    """For an n:m pattern, what the chosen alpha gives (None for other patterns)."""
    pattern = parse_sparsity(sparsity)
    if pattern.kind != "nm":
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


def reproduce_command(report: dict[str, Any], out: str | Path | None = None) -> str | None:
    """The ``thanos prune-model`` command giving this model (None for a dense-chain recipe)."""
    recipe = report["recipe"]
    if recipe.get("chain", "sequential") != "sequential":
        return None
    args = ["thanos", "prune-model", "--model", str(report["model"]["path"])]
    args += ["--method", recipe["method"], "--sparsity", str(recipe["sparsity"])]
    for key in ("alpha", "blocksize", "damp", "profile", "owl_m", "owl_lambda"):
        if recipe.get(key) is not None:
            value = f"{recipe[key]:g}" if isinstance(recipe[key], float) else str(recipe[key])
            args += [f"--{key.replace('_', '-')}", value]
    if recipe.get("compact") is not None:
        args.append("--compact" if recipe["compact"] else "--no-compact")
    for pattern in recipe.get("exclude") or ():
        args += ["--exclude", pattern]
    calibration = report.get("calibration")
    if calibration:
        args += ["--calibration", str(calibration["source"])]
        args += ["--nsamples", str(calibration["nsamples"]), "--seqlen", str(calibration["seqlen"])]
        if calibration.get("seed", 0) != 0:
            args += ["--seed", str(calibration["seed"])]
        if calibration.get("text_field", "text") != "text":
            args += ["--text-field", str(calibration["text_field"])]
    args += ["--out", str(out) if out is not None else "OUT"]
    return " ".join(shlex.quote(a) for a in args)


DENSE_TEXT = (
    "The weights are stored dense, zeros included, and `config.json` is the base model's: the model "
    "loads wherever the base model loads, as a dense model."
)


def _compact_text(compact: dict[str, Any]) -> str:
    """What a compact (neurons removed) model is, for the card."""
    before, after = compact["parameters"]["original"], compact["parameters"]["kept"]
    return (
        "The removed MLP neurons are cut out of the matrices: every block keeps "
        f"{compact['kept_width']} of its {compact['original_width']} neurons (`{compact['width_key']}` in "
        "`config.json` is "
        f"{compact['kept_width']}, every other value the base model's), {after:,} of {before:,} parameters "
        f"({100 * (1 - after / before):.1f} % fewer); the model loads wherever the base model loads, as a "
        "smaller dense model of the same architecture."
    )


def _compact_row(compact: dict[str, Any], summary: SparsitySummary) -> str:
    """The card's row of what a compact model removed (its written weights hold no removed neuron)."""
    removed, width = compact["removed_per_block"], compact["original_width"]
    before, after = compact["parameters"]["original"], compact["parameters"]["kept"]
    return (
        f"| removed | {removed} of the {width} MLP neurons of every block ({_percent(removed / width)}), "
        f"with their column of {compact['output_projection']} and rows of {', '.join(compact['feeders'])}: "
        f"{before - after:,} parameters; the written weights hold {_percent(summary.global_sparsity)} zeros |"
    )


def _evaluation_lines(evaluation: dict[str, Any] | None) -> list[str]:
    if not evaluation:
        return ["Not evaluated (`thanos prune-model --evaluate ppl,zeroshot` evaluates it)."]
    lines = []
    ppl = evaluation.get("perplexity")
    if ppl:
        lines.append(
            f"- perplexity **{ppl['ppl']:.2f}** on {ppl.get('dataset')} ({ppl.get('windows')} windows of "
            f"{ppl.get('seqlen')} tokens)"
        )
    zeroshot = evaluation.get("zeroshot")
    if zeroshot:
        tasks = ", ".join(
            f"{task} {100 * float(m['acc']):.2f}"
            for task, m in sorted((zeroshot.get("tasks") or {}).items())
            if isinstance(m, dict) and m.get("acc") is not None
        )
        lines.append(
            f"- zero-shot accuracy (lm-eval, %): mean **{100 * zeroshot['mean_acc']:.2f}** ({tasks})"
        )
    return lines or ["Not evaluated."]


def model_card(
    report: dict[str, Any],
    summary: SparsitySummary,
    evaluation: dict[str, Any] | None = None,
    out: str | Path | None = None,
) -> str:
    """The README.md text of a pruned model directory."""
    recipe, model = report["recipe"], report["model"]
    spec = LABELS[recipe["method"]]
    method = spec.label
    base = str(model.get("path"))
    alpha = float(hyper_parameter(report, "alpha") or 0.0)
    pattern = pattern_text(recipe["sparsity"], alpha, summary)
    if report.get("owl"):
        pattern += " (OWL: per block)"
    hub_id = not base.startswith(("/", ".", "~")) and base.count("/") == 1
    front = ["---", "library_name: transformers"]
    if hub_id:
        front.append(f"base_model: {base}")
    front += ["tags:", "- pruned", "- sparse", f"- {recipe['method']}", "---", ""]
    rows = (
        f"{summary.outlier_rows} of {summary.rows} rows of the pruned layers kept dense"
        if summary.outlier_rows
        else "none"
    )
    blocks = f", {model['num_blocks']} blocks" if model.get("num_blocks") else ""
    dense = summary.dense_linear
    if len(dense) > 4:
        dense_text = f"{len(dense)} linear layers ({SIDECAR} lists them under dense_linear)"
    else:
        dense_text = ", ".join(dense) or "no linear layer"
    calibration = report.get("calibration")
    if calibration:
        checksum = f", sha256 {calibration['checksum'][:12]}..." if calibration.get("checksum") else ""
        calib = (
            f"{calibration['nsamples']} x {calibration['seqlen']} tokens from `{calibration['source']}` "
            f"(seed {calibration.get('seed', 0)}{checksum}); chain {recipe.get('chain', 'sequential')}"
        )
    else:
        calib = f"none ({method} needs no data)"
    lines = front + [
        f"# {model.get('name') or Path(base).name}: {method} {pattern}",
        "",
        f"`{base}` pruned with **{method}** ({pattern}) by thanos-prune, a pipeline and library for "
        "*Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model Compression* (Ilin and "
        f"Richtárik, 2025, {PAPER_ARXIV}). "
        + (_compact_text(report["compact"]) if report.get("compact") else DENSE_TEXT)
        + " "
        f"`{SIDECAR}` gives the sparsity of every pruned layer, counted on these weights.",
        *(["", f"{note[0].upper()}{note[1:]}."] if (note := nm_note(recipe["sparsity"], alpha)) else []),
        "",
        "| | |",
        "| --- | --- |",
        f"| base model | `{base}` ({model.get('model_type')}{blocks}) |",
        f"| method | {method}, blocksize {hyper_parameter(report, 'blocksize') or '-'}, damping "
        f"{recipe.get('damp', 0.01):g} (fraction of mean diag H) |",
        f"| pattern | {pattern} |",
        f"| alpha (outlier rows kept dense) | {alpha:g}: {rows} |",
        _compact_row(report["compact"], summary)
        if report.get("compact")
        else f"| achieved sparsity | {_percent(summary.pruned_sparsity)} of the {summary.pruned_weights:,} "
        f"weights of the {len(report.get('layers') or [])} pruned linear layers; "
        f"{_percent(summary.global_sparsity)} of all {summary.parameters:,} parameters |",
        f"| left dense | embeddings, norms, {dense_text} |",
        f"| calibration | {calib} |",
        "",
        "## Achieved sparsity per layer type",
        "",
        "| layer | layers | weights | sparsity | rows kept dense |",
        "| :-- | --: | --: | --: | --: |",
    ]
    for name, kind in sorted(summary.per_type.items()):
        lines.append(
            f"| {name} | {kind.layers} | {kind.weights:,} | {_percent(kind.sparsity)} | "
            f"{kind.outlier_rows} of {kind.rows} |"
        )
    lines += ["", *owl_lines(report)]
    lines += ["## Evaluation", "", *_evaluation_lines(evaluation), "", "## Use", "", "```python"]
    lines += [
        "from transformers import AutoModelForCausalLM",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{out if out is not None else "THIS_DIRECTORY"}")',
        "```",
        "",
        "No extra package is needed. `pruning_report.json` holds every hyper-parameter, per-layer statistics "
        f"and package versions; `{SIDECAR}` the achieved sparsity per layer.",
        "",
        "## Reproduce",
        "",
    ]
    command = reproduce_command(report, out)
    if command:
        lines += ["```bash", command, "```"]
    else:
        lines.append(
            "A workflow config with `chain: dense` and this recipe (`thanos prune-model` runs the "
            "paper's sequential chain)."
        )
    lines += ["", "## Citation", "", f"The Thanos paper (code of the authors: {PAPER_URL}):", "", "```bibtex"]
    lines += [CITATION, "```"]
    if spec.reference:
        lines += ["", f"The method of this model: {spec.label}: {spec.reference}."]
    return "\n".join(lines) + "\n"


def describe_model(
    model_dir: str | Path,
    report: dict[str, Any],
    evaluation: dict[str, Any] | None = None,
    out: str | Path | None = None,
) -> SparsitySummary:
    """Write ``sparsity.json`` and ``README.md`` into ``model_dir`` (``config.json`` is left as it is).

    ``evaluation`` ({"perplexity": ..., "zeroshot": ...}) and ``out`` (where the model is published,
    for the loading and reproduce commands) are optional."""
    model_dir = Path(model_dir)
    summary = summarize(model_dir, report)
    text = json.dumps(sidecar(report, summary), indent=2, sort_keys=True) + "\n"
    (model_dir / SIDECAR).write_text(text, encoding="utf-8")
    (model_dir / CARD).write_text(model_card(report, summary, evaluation, out), encoding="utf-8")
    return summary


__all__ = [
    "CITATION",
    "SIDECAR",
    "SparsitySummary",
    "describe_model",
    "model_card",
    "pattern_text",
    "read_sidecar",
    "summarize",
]
