"""A pruned model directory that says what it is: sparsity metadata in ``config.json`` and a model card.

``describe_model(model_dir, report)`` is called once at the end of assembly (and again by
``thanos prune-model`` on its output, with the evaluation and the command). It writes

- ``config.json``: the sparsity in the compressed-tensors convention, as llm-compressor writes it:
  ``quantization_config = {"quant_method": "compressed-tensors", "version": ..., "sparsity_config":
  {"format": "dense", "sparsity_structure": "2:4" | "unstructured" | "n:m", "global_sparsity": ...,
  "targets": ["Linear"], "ignore": [the linear layers left dense]}}``, built with the compressed-tensors
  library. ``format: dense``: the weights are stored as they are (zeros included). ``sparsity_structure``
  is ``n:m`` only when every pruned row holds the pattern (no outlier rows kept dense), else
  ``unstructured``. ``global_sparsity`` is the fraction of zeros among all parameters of the model.
- ``README.md``: a model card with the base model, method, pattern, alpha and the outlier rows kept dense,
  the achieved sparsity overall and per layer type, the calibration provenance, the evaluation if any,
  the command that reproduces the model and the paper's BibTeX entry.

Both files depend only on the report and the tensors (no dates, sorted keys): assembling the same inputs
twice gives the same bytes.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thanos.data.safetensors_io import open_safetensors
from thanos.pruning import methods
from thanos.pruning.sparsity import parse_sparsity

log = logging.getLogger(__name__)

CARD = "README.md"
QUANT_METHOD = "compressed-tensors"
PAPER_URL = "https://github.com/vectozavr/thanos"
CITATION = """@inproceedings{ilin2025thanos,
  title     = {Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model Compression},
  author    = {Ilin, Ivan and Richt{\\'a}rik, Peter},
  booktitle = {Proceedings of the 42nd International Conference on Machine Learning (ICML)},
  year      = {2025}
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
    """Achieved sparsity of a pruned model: its pruned layers, per layer type, and all its parameters."""

    pruned_weights: int
    pruned_zeros: int
    parameters: int
    zeros: int
    per_type: dict[str, LayerType] = field(default_factory=dict)
    dense_linear: list[str] = field(default_factory=list)  # linear modules left dense (e.g. lm_head)

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


def _recorded_dense_linear(config: dict[str, Any]) -> list[str] | None:
    """The linear modules left dense, as ``write_sparsity_config`` recorded them in config.json."""
    block = config.get("quantization_config") or {}
    if block.get("quant_method") != QUANT_METHOD:
        return None
    ignore = (block.get("sparsity_config") or {}).get("ignore")
    return list(ignore) if isinstance(ignore, list) else None


def summarize(model_dir: str | Path, report: dict[str, Any], described: bool = False) -> SparsitySummary:
    """Zeros of the pruned layers (from the report's per-layer counts) and of every other tensor (read
    from ``model_dir``'s safetensors: embeddings, norms, lm_head; the pruned ones are not read again).
    ``described``: ``model_dir`` was written by ``describe_model``, so its config.json names the linear
    modules left dense (else they are found by building the model on the meta device, seconds of
    transformers imports)."""
    model_dir = Path(model_dir)
    layers = report.get("layers") or []
    pruned = {entry["tensor"] for entry in layers}
    per_type: dict[str, LayerType] = {}
    pruned_weights = pruned_zeros = 0
    for entry in layers:
        rows, columns = (int(s) for s in entry["shape"])
        kind = per_type.setdefault(entry["layer"], LayerType())
        kind.layers += 1
        kind.weights += rows * columns
        kind.zeros += int(entry["zeros"])
        kind.rows += rows
        kind.outlier_rows += int(entry.get("outlier_rows") or 0)
        pruned_weights += rows * columns
        pruned_zeros += int(entry["zeros"])
    parameters, zeros = pruned_weights, pruned_zeros
    for name, file in sorted(_weight_map(model_dir).items()):
        if name in pruned:
            continue
        with open_safetensors(model_dir / file) as handle:
            tensor = handle.get_tensor(name)
        parameters += tensor.numel()
        zeros += int((tensor == 0).sum())
        del tensor
    config = json.loads((model_dir / "config.json").read_text())
    dense_linear = _recorded_dense_linear(config) if described else None
    if dense_linear is None:
        modules = {entry["tensor"].removesuffix(".weight") for entry in layers}
        dense_linear = [name for name in _linear_modules(config) if name not in modules]
    return SparsitySummary(pruned_weights, pruned_zeros, parameters, zeros, per_type, dense_linear)


def sparsity_structure(recipe: dict[str, Any], summary: SparsitySummary) -> str:
    """``n:m`` when every pruned row holds the pattern, else ``unstructured`` (compressed-tensors names)."""
    pattern = parse_sparsity(recipe["sparsity"])
    if pattern.kind == "nm" and summary.outlier_rows == 0:
        return f"{pattern.n}:{pattern.m}"
    return "unstructured"


def sparsity_config(recipe: dict[str, Any], summary: SparsitySummary) -> dict[str, Any]:
    """The ``quantization_config`` block of config.json (compressed-tensors, format dense)."""
    import compressed_tensors
    from compressed_tensors.config import CompressionFormat, SparsityCompressionConfig

    sparsity = SparsityCompressionConfig.load_from_registry(
        CompressionFormat.dense.value,
        global_sparsity=round(summary.global_sparsity, 6),
        sparsity_structure=sparsity_structure(recipe, summary),
        targets=["Linear"],
        ignore=summary.dense_linear,
    )
    return {
        "quant_method": QUANT_METHOD,
        "version": compressed_tensors.__version__,
        "sparsity_config": sparsity.model_dump(),
    }


def write_sparsity_config(model_dir: Path, recipe: dict[str, Any], summary: SparsitySummary) -> None:
    """Add the sparsity block to ``model_dir/config.json`` (kept as it is if the model is quantized)."""
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    existing = config.get("quantization_config")
    if existing and existing.get("quant_method") != QUANT_METHOD:
        log.warning(
            "%s: the model already has a %s quantization_config; no sparsity metadata written",
            path,
            existing.get("quant_method"),
        )
        return
    block = sparsity_config(recipe, summary)
    config["quantization_config"] = {**(existing or {}), **block}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


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
            f"every row of every pruned layer is {nm}: n:m sparse kernels (torch semi-structured sparsity, "
            f"cuSPARSELt, vLLM) can run it; alpha 0.1 (the paper's Thanos setting) keeps 10 % of the rows "
            "dense for a lower perplexity"
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
    for key in ("alpha", "blocksize", "damp"):
        if recipe.get(key) is not None:
            args += [f"--{key}", f"{recipe[key]:g}" if isinstance(recipe[key], float) else str(recipe[key])]
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
    spec = methods.get(recipe["method"])
    method = spec.label
    base = str(model.get("path"))
    alpha = float(hyper_parameter(report, "alpha") or 0.0)
    pattern = pattern_text(recipe["sparsity"], alpha, summary)
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
        dense_text = f"{len(dense)} linear layers (config.json lists them under ignore)"
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
        f"`{base}` pruned with **{method}** ({pattern}) by thanos-prune, a pipeline and library for the "
        "ICML 2025 paper *Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model "
        "Compression*. "
        "The weights are stored dense, zeros included: the model loads like the original, and "
        "`config.json` describes its sparsity in the compressed-tensors convention "
        "(`quantization_config.sparsity_config`, format `dense`).",
        *(["", f"{note[0].upper()}{note[1:]}."] if (note := nm_note(recipe["sparsity"], alpha)) else []),
        "",
        "| | |",
        "| --- | --- |",
        f"| base model | `{base}` ({model.get('model_type')}{blocks}) |",
        f"| method | {method}, blocksize {hyper_parameter(report, 'blocksize') or '-'}, damping "
        f"{recipe.get('damp', 0.01):g} (fraction of mean diag H) |",
        f"| pattern | {pattern} |",
        f"| alpha (outlier rows kept dense) | {alpha:g}: {rows} |",
        f"| achieved sparsity | {_percent(summary.pruned_sparsity)} of the {summary.pruned_weights:,} "
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
    lines += ["", "## Evaluation", "", *_evaluation_lines(evaluation), "", "## Use", "", "```python"]
    lines += [
        "from transformers import AutoModelForCausalLM",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{out if out is not None else "THIS_DIRECTORY"}")',
        "```",
        "",
        "Loading needs the `compressed-tensors` package (transformers reads `quantization_config` with it).",
        "`pruning_report.json` holds every hyper-parameter, per-layer statistics and package versions.",
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
    """Write the sparsity block of ``config.json`` and ``README.md`` into ``model_dir``.

    ``evaluation`` ({"perplexity": ..., "zeroshot": ...}) and ``out`` (where the model is published,
    for the loading and reproduce commands) are optional."""
    model_dir = Path(model_dir)
    summary = summarize(model_dir, report)
    write_sparsity_config(model_dir, report["recipe"], summary)
    (model_dir / CARD).write_text(model_card(report, summary, evaluation, out), encoding="utf-8")
    return summary


__all__ = ["CITATION", "SparsitySummary", "describe_model", "model_card", "pattern_text", "summarize"]
