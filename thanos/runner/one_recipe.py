"""Prune one model with one recipe in one call: ``thanos.prune_model`` and ``thanos prune-model``.

It runs every stage of the recipe in this process (``thanos.stages.engine``: model info, calibration,
block 0's inputs and Hessians, the sequential chain, assembly), then the evaluations asked for, in a
working directory keyed by the model and the calibration, laid out as the workflow's results, so that

- a rerun of the same call after a crash, Ctrl-C or a lost session resumes where it stopped;
- another recipe on the same model and calibration reuses the calibration tokens and block 0's inputs
  and Hessians (and any recipe already pruned there);

then publishes the assembled model to ``out`` with a model card that includes the evaluation and the
command. The working directory is ``$THANOS_WORKDIR/<model>-<hash>`` (``THANOS_WORKDIR`` defaults to
``~/.cache/thanos``); the hash covers the model and the calibration (source, samples, length, seed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from thanos.files.layout import DENSE, Layout, store_name
from thanos.pruning.sparsity import COMPACT_KINDS
from thanos.recipe import ConfigError, Recipe, select_layers
from thanos.report.labels import LABELS
from thanos.runner.combined import combined_parts, prune_combined
from thanos.runner.disk import DiskEstimate
from thanos.runner.progress import clock_text
from thanos.stages.engine import Calibration, RecipeFiles

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# what publishing returns: (report, evaluation, sparsity summary, what changed in ``out``)
Published = tuple[dict[str, Any], dict[str, Any] | None, Any, list[str]]

EVALUATIONS = ("ppl", "zeroshot")
HUB_SOURCES = {"calibration": "c4", "perplexity": "wikitext2"}
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
    problems are named now, not by a step after the pruning."""
    from thanos.data.textdata import check_files

    if str(source) == hub_name:
        if check:
            check_hub(option, hub_name)
        return hub_name
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise FileNotFoundError(f"{option} {source}: no such file or directory (or give {hub_name!r})")
    if check:
        check_files(path, text_field)
    return str(path)


def check_hub(option: str, hub_name: str) -> None:
    """Refuse a hub source (``c4``, ``wikitext2``) when the hub cannot be reached from here (offline mode,
    no network), naming the option that takes a local file instead, before anything runs."""
    offline = [name for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if os.environ.get(name) == "1"]
    why = f"{offline[0]}=1" if offline else None
    if why is None:  # one HEAD request the way the download goes (HF_ENDPOINT, proxies)
        from huggingface_hub import constants
        from huggingface_hub.utils import get_session

        try:
            get_session().head(constants.ENDPOINT, timeout=10)
        except Exception as err:  # noqa: BLE001 - requests/httpx raise several kinds for no network
            why = f"{constants.ENDPOINT} cannot be reached: {type(err).__name__}"
    if why is not None:
        raise ValueError(
            f"{option} {hub_name}: the hub is not available ({why}); give a local text, jsonl or parquet "
            f"file or directory: {option} FILE"
        )


