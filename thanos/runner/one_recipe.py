"""Prune one model with one recipe in one call: ``thanos.prune_model`` and ``thanos prune-model``.

It writes a one-model, one-recipe config for the package's Snakemake workflow and runs it
(``thanos.runner.run_workflow``) in a working directory keyed by the model and the calibration, so that

- a rerun of the same call after a crash, Ctrl-C or a lost session resumes where it stopped;
- another recipe on the same model and calibration reuses the calibration tokens and block 0's inputs
  and Hessians (and any recipe already pruned there);

then publishes the assembled model to ``out`` with a model card that includes the evaluation and the
command. The working directory is ``$THANOS_WORKDIR/<model>-<hash>`` (``THANOS_WORKDIR`` defaults to
``~/.cache/thanos``); the hash covers the model and the calibration (source, samples, length, seed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from thanos.files.atomic import atomic_path
from thanos.files.recipes import select_layers
from thanos.pruning import methods
from thanos.report.labels import LABELS

# how the recipe's stages become Snakemake jobs: one job runs capture, prune and propagate of every
# block in one process (layers of small models prune in milliseconds, a process start costs seconds)
GRANULARITY = "recipe"
METHODS = methods.names()  # thanos/pruning/methods.py: torch-free
EVALUATIONS = ("ppl", "zeroshot")
HUB_SOURCES = {"calibration": "c4", "perplexity": "wikitext2"}
DEFAULT_DAMP = 0.01
DEFAULT_NSAMPLES = 128
MAX_SEQLEN = 2048


def is_local(path: str | Path) -> bool:
    """A path the user means as a file or directory (exists, or is written like a path)."""
    text = str(path)
    return Path(text).expanduser().exists() or text.startswith((".", "/", "~"))


def model_reference(model: str | Path) -> str:
    """A local model directory as an absolute path; a hub id unchanged."""
    if is_local(model):
        path = Path(model).expanduser().resolve()
        if not path.is_dir():
            raise FileNotFoundError(
                f"--model {model}: no such directory; give a Hugging Face model directory"
            )
        return str(path)
    return str(model)


def source_reference(
    source: str | Path, hub_name: str, option: str, text_field: str = "text", check: bool = True
) -> str:
    """``c4``/``wikitext2`` unchanged; a local file or directory as an absolute path. A local source must
    exist and, with ``check``, pass ``thanos.data.textdata.check_files`` (types, encoding, first record): its
    problems are named now, not by a job after the pruning."""
    from thanos.data.textdata import check_files

    if str(source) == hub_name:
        return hub_name
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise FileNotFoundError(f"{option} {source}: no such file or directory (or give {hub_name!r})")
    if check:
        check_files(path, text_field)
    return str(path)


def slug(text: str) -> str:
    """A name usable as a workflow model name and a directory name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return name if name and name[0].isalnum() else f"m{name}"


def model_slug(reference: str) -> str:
    return slug(Path(reference).name if reference.startswith("/") else reference.replace("/", "--"))


def model_facts(reference: str, exclude: Sequence[str] = ()) -> tuple[str, int, list[str], list[str]]:
    """(model_type, max positions, the layers of a block, those ``exclude`` leaves) of a supported model; an
    unsupported one, a local directory without config, safetensors weights or tokenizer files, or an
    ``exclude`` pattern that matches no layer, is refused here, before any job runs. Reads config.json and
    the weights' headers (for a hub id: downloads only config.json)."""
    from thanos.models import Checkpoint, check_tokenizer_files, get_adapter, load_config

    local = Path(reference).is_dir()
    if local:  # config, weights and tokenizer files named here, before any job runs
        config = load_config(reference, full=False)  # config.json as written: no transformers import
        if "max_position_embeddings" not in vars(config):  # left to transformers' defaults
            config = load_config(reference)
    else:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(reference)
        except (OSError, ValueError) as err:
            raise FileNotFoundError(f"--model {reference}: cannot read its config.json ({err})") from err
    try:
        adapter = get_adapter(config)
    except ValueError as err:
        raise ValueError(f"--model {reference}: {err}") from None
    if local:
        Checkpoint(reference)
        check_tokenizer_files(reference)
    try:
        layers = select_layers(adapter.layers, exclude)
    except ValueError as err:
        raise ValueError(f"--exclude: {err}") from None
    return config.model_type, adapter.max_positions, adapter.layers, layers


