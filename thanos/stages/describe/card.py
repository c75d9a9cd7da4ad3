"""A pruned model directory that says what it is, where no loader trips on it: its model card.

The weights are stored dense, zeros included, and ``config.json`` stays the input model's, byte for byte
(a quantized input keeps its ``quantization_config``): the model loads wherever the dense one loads. No
sparsity block is added to ``config.json``: runtimes read a compressed-tensors ``sparsity_config`` as a
request for sparse kernels and refuse it or need extra packages (docs/using-pruned-models.md).
``describe_model(model_dir, report)`` is called once at the end of assembly (and ``model_card`` again by
``thanos prune-model`` on its output, with the evaluation and the command). It writes

- ``sparsity.json``: the achieved sparsity, counted on the written weights
  (``thanos.stages.describe.sparsity``);
- ``README.md``: a model card with the base model, method, pattern, alpha and the outlier rows kept dense,
  the achieved sparsity overall and per layer type, the calibration provenance, the evaluation if any,
  the command that reproduces the model and the paper's BibTeX entry. It names models and files by their
  hub id or their directory's or file's name (``public_name``), never by a local path: a card is uploaded.

Both files depend only on the report and the tensors (no dates, sorted keys): assembling the same inputs
twice gives the same bytes.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from thanos.options import command_line
from thanos.pruning.sparsity import COMPACT_KINDS
from thanos.recipes.labels import (
    LABELS,
    bytes_text,
    counted,
    nm_note,
    pattern_text,
    public_name,
    shape_text,
    shown_perplexity,
)
from thanos.recipes.recipe import DEFAULT_DAMP, Recipe
from thanos.recipes.training import Distillation
from thanos.stages.describe.sections import distillation_lines, recovery_lines
from thanos.stages.describe.sparsity import (
    SIDECAR,
    SparsitySummary,
    combined_parameters,
    combined_parts,
    combined_record,
    hyper_parameter,
    write_sidecar,
)
from thanos.stages.describe.structures import compact_row, compact_text, percent

CARD = "README.md"
PAPER_ARXIV = "arXiv:2504.05346"
PAPER_URL = "https://github.com/vectozavr/thanos"
CITATION = """@article{ilin2025thanos,
  title   = {Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model Compression},
  author  = {Ilin, Ivan and Richt{\\'a}rik, Peter},
  journal = {arXiv preprint arXiv:2504.05346},
  year    = {2025}
}"""


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
        f"{percent(owl['written_sparsity'])} of the pruned layers' weights.",
        "",
        "| block | outlier ratio | OWL sparsity | written sparsity |",
        "| --: | --: | --: | --: |",
    ]
    for block in owl["blocks"]:
        lines.append(
            f"| {block['block']} | {100 * block['outlier_ratio']:.3f} % | {percent(block['sparsity'])} | "
            f"{percent(block['written_sparsity'])} |"
        )
    return [*lines, ""]


def base_model(report: dict[str, Any]) -> str:
    """The model the recipe started from: the input model, for every part of a combined recipe too."""
    return str(combined_record(report).get("base_model") or report["model"]["path"])


def reproduce_command(report: dict[str, Any], out: str | Path | None = None) -> str | None:
    """The ``thanos prune-model`` command giving this model (None for a dense-chain recipe)."""
    recipe = Recipe.from_report(report["recipe"])
    if not recipe.sequential:
        return None
    sparsity = combined_record(report).get("sparsity")
    args = ["thanos", "prune-model", "--model", public_name(base_model(report))]
    args += ["--method", recipe.method, "--sparsity", sparsity or str(recipe.sparsity)]
    # alpha and B always (a later version's defaults may differ), the rest where they are not the default
    options = {"alpha": recipe.alpha, "blocksize": recipe.blocksize}
    options |= {"damp": recipe.damp} if recipe.damp != DEFAULT_DAMP else {}
    options |= (
        {"profile": "owl", "owl_m": recipe.owl_m, "owl_lambda": recipe.owl_lambda} if recipe.owl else {}
    )
    for key, value in options.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    if recipe.sparsity.kind in COMPACT_KINDS:
        args.append("--compact" if recipe.compact else "--no-compact")
    depth_parts = [recipe.block_map, *(p.get("block_map") for p in combined_record(report).get("parts", []))]
    if False in depth_parts:  # a depth recipe (or a combined recipe's depth part) without maps
        args.append("--no-block-map")
    for pattern in recipe.exclude:
        args += ["--exclude", pattern]
    calibration = report.get("calibration")
    if calibration:
        args += ["--calibration", public_name(calibration["source"])]
        args += ["--nsamples", str(calibration["nsamples"]), "--seqlen", str(calibration["seqlen"])]
        if calibration.get("seed", 0) != 0:
            args += ["--seed", str(calibration["seed"])]
        if calibration.get("text_field", "text") != "text":
            args += ["--text-field", str(calibration["text_field"])]
    if recipe.recover is not None:  # the recovery's options, each (a later version's defaults may differ)
        args += ["--recover", *command_line(recipe.recover, "recover_")]
    if distilled := (report.get("distillation") or {}).get("options"):  # the distillation the card tells
        source = str(distilled["source"])
        local = Path(source).expanduser().is_absolute() or Path(source).exists()
        shown = distilled | ({"source": public_name(source)} if local else {})
        args += command_line(Distillation(**shown), "distill_")
    args += ["--out", public_name(out) if out is not None else "OUT"]
    return " ".join(shlex.quote(a) for a in args)


DENSE_TEXT = (
    "The weights are stored dense, zeros included, and `config.json` is the base model's: the model "
    "loads wherever the base model loads, as a dense model."
)


def evaluate_commands(model: str) -> str:
    """The commands that evaluate the model in the directory ``model``, whatever made it."""
    return (
        f"`thanos perplexity --model {model} --out ppl.json`, "
        f"`thanos zeroshot --model {model} --out zeroshot.json`"
    )


def evaluation_lines(evaluation: dict[str, Any] | None, where: str) -> list[str]:
    if not evaluation:
        return [f"Not evaluated ({evaluate_commands(where)} evaluate it)."]
    lines = []
    dense = evaluation.get("dense") or {}
    ppl = evaluation.get("perplexity")
    if ppl:
        dense_ppl = dense.get("perplexity")
        value, per = shown_perplexity(ppl, dense_ppl)
        beside = f"; the dense model: {dense_ppl['ppl']:.2f}" if dense_ppl else ""
        text = public_name(str(ppl.get("dataset")))  # a local file by its name: the card is uploaded
        lines.append(
            f"- perplexity{per} **{value:.2f}** on {text} ({counted(int(ppl['windows']), 'window')} of "
            f"{ppl.get('seqlen')} tokens{beside})"
        )
        if (rate := bytes_text(ppl, dense_ppl, mark="**")) is not None:
            lines.append(f"- {rate}")
    zeroshot = evaluation.get("zeroshot")
    if zeroshot:
        tasks = ", ".join(
            f"{task} {100 * float(m['acc']):.2f}"
            for task, m in sorted((zeroshot.get("tasks") or {}).items())
            if isinstance(m, dict) and m.get("acc") is not None
        )
        beside = (
            f"; the dense model: {100 * dense['zeroshot']['mean_acc']:.2f}" if "zeroshot" in dense else ""
        )
        lines.append(
            f"- zero-shot accuracy (lm-eval, %): mean **{100 * zeroshot['mean_acc']:.2f}** ({tasks}{beside})"
        )
    return lines or ["Not evaluated."]


def combined_lines(report: dict[str, Any]) -> list[str]:
    """For a combined recipe's model (``depth:4+neurons:0.3``): every part, and the parameters against the
    base model."""
    combined = combined_record(report)
    if not combined:
        return []
    steps = "; then ".join(
        f"`{part['sparsity']}`" + (f" ({shape_text(part['compact'])})" if part.get("compact") else "")
        for part in combined_parts(report)
    )
    which = "the last part of the combined recipe" if not combined.get("then") else "the combined recipe"
    text = (
        f"It is {which} `{combined['sparsity']}` on `{public_name(combined['base_model'])}`, "
        f"each part run on the model the previous one wrote: {steps}."
    )
    if (counts := combined_parameters(report)) is not None:
        before, after = counts
        fewer = 100 * (1 - after / before)
        text += f" Against the base model: {after:,} of {before:,} parameters ({fewer:.1f} % fewer)."
    return ["", text]


def model_card(
    report: dict[str, Any],
    summary: SparsitySummary,
    evaluation: dict[str, Any] | None = None,
    out: str | Path | None = None,
) -> str:
    """The README.md text of a pruned model directory: front matter, what it is, its facts, the achieved
    sparsity per layer type, OWL's blocks, the evaluation, how to use and reproduce it, the citation."""
    recipe = report["recipe"]
    spec = LABELS[recipe["method"]]
    base = public_name(base_model(report))
    alpha = float(hyper_parameter(report, "alpha") or 0.0)
    sparsity = Recipe.from_report(recipe).sparsity
    pattern = pattern_text(sparsity, alpha, summary.outlier_rows) + (
        " (OWL: per block)" if report.get("owl") else ""
    )
    combined = combined_record(report).get("sparsity")
    lines = [
        *front_matter(base, recipe["method"]),
        f"# {base}: {spec.label} {f'`{combined}`' if combined else pattern}",
        "",
        f"`{base}` pruned with **{spec.label}** ({pattern}) by thanos-prune, a pipeline and library for "
        "*Thanos: A Block-wise Pruning Algorithm for Efficient Large Language Model Compression* (Ilin and "
        f"Richtárik, 2025, {PAPER_ARXIV}). "
        + (compact_text(report["compact"]) if report.get("compact") else DENSE_TEXT)
        + " "
        f"`{SIDECAR}` gives the sparsity of every pruned layer, counted on these weights.",
        *(["", f"{note[0].upper()}{note[1:]}."] if (note := nm_note(sparsity, alpha)) else []),
        *combined_lines(report),
        "",
        *_facts(report, summary, spec.label, pattern, alpha),
        "",
        *_per_type_lines(summary),
        *owl_lines(report),
        *recovery_lines(report),
        *distillation_lines(report),
        "## Evaluation",
        "",
        *evaluation_lines(evaluation, _where(out)),
        "",
        *_use_and_reproduce(report, out),
        "",
        "## Citation",
        "",
        f"The Thanos paper (code of the authors: {PAPER_URL}):",
        "",
        "```bibtex",
        CITATION,
        "```",
    ]
    if spec.reference:
        lines += ["", f"The method of this model: {spec.label}: {spec.reference}."]
    return "\n".join(lines) + "\n"


def front_matter(base: str, method: str) -> list[str]:
    """The card's YAML front matter: the library, the base model when it is a hub id, the tags."""
    front = ["---", "library_name: transformers"]
    if not base.startswith(("/", ".", "~")) and base.count("/") == 1:
        front.append(f"base_model: {base}")
    return [*front, "tags:", "- pruned", "- sparse", f"- {method}", "---", ""]


def _facts(
    report: dict[str, Any], summary: SparsitySummary, method: str, pattern: str, alpha: float
) -> list[str]:
    """The card's table of facts: base model, method, pattern, alpha, achieved sparsity, what is left
    dense, the calibration."""
    recipe, model = report["recipe"], report["model"]
    base = public_name(base_model(report))
    rows = (
        f"{summary.outlier_rows} of {summary.rows} rows of the pruned layers kept dense"
        if summary.outlier_rows
        else "none"
    )
    combined = combined_record(report)
    blocks = f", {model['num_blocks']} blocks" if model.get("num_blocks") and not combined else ""
    dense = summary.dense_linear
    if len(dense) > 4:
        dense_text = f"{len(dense)} linear layers ({SIDECAR} lists them under dense_linear)"
    else:
        dense_text = ", ".join(dense) or "no linear layer"
    routers = [name for name in dense if name.endswith((".gate", ".router"))]
    if routers and len(dense) > 4:  # mixture of experts: say that the routers are among them
        dense_text += f", the {len(routers)} mixture-of-experts routers among them"
    B = hyper_parameter(report, "blocksize")
    blocksize = f", blocksize {B}" if B else ""  # the structured kernels and depth have no blocks of columns
    calibration = report.get("calibration")
    if calibration:
        checksum = f", sha256 {calibration['checksum'][:12]}..." if calibration.get("checksum") else ""
        calib = (
            f"{calibration['nsamples']} x {calibration['seqlen']} tokens from "
            f"`{public_name(calibration['source'])}` "
            f"(seed {calibration.get('seed', 0)}{checksum}); chain {recipe.get('chain', 'sequential')}"
        )
    else:
        calib = f"none ({method} needs no data)"
    return [
        "| | |",
        "| --- | --- |",
        f"| base model | `{base}` ({model.get('model_type')}{blocks}) |",
        f"| method | {method}{blocksize}, damping {recipe.get('damp', 0.01):g} (fraction of mean diag H) |",
        f"| pattern | {pattern} |",
        f"| alpha (outlier rows kept dense) | {alpha:g}: {rows} |",
        compact_row(report["compact"], summary)
        if report.get("compact")
        else f"| achieved sparsity | {percent(summary.pruned_sparsity)} of the {summary.pruned_weights:,} "
        f"weights of the {len(report.get('layers') or [])} pruned linear layers; "
        f"{percent(summary.global_sparsity)} of all {summary.parameters:,} parameters |",
        f"| left dense | embeddings, norms, {dense_text} |",
        f"| calibration | {calib} |",
    ]


def _per_type_lines(summary: SparsitySummary) -> list[str]:
    """The achieved sparsity per layer type (every ``mlp.down_proj`` together, ...); nothing where no layer
    was pruned (``depth:k``: whole blocks removed, the kept ones as they were)."""
    if not summary.per_type:
        return []
    lines = [
        "## Achieved sparsity per layer type",
        "",
        "| layer | layers | weights | sparsity | rows kept dense |",
        "| :-- | --: | --: | --: | --: |",
    ]
    for name, kind in sorted(summary.per_type.items()):
        lines.append(
            f"| {name} | {kind.layers} | {kind.weights:,} | {percent(kind.sparsity)} | "
            f"{kind.outlier_rows} of {kind.rows} |"
        )
    return [*lines, ""]


def _where(out: str | Path | None) -> str:
    """The model's directory as the card's commands name it."""
    return public_name(out) if out is not None else "THIS_DIRECTORY"


def _use_and_reproduce(report: dict[str, Any], out: str | Path | None) -> list[str]:
    """How to load the model (plain transformers) and the command that makes it again."""
    where = _where(out)
    lines = [
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{where}")',
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
        return [*lines, "```bash", command, "```"]
    return [
        *lines,
        "A workflow config with `chain: dense` and this recipe (`thanos prune-model` runs the "
        "paper's sequential chain).",
    ]


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
    summary = write_sidecar(model_dir, report)
    (model_dir / CARD).write_text(model_card(report, summary, evaluation, out), encoding="utf-8")
    return summary


__all__ = ["CARD", "CITATION", "describe_model", "model_card", "nm_note", "pattern_text", "shape_text"]