def slug(text: str) -> str:
    """A name usable as a workflow model name and a directory name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return name if name and name[0].isalnum() else f"m{name}"


def model_slug(reference: str) -> str:
    return slug(Path(reference).name if reference.startswith("/") else reference.replace("/", "--"))


def model_facts(
    reference: str, exclude: Sequence[str] = ()
) -> tuple[str, int, list[str], list[str], torch.dtype]:
    """(model_type, max positions, the layers of a block, those ``exclude`` leaves, the checkpoint's dtype)
    of a supported model; an
    unsupported one, a local directory without config, safetensors weights or tokenizer files, or an
    ``exclude`` pattern that matches no layer, is refused here, before any step runs. Reads config.json and
    the weights' headers (for a hub id: downloads only config.json)."""
    from thanos.models import Checkpoint, check_tokenizer_files, get_adapter, load_config

    local = Path(reference).is_dir()
    if local:  # config, weights and tokenizer files named here, before any step runs
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
    return config.model_type, adapter.max_positions, adapter.layers, layers, adapter.dtype


def build_recipe(method: str, sparsity: str | float, **options: Any) -> Recipe:
    """The ``Recipe`` of ``prune_model``'s keywords (None: the default); an invalid value is refused
    naming its command-line option (``--alpha 1.5: ...``)."""
    given = {name: value for name, value in options.items() if value is not None}
    try:
        recipe = Recipe(None, method, sparsity, **given, key="prune-model")
    except ConfigError as err:
        match = re.match(r"prune-model\.([\w.]+): (.*)", str(err), re.S)
        if match is None:
            raise ValueError(str(err)) from None
        name, text = match.groups()
        path = name.split(".")  # recover.epochs: --recover-epochs
        value = {"method": method, "sparsity": sparsity, **options}.get(path[0])
        for part in path[1:]:
            value = value.get(part) if isinstance(value, dict) else None
        raise ValueError(f"--{'-'.join(path).replace('_', '-')} {value!r}: {text}") from None
    if recipe.sparsity.kind == "depth" and recipe.recover is not None:
        raise ValueError(
            f"--recover with --sparsity {sparsity}: removing whole blocks prunes no weight of the kept "
            "ones, so there is nothing to recover; combine it with a width (depth:4+neurons:0.3 --recover "
            "recovers the neurons part)"
        )
    if recipe.sparsity.kind not in ("nm", "depth") and recipe.sparsity.p == 0:
        raise ValueError(f"--sparsity {sparsity!r}: prunes nothing; give a fraction above 0 (e.g. 0.5)")
    unused = [name for name in ("blocksize", "damp") if name in given and not _uses(recipe, name)]
    if unused:
        flags = " and ".join(f"--{name}" for name in unused)
        raise ValueError(
            f"{flags}: {method} {sparsity} does not use "
            f"{'them; leave them' if len(unused) > 1 else 'it; leave it'} out"
        )
    return recipe


def _uses(recipe: Recipe, option: str) -> bool:
    """Whether ``recipe``'s method uses ``option``: the damping of H for a method that updates the kept
    weights with the damped H^-1, the block size B for a method and pattern that prune in blocks of
    columns."""
    from thanos.pruning import methods

    method = methods.get(recipe.method)
    if option == "damp":
        return method.updates_weights
    return method.default_blocksize(recipe.sparsity.kind) is not None


def default_workdir(model: str, calibration: dict[str, Any]) -> Path:
    """``$THANOS_WORKDIR/<model>-<hash of model and calibration>`` (``~/.cache/thanos`` by default)."""
    from thanos.runner.workdirs import default_root

    key = hashlib.sha256(json.dumps([model, calibration], sort_keys=True).encode()).hexdigest()[:10]
    return default_root() / f"{model_slug(model)}-{key}"


def _print(stream: TextIO, text: str = "") -> None:
    stream.write(text + "\n")
    stream.flush()


def parameter_names(text: str, names: Sequence[str]) -> str:
    """``text`` with the command's flags of ``names`` written as Python parameters: ``--sparsity '3:2'`` ->
    ``sparsity='3:2'``, ``--damp:`` -> ``damp:``, ``--recover-epochs 0`` -> ``recover['epochs']=0``,
    ``--no-disk-check`` -> ``disk_check=False``; other text unchanged."""

    def swap(match: re.Match[str]) -> str:
        flag, space = match.group(1), match.group(2)
        name = flag.replace("-", "_")
        if flag == "no-disk-check":
            return "disk_check=False" + space
        if name.startswith("recover_") and "recover" in names:
            name = f"recover[{name.removeprefix('recover_')!r}]"
        elif name not in names:
            return match.group(0)
        following = match.string[match.end() :].split(" ", 1)[0]
        if space and following not in WORDS:  # a value follows: ``name=value``
            return f"{name}="
        return name + space

    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)( ?)", swap, text)


# words that follow a flag named in a sentence rather than a flag given a value
WORDS = {"or", "and", "on", "if", "is", "was", "to", "with", "runs", "the", "a", "in", "for", "of"}


def _with_parameter_names(function: Any) -> Any:
    """``function`` whose bad-input errors name its parameters (``sparsity='3:2': ...``) instead of the
    command's flags (``--sparsity '3:2': ...``); the command calls ``function.__wrapped__``, which names the
    flags."""
    import functools
    import inspect

    names = list(inspect.signature(function).parameters)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (ValueError, TypeError, OSError) as err:
            if len(err.args) == 1 and isinstance(err.args[0], str):
                err.args = (parameter_names(err.args[0], names),)
            raise

    return wrapper