def recipe_spec(
    method: str,
    sparsity: str | float,
    alpha: float | None,
    blocksize: int | None,
    damp: float,
    exclude: Sequence[str] = (),
    compact: bool | None = None,
    profile: str | None = None,
    owl_m: float | None = None,
    owl_lambda: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """(recipe name, recipe) with the method's defaults filled in, so that the name says everything:
    ``thanos_2-4_a0.1_B512``, ``sparsegpt_u50_a0_B128``, ``magnitude_s30_a0``, ``thanos_n30_a0`` (neurons,
    compact; ``_zeros`` when written in the original shape), and with ``profile`` owl
    ``wanda_u70_a0_owl-m5-l0.08`` (OWL's M and lambda, defaults filled in); excluded layers add ``_x`` and
    a digest of the patterns (``thanos_2-4_a0_B512_x1f2e3d4c``)."""
    from thanos.files.recipes import ConfigError, check_compact, check_profile, pattern_tag
    from thanos.pruning.sparsity import parse_sparsity

    if method not in METHODS:
        raise ValueError(f"--method {method!r}: choose one of {', '.join(METHODS)}")
    try:
        pattern = parse_sparsity(sparsity)
    except ValueError as err:
        raise ValueError(f"--sparsity {sparsity!r}: {err}") from None
    spec = methods.get(method)
    if alpha is None:  # n:m asked of one command means the hardware pattern: every row n:m (alpha 0)
        alpha = 0.0 if pattern.kind == "nm" else spec.default_alpha(pattern.kind)
    blocksize = spec.default_blocksize(pattern.kind) if blocksize is None else blocksize
    try:
        check_compact("recipe", str(pattern), alpha, compact)
    except ConfigError as err:
        raise ValueError(f"--sparsity {sparsity} --alpha {alpha:g}: {err}") from None
    tag = pattern_tag(str(pattern))
    name = f"{method}_{tag}_a{alpha:g}"
    recipe: dict[str, Any] = {"method": method, "sparsity": str(pattern), "alpha": alpha}
    if blocksize is not None:
        recipe["blocksize"] = blocksize
        name += f"_B{blocksize}"
    if damp != DEFAULT_DAMP:
        recipe["damp"] = damp
        name += f"_damp{damp:g}"
    try:
        check_profile("prune-model", str(pattern), profile, owl_m, owl_lambda)
    except ConfigError as err:
        raise ValueError(str(err).replace("prune-model.", "--").replace("_", "-", 1)) from None
    if profile == "owl":
        from thanos.pruning.owl import DEFAULT_LAMBDA, DEFAULT_M

        owl_m = DEFAULT_M if owl_m is None else owl_m
        owl_lambda = DEFAULT_LAMBDA if owl_lambda is None else owl_lambda
        recipe |= {"profile": "owl", "owl_m": owl_m, "owl_lambda": owl_lambda}
        name += f"_owl-m{owl_m:g}-l{owl_lambda:g}"
    if exclude:
        recipe["exclude"] = list(exclude)
        name += "_x" + hashlib.sha256(json.dumps(list(exclude)).encode()).hexdigest()[:8]
    if compact is not None:
        recipe["compact"] = compact
        name += "" if compact else "_zeros"
    return name, recipe


def check_config(config: dict[str, Any]) -> None:
    """Refuse, naming the option, a value the workflow's config schema would refuse once the run has
    started (``--alpha 1.5``, ``--damp 0``, ...): the same schema, checked before anything is written."""
    import jsonschema

    from thanos.runner.workflow_files import workflow_root

    schema = yaml.safe_load((workflow_root() / "workflow" / "schemas" / "config.schema.yaml").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        key = str(error.path[-1]) if error.path else "config"
        raise ValueError(f"--{key.replace('_', '-')} {error.instance!r}: {error.message}")


def default_workdir(model: str, calibration: dict[str, Any]) -> Path:
    """``$THANOS_WORKDIR/<model>-<hash of model and calibration>`` (``~/.cache/thanos`` by default)."""
    root = (
        os.environ.get("THANOS_WORKDIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thanos"
    )
    key = hashlib.sha256(json.dumps([model, calibration], sort_keys=True).encode()).hexdigest()[:10]
    return Path(root).expanduser().resolve() / f"{model_slug(model)}-{key}"


def workflow_config(
    model: str,
    recipe_name: str,
    recipe: dict[str, Any],
    calibration: dict[str, Any],
    *,
    device: str,
    cores: int,
    evaluate: tuple[str, ...],
    ppl_source: str,
    tasks: list[str] | None,
) -> dict[str, Any]:
    """The workflow config of one model and one recipe (keys: workflow/schemas/config.schema.yaml)."""
    config: dict[str, Any] = {
        "results": "results",
        "models": {model_slug(model): {"path": model}},
        "calibration": calibration,
        "chain": "sequential",
        "granularity": GRANULARITY,
        "threads": cores,
        "device": device,
        "recipes": {recipe_name: recipe},
        "perplexity": {"enabled": "ppl" in evaluate, "source": ppl_source},
        "zeroshot": {"enabled": "zeroshot" in evaluate},
        "evaluate_dense": False,
        "report": False,
    }
    if tasks:
        config["zeroshot"]["tasks"] = list(tasks)
    return config


def _evaluation(model_root: Path, evaluate: tuple[str, ...]) -> dict[str, Any] | None:
    """The evaluations this run asked for (an earlier run's may describe an earlier model)."""
    found = {}
    for option, name in (("ppl", "perplexity"), ("zeroshot", "zeroshot")):
        path = model_root / "eval" / f"{name}.json"
        if option in evaluate and path.is_file():
            found[name] = json.loads(path.read_text())
    return found or None


def _print(stream: TextIO, text: str = "") -> None:
    stream.write(text + "\n")
    stream.flush()


def prune_model(
    model: str | Path,
    method: str,
    sparsity: str | float,
    *,
    out: str | Path,
    calibration: str | Path = "c4",
    alpha: float | None = None,
    blocksize: int | None = None,
    damp: float = DEFAULT_DAMP,
    nsamples: int = DEFAULT_NSAMPLES,
    seqlen: int | None = None,
    seed: int = 0,
    text_field: str = "text",
    workdir: str | Path | None = None,
    device: str = "auto",
    evaluate: str | tuple[str, ...] | list[str] = (),
    ppl_source: str | Path = "wikitext2",
    tasks: list[str] | None = None,
    cores: int | None = None,
    exclude: Sequence[str] | None = None,
    compact: bool | None = None,
    stream: TextIO | None = None,
    profile: str | None = None,
    owl_m: float | None = None,
    owl_lambda: float | None = None,
) -> dict[str, Any]:
    """Prune ``model`` (a Hugging Face directory or hub id) with one recipe and write the pruned model,
    loadable with ``AutoModelForCausalLM.from_pretrained``, to ``out``.

    ``method``: magnitude, wanda, sparsegpt or thanos; ``sparsity``: 0.5, "2:4", "4:8", "structured:0.3",
    "neurons:0.3" (MLP neurons; ``compact``, default True for it: the model is written without them, its
    ``intermediate_size`` the kept width);
    ``alpha``: when None, 0 for n:m (every row of every pruned layer n:m: the pattern 2:4 kernels run) and
    the method's default otherwise (Thanos structured: 0.1); pass 0.1 for the paper's n:m variant, which
    keeps 10 % of the rows dense (better perplexity, not usable by n:m kernels); ``blocksize``: the
    method's default when None; ``profile``: "owl" for OWL's per-block sparsities (unstructured only; M
    ``owl_m``, default 5, and ``owl_lambda``, default 0.08), from the dense model's Hessians of every block
    (a dense pass over the model besides the sequential chain);
    ``calibration``: "c4" (the hub) or a local text/jsonl/parquet file or directory, ``nsamples`` windows
    of ``seqlen`` tokens (default min(2048, the model's max positions)); ``evaluate``: "ppl" and/or
    "zeroshot" (``ppl_source``: "wikitext2" or a local file; ``tasks``: lm-eval tasks, default the
    paper's 7); ``exclude``: regular expressions, the layers they match (by name within a block, e.g.
    ``self_attn``) stay dense. Progress goes to ``stream`` (stderr). Rerunning the same call resumes.

    Returns the pruning report (``pruning_report.json``) with ``out``, ``workdir`` and ``evaluation``
    added. Raises ``thanos.runner.run_workflow.WorkflowFailed`` when a job fails or the run is interrupted."""
    from thanos.jobs.worker import LocalWorker
    from thanos.runner.progress import Progress, clock_text, log_tail
    from thanos.runner.run_workflow import WorkflowFailed, run_workflow
    from thanos.stages.achieved_sparsity import summarize
    from thanos.stages.card import CARD, model_card, nm_note, pattern_text
    from thanos.stages.publish import check_out, publish

    stream = stream if stream is not None else sys.stderr
    if isinstance(evaluate, str):
        evaluate = tuple(e.strip() for e in evaluate.split(",") if e.strip())
    evaluate = tuple(evaluate)
    unknown = [e for e in evaluate if e not in EVALUATIONS]
    if unknown:
        raise ValueError(f"--evaluate {','.join(unknown)}: choose from {', '.join(EVALUATIONS)}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ValueError(f"--device {device!r}: choose auto, cpu, cuda or cuda:N")
    out = Path(out).expanduser().resolve()
    check_out(out)
    exclude = list(exclude or ())
    name, recipe = recipe_spec(
        method, sparsity, alpha, blocksize, damp, exclude, compact, profile, owl_m, owl_lambda
    )
    reference = model_reference(model)
    cores = cores or os.cpu_count() or 1
    worker = LocalWorker(cores)  # the jobs' process: imports torch and transformers while this one does
    model_type, max_positions, all_layers, layers = model_facts(reference, exclude)
    if recipe["sparsity"].startswith("neurons:") and Path(reference).is_dir():
        from thanos.models import open_model
        from thanos.models.neurons import mlp_layout

        try:  # a model whose neurons cannot be removed is refused before any job runs
            mlp_layout(*open_model(reference, full_config=False)[1:])
        except ValueError as err:
            raise ValueError(f"--model {reference}: {err}") from None
    seqlen = min(MAX_SEQLEN, max_positions) if seqlen is None else seqlen
    if seqlen > max_positions:
        raise ValueError(
            f"--seqlen {seqlen} exceeds the model's {max_positions} positions; give --seqlen {max_positions} "
            "or less"
        )
    calib = {
        "source": source_reference(calibration, HUB_SOURCES["calibration"], "--calibration", text_field),
        "nsamples": nsamples,
        "seqlen": seqlen,
        "seed": seed,
        "text_field": text_field,
    }
    ppl = source_reference(ppl_source, HUB_SOURCES["perplexity"], "--ppl-source", check="ppl" in evaluate)
    workdir = Path(workdir).expanduser().resolve() if workdir else default_workdir(reference, calib)
    config = workflow_config(
        reference,
        name,
        recipe,
        calib,
        device=device,
        cores=cores,
        evaluate=evaluate,
        ppl_source=ppl,
        tasks=tasks,
    )
    check_config(config)
    configfile = workdir / "configs" / f"{name}.yaml"
    with atomic_path(configfile) as tmp:
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    log_file = workdir / "logs" / f"{name}.log"
    label = f"{LABELS[method].label} {pattern_text(recipe['sparsity'], recipe['alpha'])}"
    if recipe.get("profile") == "owl":
        label += f" (OWL per block: M {recipe['owl_m']:g}, lambda {recipe['owl_lambda']:g})"
    _print(stream, f"thanos prune-model: {reference} ({model_type}) -> {out}")
    _print(stream, f"  recipe {name}: {label}")
    if note := nm_note(recipe["sparsity"], recipe["alpha"]):
        _print(stream, f"  {note}")
    if exclude:
        shown = ", ".join(repr(p) for p in exclude)
        dense = [layer for layer in all_layers if layer not in layers]
        more = f", ... ({len(dense)} in all)" if len(dense) > 6 else ""
        _print(stream, f"  --exclude {shown}: left dense in every block: {', '.join(dense[:6])}{more}")
    calibrated = methods.get(method).needs_hessian
    data = f"{nsamples} x {seqlen} tokens of {calib['source']}" if calibrated else "no calibration"
    _print(stream, f"  {data} | device {device} | {cores} cores | evaluate: {', '.join(evaluate) or 'no'}")
    _print(stream, f"  workdir {workdir} (kept: a rerun resumes, other recipes reuse the calibration)")
    _print(stream, f"  full log {log_file}")
    progress = Progress(workdir, stream=stream)
    started = time.monotonic()
    with progress:
        try:
            run_workflow(workdir, configfile, progress, log_file, worker, cores=cores)
        except WorkflowFailed as err:
            progress.clear()
            took = clock_text(time.monotonic() - started)
            if err.interrupted:
                _print(
                    stream,
                    f"interrupted after {took}: finished jobs are kept; run the same command to resume",
                )
            else:
                what = "; ".join(job.label for job in progress.failed) or str(err)
                _print(stream, f"FAILED after {took}: {what}")
                for job in progress.failed:
                    for log in job.logs:
                        _print(stream, f"--- {job.label}: {workdir / log} (its full log) says ---")
                        _print(stream, log_tail(workdir / log))
                _print(stream, f"--- full log: {log_file}")
                _print(stream, "fix the cause and run the same command again: finished jobs are kept")
            raise
    if progress.nothing_to_do:
        progress.note("nothing to do: every job finished in an earlier run")
    model_root = workdir / "results" / model_slug(reference) / name
    model_dir = model_root / "model"
    report = json.loads((model_dir / "pruning_report.json").read_text())
    evaluation = _evaluation(model_root, evaluate)
    summary = summarize(model_dir, report, described=True)  # assemble wrote its sparsity.json
    card = model_card(report, summary, evaluation, out)
    before = publish(model_dir, out, {CARD: card})
    took = clock_text(time.monotonic() - started)
    if not before:
        _print(stream, f"unchanged (it already holds this model): {out} ({took})")
    elif before == ["new"]:
        _print(stream, f"written: {out} ({took})")
    else:
        _print(stream, f"written again: {out} ({took}); what was there had changed: {'; '.join(before)}")
    _print(
        stream,
        f"  {label}: {100 * summary.pruned_sparsity:.2f} % of the pruned weights are zero "
        f"({100 * summary.global_sparsity:.2f} % of all parameters)",
    )
    if compact := report.get("compact"):
        before, after = compact["parameters"]["original"], compact["parameters"]["kept"]
        _print(
            stream,
            f"  compact: MLP width {compact['original_width']} -> {compact['kept_width']} neurons per block "
            f"({compact['width_key']}); {after:,} of {before:,} parameters "
            f"({100 * (1 - after / before):.1f} % fewer)",
        )
    if evaluation and "perplexity" in evaluation:
        result = evaluation["perplexity"]
        _print(stream, f"  perplexity {result['ppl']:.2f} ({result['dataset']}, seqlen {result['seqlen']})")
    if evaluation and "zeroshot" in evaluation:
        _print(stream, f"  zero-shot mean accuracy {100 * evaluation['zeroshot']['mean_acc']:.2f} %")
    _print(stream, f'  load it: AutoModelForCausalLM.from_pretrained("{out}")')
    return {**report, "out": str(out), "workdir": str(workdir), "evaluation": evaluation}