@_with_parameter_names
def prune_model(
    model: str | Path,
    method: str,
    sparsity: str | float,
    *,
    out: str | Path,
    calibration: str | Path = "c4",
    alpha: float | None = None,
    blocksize: int | None = None,
    damp: float | None = None,
    nsamples: int = DEFAULT_NSAMPLES,
    seqlen: int | None = None,
    seed: int = 0,
    text_field: str = "text",
    workdir: str | Path | None = None,
    device: str = "auto",
    compute_dtype: str = "auto",
    evaluate: str | tuple[str, ...] | list[str] = (),
    ppl_source: str | Path = "wikitext2",
    tasks: list[str] | None = None,
    include_path: str | Path | None = None,
    cores: int | None = None,
    exclude: Sequence[str] | None = None,
    compact: bool | None = None,
    stream: TextIO | None = None,
    profile: str | None = None,
    owl_m: float | None = None,
    owl_lambda: float | None = None,
    overwrite: bool = False,
    recover: bool | dict[str, Any] | None = None,
    keep: str = "needed",
    disk_check: bool = True,
    dry_run: bool = False,
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
    paper's 7, ``include_path``: a directory of local lm-eval task YAMLs that defines them);
    ``compute_dtype``: the dtype the blocks run in (auto: the checkpoint's where the device multiplies it
    natively, a GPU or a CPU with bf16 instructions, else float32; float32, bfloat16,
    float16); ``exclude``: regular expressions, the layers they match (by name within a block, e.g.
    ``self_attn``) stay dense; ``overwrite``: replace an ``out`` that holds another model's or recipe's
    result; ``recover``: True (the defaults) or {epochs, lr, batch_size, holdout, target}: each pruned
    block's kept weights trained to match the dense block's outputs (``thanos.pruning.recovery``);
    ``keep``: what the working directory keeps (``thanos.runner.disk``): "needed" (what a resume and
    another recipe on the same calibration need: each block's own stores are deleted once it is done, the
    pruned layers once the model is assembled) or "all"; ``disk_check``: refuse, before anything runs, a
    run whose estimated disk use exceeds the free space; ``dry_run``: check everything and say what the run
    would do and the disk it needs, then return without running anything.
    Progress goes to ``stream`` (stderr). Rerunning the same call resumes.

    Returns the pruning report (``pruning_report.json``) with ``out``, ``workdir`` and ``evaluation``
    added (a dry run: ``out``, ``workdir`` and ``disk``, the estimate's bytes). Raises ``RunFailed`` when
    a step fails or the run is interrupted (finished steps are kept)."""
    stream = stream if stream is not None else sys.stderr
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model: give a Hugging Face model directory or hub id, not a loaded {type(model).__name__}; "
            "save it with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), then pass DIR"
        )
    if combined_parts(sparsity) is not None:  # depth:4+neurons:0.3: one run per part (thanos.runner.combined)
        arguments = {name: value for name, value in locals().items() if name in PARAMETERS}
        return prune_combined(prune_model.__wrapped__, arguments)
    recipe = build_recipe(
        method,
        sparsity,
        alpha=alpha,
        blocksize=blocksize,
        damp=damp,
        exclude=list(exclude or ()),
        compact=compact,
        profile=profile,
        owl_m=owl_m,
        owl_lambda=owl_lambda,
        recover=recover,
    )
    calibration_options = {"source": calibration, "nsamples": nsamples, "seqlen": seqlen, "seed": seed}
    run_plan = plan(
        model,
        recipe,
        out,
        calibration_options | {"text_field": text_field},
        Evaluation(_evaluations(evaluate), ppl_source, tasks, str(include_path) if include_path else None),
        Resources(device, cores or os.cpu_count() or 1, workdir, compute_dtype, keep),
        overwrite,
        disk_check,
    )
    announce(run_plan, stream)
    if dry_run:
        _print(stream, "dry run: everything above was checked; nothing was run or written")
        disk = dataclasses.asdict(run_plan.disk) if run_plan.disk is not None else None
        return {"out": str(run_plan.out), "workdir": str(run_plan.workdir), "disk": disk}
    started = time.monotonic()
    report, evaluation, summary, before = run(run_plan, stream, started)
    print_summary(run_plan, report, evaluation, summary, before, stream, started)
    return {**report, "out": str(run_plan.out), "workdir": str(run_plan.workdir), "evaluation": evaluation}


PARAMETERS = tuple(inspect.signature(prune_model).parameters)


class RunFailed(RuntimeError):
    """A ``prune_model`` run stopped before it published its model (a step failed, or it was
    interrupted); what it finished is kept, and the same call resumes."""

    def __init__(self, message: str, interrupted: bool = False) -> None:
        super().__init__(message)
        self.interrupted = interrupted


@dataclass(frozen=True)
class Evaluation:
    """The evaluations a ``prune_model`` call asks for: ``kinds`` of ``EVALUATIONS``, where from."""

    kinds: tuple[str, ...] = ()
    ppl_source: str | Path = "wikitext2"
    tasks: list[str] | None = None
    include_path: str | None = None  # a directory of local lm-eval task YAMLs (absolute once checked)


@dataclass(frozen=True)
class Resources:
    """Where a ``prune_model`` call runs: the device, the cores, the working directory (None: default)."""

    device: str = "auto"
    cores: int = 1
    workdir: str | Path | None = None
    compute_dtype: str = "auto"  # the dtype the blocks are computed in (``--compute-dtype``)
    keep: str = "needed"  # what the working directory keeps (``thanos.runner.disk.KEEP``)


@dataclass(frozen=True)
class Plan:
    """What a ``prune_model`` call does, every input checked before anything is written."""

    recipe: Recipe
    reference: str  # the model: an absolute local directory or a hub id
    model_type: str
    out: Path
    workdir: Path
    calibration: Calibration
    evaluation: Evaluation  # its sources checked and resolved
    resources: Resources
    left_dense: list[str]  # the block's layers that ``exclude`` keeps dense
    computes_in: str = "float32"  # the compute dtype as the header shows it (``compute_dtype_text``)
    disk: DiskEstimate | None = None  # None: not estimated (a hub model not downloaded yet)

    @property
    def files(self) -> RecipeFiles:
        """Where the run's stages write: the workflow's layout under ``WORKDIR/results``."""
        return RecipeFiles.of(Layout(str(self.workdir / "results")), model_slug(self.reference), self.recipe)

    @property
    def log_file(self) -> Path:
        return self.workdir / "logs" / f"{self.recipe.name}.log"

    @property
    def model_root(self) -> Path:
        return self.workdir / "results" / model_slug(self.reference) / self.recipe.name

    @property
    def label(self) -> str:
        """``Thanos 2:4``, ``Wanda unstructured 70 % (OWL per block: M 5, lambda 0.08)``."""
        from thanos.stages.card import pattern_text

        pattern = pattern_text(self.recipe.sparsity, self.recipe.alpha)
        if self.recipe.sparsity.kind == "depth":  # the blocks are chosen by their score, not the method
            return f"Depth: {pattern} removed (the lowest block influence on the calibration text)"
        label = f"{LABELS[self.recipe.method].label} {pattern}"
        if self.recipe.owl:
            label += f" (OWL per block: M {self.recipe.owl_m:g}, lambda {self.recipe.owl_lambda:g})"
        return label


def _evaluations(evaluate: str | Sequence[str]) -> tuple[str, ...]:
    """``"ppl,zeroshot"`` or a sequence, checked against ``EVALUATIONS``."""
    if isinstance(evaluate, str):
        evaluate = [e.strip() for e in evaluate.split(",") if e.strip()]
    unknown = [e for e in evaluate if e not in EVALUATIONS]
    if unknown:
        raise ValueError(f"--evaluate {','.join(unknown)}: choose from {', '.join(EVALUATIONS)}")
    return tuple(evaluate)


def plan(
    model: str | Path,
    recipe: Recipe,
    out: str | Path,
    calibration: dict[str, Any],
    evaluation: Evaluation,
    resources: Resources,
    overwrite: bool = False,
    disk_check: bool = True,
) -> Plan:
    """Check the model, the output, the calibration and evaluation sources of one run: what is wrong is
    refused here, naming the option, before anything is written. ``calibration``: {source, nsamples,
    seqlen (None: the model's, at most 2048), seed, text_field}."""
    from thanos.runner.disk import KEEP
    from thanos.stages.publish import check_out

    if resources.keep not in KEEP:
        raise ValueError(f"--keep {resources.keep!r}: choose {' or '.join(KEEP)}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", resources.device):
        raise ValueError(f"--device {resources.device!r}: choose auto, cpu, cuda or cuda:N")
    for name in ("nsamples", "seqlen"):
        value = calibration[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"--{name} {value!r}: expected a whole number >= 1")
    if isinstance(calibration["seed"], bool) or not isinstance(calibration["seed"], int):
        raise ValueError(f"--seed {calibration['seed']!r}: expected a whole number")
    out = Path(out).expanduser().resolve()
    reference = model_reference(model)
    check_out_beside(out, reference, recipe, overwrite)
    check_out(out)
    check_device(resources.device)
    model_type, max_positions, all_layers, layers, checkpoint_dtype = model_facts(reference, recipe.exclude)
    computes_in = compute_dtype_text(resources.device, resources.compute_dtype, checkpoint_dtype)
    if recipe.sparsity.kind in (*COMPACT_KINDS, "depth") and Path(reference).is_dir():
        check_structure(reference, recipe)
    calib = _calibration(calibration, max_positions, recipe.needs_calibration)
    if recipe.recover is not None:
        try:
            recipe.recover.held_out(calib["nsamples"])
        except ConfigError as err:
            given = f"--recover-holdout {recipe.recover.holdout:g} with --nsamples {calib['nsamples']}"
            raise ValueError(f"{given}: {err}") from None
    ppl = source_reference(
        evaluation.ppl_source, HUB_SOURCES["perplexity"], "--ppl-source", check="ppl" in evaluation.kinds
    )
    include_path = evaluation.include_path
    if include_path is not None:  # the directory, and the tasks named, found now rather than after pruning
        from thanos.evaluation.zeroshot import task_manager

        include_path = str(Path(include_path).expanduser().resolve())
        task_manager(list(evaluation.tasks or []), include_path)
    workdir = resources.workdir
    workdir = Path(workdir).expanduser().resolve() if workdir else default_workdir(reference, calib)
    left_dense = [layer for layer in all_layers if layer not in layers]
    run_plan = Plan(
        recipe,
        reference,
        model_type,
        out,
        workdir,
        Calibration(**calib),
        dataclasses.replace(evaluation, ppl_source=ppl, include_path=include_path),
        resources,
        left_dense,
        computes_in,
        disk_estimate(reference, recipe, calib),
    )
    if disk_check:
        check_disk(run_plan)
    return run_plan


def check_structure(reference: str, recipe: Recipe) -> None:
    """Refuse, before any step runs, a model whose neurons (``neurons:p``), heads (``heads:p``,
    ``kv_heads:p``) or blocks (``depth:k``) cannot be removed, or whose code cannot hold what is left,
    naming the model type and why."""
    from thanos.models import open_layout

    try:
        model_dir, layout, checkpoint = open_layout(reference)
        if recipe.sparsity.kind == "depth":
            from thanos.pruning.sparsity import depth_count
            from thanos.stages.depth import check_depth

            try:
                depth_count(recipe.sparsity, layout.num_blocks)
            except ValueError as err:  # the count, not the model: named by its option
                raise ValueError(f"--sparsity {recipe.sparsity}: {err}") from err
            check_depth(model_dir, layout.model_type, recipe.sparsity, layout.num_blocks)
        elif recipe.sparsity.kind == "neurons":
            from thanos.models.neurons import mlp_layout

            mlp_layout(layout, checkpoint)
        else:
            from thanos.models.heads import attention_layout, check_expressible

            attention = attention_layout(model_dir, layout, checkpoint)
            try:
                attention.removed(recipe.sparsity)
            except ValueError as err:  # the count, not the model: named by its option
                raise ValueError(f"--sparsity {recipe.sparsity}: {err}") from err
            if recipe.compact:
                check_expressible(model_dir, attention, recipe.sparsity)
    except ValueError as err:
        if str(err).startswith("--sparsity"):
            raise
        raise ValueError(f"--model {reference}: {err}") from None


def disk_estimate(reference: str, recipe: Recipe, calib: dict[str, Any]) -> DiskEstimate | None:
    """The run's disk use (``thanos.runner.disk``) for a local model; None for a hub id (its files are not
    here yet)."""
    from thanos.models import open_layout
    from thanos.runner.disk import estimate

    if not Path(reference).is_dir():
        return None
    model_dir, layout, checkpoint = open_layout(reference)
    return estimate(layout, checkpoint, model_dir, recipe, calib["nsamples"], calib["seqlen"])


def check_disk(run_plan: Plan) -> None:
    """Refuse a run that would not fit: what the working directory still needs (its peak less what this
    recipe finds there: a resumed run has written part of it, another recipe the shared stores) and the copy
    in ``out``."""
    from thanos.runner.disk import check_free
    from thanos.stages.provenance import path_bytes

    disk, files, keep = run_plan.disk, run_plan.files, run_plan.resources.keep
    if disk is None:
        return
    dense, recipe = files.dense_dir, run_plan.recipe
    shared: list[Path] = []  # the dense chain's stores the recipe reads: block 0's, or every block's
    if dense is not None:
        every = recipe.owl or recipe.recover is not None
        shared = [dense] if every else [dense / store_name(kind, 0) for kind in ("inputs", "hessians")]
    mine = [files.tokens, *shared, files.chain_dir, files.pruned_root, files.model_dir]
    present = sum(path_bytes(path) for path in mine if path is not None)
    check_free(
        run_plan.workdir,
        run_plan.out,
        max(0, disk.peak(keep) - present),
        disk.model,
        max(0, disk.with_out(keep) - present),
    )


def check_out_beside(out: Path, reference: str, recipe: Recipe, overwrite: bool) -> None:
    """Refuse an ``out`` that is the input model, inside it or holding it, and, unless ``overwrite``, one
    that holds another model's or another recipe's result (the same recipe's is written again)."""
    if Path(reference).is_dir():
        model = Path(reference).resolve()
        where = (
            "is"
            if out == model
            else "is inside"
            if model in out.parents
            else "holds"
            if out in model.parents
            else ""
        )
        if where:
            raise ValueError(f"--out {out} {where} the input model {model}; give a directory outside it")
    report = out / "pruning_report.json"
    if overwrite or not report.is_file():
        return
    try:
        previous = json.loads(report.read_text())
        name, path = previous["recipe"]["name"], previous["model"]["path"]
    except (OSError, ValueError, KeyError, TypeError):
        name, path = "an unreadable report", "?"
    same_model = path == reference or not Path(reference).is_dir()
    if name != recipe.name or not same_model:
        raise ValueError(
            f"--out {out} holds another pruned model ({name} of {path}); give another --out, or "
            "--overwrite to replace it"
        )


def compute_dtype_text(device: str, compute_dtype: str, checkpoint: torch.dtype) -> str:
    """``float32`` (the checkpoint's dtype too) or ``float32 (checkpoint bfloat16)``: what the header shows;
    an unknown or unsupported ``compute_dtype`` is refused naming ``--compute-dtype``."""
    from thanos.data.storage import dtype_name
    from thanos.stages.common import Compute

    try:
        compute = Compute.of(device, compute_dtype, checkpoint)
    except ValueError as err:
        raise ValueError(f"--compute-dtype {compute_dtype}: {err}") from None
    if not compute.converts:
        return dtype_name(compute.dtype)
    return f"{dtype_name(compute.dtype)} (checkpoint {dtype_name(checkpoint)})"


def check_device(device: str) -> None:
    """Refuse ``cuda``/``cuda:N`` when no such device is visible, before anything runs (the stages' own
    check, ``thanos.stages.common.resolve_device``)."""
    if device.startswith("cuda"):
        from thanos.stages.common import resolve_device

        resolve_device(device)


def _calibration(calibration: dict[str, Any], max_positions: int, used: bool) -> dict[str, Any]:
    """The checked calibration: a checked source (when the recipe ``used`` it), the window length within
    the model's."""
    seqlen = calibration["seqlen"]
    seqlen = min(MAX_SEQLEN, max_positions) if seqlen is None else seqlen
    if seqlen > max_positions:
        raise ValueError(
            f"--seqlen {seqlen} exceeds the model's {max_positions} positions; give --seqlen {max_positions} "
            "or less"
        )
    source = source_reference(
        calibration["source"], HUB_SOURCES["calibration"], "--calibration", calibration["text_field"], used
    )
    return {**calibration, "source": source, "seqlen": seqlen}


def announce(run_plan: Plan, stream: TextIO) -> None:
    """What the run will do, before it starts: the model, the recipe, the data, where things go."""
    from thanos.stages.card import nm_note

    recipe, calib = run_plan.recipe, run_plan.calibration
    _print(stream, f"thanos prune-model: {run_plan.reference} ({run_plan.model_type}) -> {run_plan.out}")
    _print(stream, f"  recipe {recipe.name}: {run_plan.label}")
    if note := nm_note(recipe.sparsity, recipe.alpha):
        _print(stream, f"  {note}")
    if recipe.recover is not None:
        rec = recipe.recover
        _print(
            stream,
            f"  then recovery of every block: {rec.epochs} epoch(s), lr {rec.lr:g}, towards "
            f"{'the dense model' if rec.target == 'dense' else 'the dense block'}, "
            f"{rec.held_out(run_plan.calibration.nsamples)} window(s) held out",
        )
    if recipe.exclude:
        shown = ", ".join(repr(p) for p in recipe.exclude)
        dense = run_plan.left_dense
        more = f", ... ({len(dense)} in all)" if len(dense) > 6 else ""
        _print(stream, f"  --exclude {shown}: left dense in every block: {', '.join(dense[:6])}{more}")
    data = f"{calib.nsamples} x {calib.seqlen} tokens of {calib.source}"
    data = data if recipe.needs_hessian else "no calibration"
    evaluate = ", ".join(run_plan.evaluation.kinds) or "no"
    resources = run_plan.resources
    _print(
        stream,
        f"  {data} | device {resources.device}, computes in {run_plan.computes_in} | {resources.cores} cores "
        f"| evaluate: {evaluate}",
    )
    _print(
        stream, f"  workdir {run_plan.workdir} (kept: a rerun resumes, other recipes reuse the calibration)"
    )
    if (disk := run_plan.disk) is not None:
        from thanos.runner.disk import free_bytes, size_text

        keep = resources.keep
        _print(
            stream,
            f"  disk: the workdir up to {size_text(disk.peak(keep))}, {size_text(disk.kept(keep))} after the "
            f"run (--keep {keep}); --out {size_text(disk.model)}; "
            f"{size_text(free_bytes(run_plan.workdir)[0])} free",
        )
    _print(stream, f"  full log {run_plan.log_file}")


def run(run_plan: Plan, stream: TextIO, started: float) -> Published:
    """Run the recipe's stages (``thanos.stages.engine``) in this process, publish the model, then run the
    evaluations and add them to its card; progress lines go to ``stream``, everything else to the run's log
    file. Returns ``publish_result``'s (report, evaluation, summary, what changed in ``out``).

    A failed or interrupted step says what failed and how to resume, then raises ``RunFailed``; a failed
    evaluation leaves the published model in place (without it) and says so."""
    from thanos.runner.evaluations import Evaluations
    from thanos.runner.progress import StepProgress, full_log
    from thanos.runner.workdir_lock import exclusive_workdir
    from thanos.runner.workdirs import record_run

    plan_eval = run_plan.evaluation
    root = run_plan.model_root
    evaluations = Evaluations(
        run_plan.files.model_dir, root / "eval", run_plan.reference, root.parent / DENSE / "eval",
        plan_eval.kinds, str(plan_eval.ppl_source), plan_eval.tasks, run_plan.resources.device,
        run_plan.recipe.name, run_plan.resources.compute_dtype, plan_eval.include_path,
    )  # fmt: skip
    progress = StepProgress(stream, started=started)
    with exclusive_workdir(run_plan.workdir), progress, full_log(run_plan.log_file), _threads(run_plan):
        log.info("thanos prune-model: %s, recipe %s", run_plan.reference, run_plan.recipe.to_json())
        calibration = dataclasses.asdict(run_plan.calibration)
        record_run(run_plan.workdir, run_plan.reference, calibration, run_plan.recipe.name)
        steps = _guarded(run_plan, progress, stream, started, lambda: _run_steps(run_plan, progress.on_step))
        evaluation = evaluations.current()
        published = publish_result(run_plan, evaluation)
        if run_plan.evaluation.kinds and evaluation is None:
            progress.note(f"published: {run_plan.out}; evaluating it")
            evaluation = _guarded(
                run_plan, progress, stream, started, lambda: evaluations.run(steps), published=True
            )
            published = update_card(run_plan, evaluation, published[3])
    if not steps.computed:
        progress.note("nothing to do: every step finished in an earlier run")
    elif steps.reused:
        progress.note(f"resumed: {len(steps.reused)} step(s) finished in an earlier run were kept")
    return published


def _guarded(
    run_plan: Plan, progress: Any, stream: TextIO, started: float, work: Any, published: bool = False
) -> Any:
    """``work()``; a failure or an interruption is said on ``stream`` (what failed, its ``ERROR:`` line,
    where the traceback is, how to resume) and raised as ``RunFailed``."""
    try:
        return work()
    except KeyboardInterrupt:
        log.warning("interrupted during: %s", progress.current)
        progress.clear()
        took = clock_text(time.monotonic() - started)
        _print(stream, f"interrupted after {took}: finished steps are kept; run the same command to resume")
        raise RunFailed("interrupted", interrupted=True) from None
    except Exception as err:
        log.exception("%s failed", progress.current)
        _failed(run_plan, progress.current, err, stream, started, published)
        raise RunFailed(str(err)) from err


def _failed(
    run_plan: Plan, step: str | None, err: BaseException, stream: TextIO, started: float, published: bool
) -> None:
    """What failed, the error's one line, where the full log is, how to resume."""
    from thanos.errors import describe

    took = clock_text(time.monotonic() - started)
    _print(stream, f"FAILED after {took}: {step or 'the run'}")
    _print(stream, f"ERROR: {describe(err)}")
    _print(stream, f"--- the traceback and the full log: {run_plan.log_file}")
    if published:
        _print(stream, f"the pruned model is published without this evaluation: {run_plan.out}")
    _print(stream, "fix the cause and run the same command again: finished steps are kept")


@contextlib.contextmanager
def _threads(run_plan: Plan) -> Iterator[None]:
    """torch uses ``--cores`` threads for the duration."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(run_plan.resources.cores)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_steps(run_plan: Plan, on_step: Any) -> Any:
    """The engine's steps; returns the steps run and kept."""
    from thanos.stages.engine import RunOptions, run_recipe
    from thanos.stages.provenance import RunRecord

    files = run_plan.files
    intermediates = tuple(p for p in (files.pruned_root, files.tokens, files.dense_dir, files.chain_dir) if p)
    how = {"granularity": "recipe", "granularity_reason": "thanos prune-model: every stage in one process"}
    from thanos.runner.combined import COMBINED

    if (combined := COMBINED.get()) is not None:  # the last part of a combined recipe
        how["combined"] = combined
    record = RunRecord(model_slug(run_plan.reference), files.tokens, intermediates, how)
    resources = run_plan.resources
    needed = resources.keep == "needed"
    options = RunOptions(
        resources.device,
        drop=("inputs", "hessians") if needed else (),
        drop_layers=needed,
        record=record,
        dtype=resources.compute_dtype,
    )
    return run_recipe(run_plan.reference, run_plan.recipe, files, run_plan.calibration, options, on_step)


def _card(run_plan: Plan, evaluation: dict[str, Any] | None) -> tuple[dict[str, Any], Any, str]:
    """(report, sparsity summary, model card) of the assembled model."""
    from thanos.stages.achieved_sparsity import summarize
    from thanos.stages.card import model_card

    model_dir = run_plan.files.model_dir
    report = json.loads((model_dir / "pruning_report.json").read_text())
    summary = summarize(model_dir, report, described=True)  # assemble wrote its sparsity.json
    return report, summary, model_card(report, summary, evaluation, run_plan.out)


def publish_result(
    run_plan: Plan, evaluation: dict[str, Any] | None
) -> tuple[dict, dict | None, Any, list[str]]:
    """Publish the assembled model to ``out`` with its model card (``evaluation`` in it): (report,
    evaluation, sparsity summary, what ``publish`` found changed in ``out``)."""
    from thanos.stages.card import CARD
    from thanos.stages.publish import publish

    report, summary, card = _card(run_plan, evaluation)
    return report, evaluation, summary, publish(run_plan.files.model_dir, run_plan.out, {CARD: card})


def update_card(run_plan: Plan, evaluation: dict[str, Any] | None, before: list[str]) -> Published:
    """Rewrite the published model's card with ``evaluation`` (the weights are not copied again); ``before``:
    what the publish found changed in ``out``."""
    from thanos.stages.card import CARD
    from thanos.stages.publish import update_texts

    report, summary, card = _card(run_plan, evaluation)
    update_texts(run_plan.files.model_dir, run_plan.out, {CARD: card})
    return report, evaluation, summary, before


def recovery_text(blocks: list[dict[str, Any]]) -> str:
    """One line on what recovery did: the blocks it improved and their held-out loss, summed over blocks."""
    improved = sum(1 for b in blocks if b["epochs_kept"])
    before, after = sum(b["loss_before"] for b in blocks), sum(b["loss_after"] for b in blocks)
    return (
        f"recovery: {improved} of {len(blocks)} blocks improved; held-out reconstruction loss, summed over "
        f"the blocks, {before:.4g} -> {after:.4g}"
        + (f" ({100 * (after / before - 1):+.1f} %)" if before > 0 else "")
    )


def print_summary(
    run_plan: Plan,
    report: dict[str, Any],
    evaluation: dict[str, Any] | None,
    summary: Any,
    before: list[str],
    stream: TextIO,
    started: float,
) -> None:
    """The closing lines: what was written, the achieved sparsity, the evaluations, how to load it."""
    out, took = run_plan.out, clock_text(time.monotonic() - started)
    if not before:
        _print(stream, f"unchanged (it already holds this model): {out} ({took})")
    elif before == ["new"]:
        _print(stream, f"written: {out} ({took})")
    else:
        _print(stream, f"written again: {out} ({took}); what was there had changed: {'; '.join(before)}")
    if compact := report.get("compact"):  # the neurons are gone, not zeros: the width says what was pruned
        original, kept = compact["parameters"]["original"], compact["parameters"]["kept"]
        _print(stream, f"  {run_plan.label}")
        from thanos.stages.card import shape_text

        shape = shape_text(compact)
        _print(
            stream,
            f"  compact: {shape}; {kept:,} of {original:,} parameters "
            f"({100 * (1 - kept / original):.1f} % fewer)",
        )
    else:
        _print(
            stream,
            f"  {run_plan.label}: {100 * summary.pruned_sparsity:.2f} % of the pruned weights are zero "
            f"({100 * summary.global_sparsity:.2f} % of all parameters)",
        )
    if recovery := report.get("recovery"):
        _print(stream, f"  {recovery_text(recovery['blocks'])}")
    dense = (evaluation or {}).get("dense", {})
    if evaluation and "perplexity" in evaluation:
        result = evaluation["perplexity"]
        beside = f"; the dense model {dense['perplexity']['ppl']:.2f}" if "perplexity" in dense else ""
        _print(
            stream,
            f"  perplexity {result['ppl']:.2f} ({result['dataset']}, seqlen {result['seqlen']}{beside})",
        )
    if evaluation and "zeroshot" in evaluation:
        beside = (
            f" (the dense model {100 * dense['zeroshot']['mean_acc']:.2f} %)" if "zeroshot" in dense else ""
        )
        _print(stream, f"  zero-shot mean accuracy {100 * evaluation['zeroshot']['mean_acc']:.2f} %{beside}")
    _print(stream, f'  load it: AutoModelForCausalLM.from_pretrained("{out}")')
    _print(stream, f"  {disk_text(run_plan)}")


def disk_text(run_plan: Plan) -> str:
    """What the run left on disk: ``--out`` and the working directory, and how to clean it."""
    from thanos.runner.disk import size_text
    from thanos.stages.provenance import path_bytes

    out, work = path_bytes(run_plan.out), path_bytes(run_plan.workdir)
    return (
        f"disk: --out {size_text(out)}; workdir {size_text(work)} (--keep {run_plan.resources.keep}; "
        "`thanos workdirs` lists the working directories and deletes them)"
    )
