"""The checks before the first step: what a request points at (the model, the output, the calibration and
evaluation sources, the device, the disk), checked against the world, into the ``Plan`` the run follows.
What is wrong is refused here naming its option (``thanos.errors.OptionError``), before anything is
written."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from thanos.data.storage import dtype_name
from thanos.errors import MissingOption, Option, OptionError
from thanos.evaluation.zeroshot import check_documents, parse_tasks
from thanos.files.layout import Layout, store_name
from thanos.files.ledger import difference
from thanos.models.checkpoint import Checkpoint
from thanos.models.heads import attention_layout, check_expressible
from thanos.models.layout import ModelLayout
from thanos.models.neurons import mlp_layout
from thanos.pruning.sparsity import depth_count
from thanos.recipes.fields import ConfigError
from thanos.recipes.labels import recipe_label
from thanos.recipes.reads import recipe_reads
from thanos.recipes.recipe import Recipe, select_layers
from thanos.recipes.training import Distillation, streamed_dataset
from thanos.runner.disk import DiskEstimate, check_free, estimate
from thanos.runner.request import Evaluation, PruneRequest, Resources
from thanos.runner.sources import HUB_SOURCES, check_hub, hub_config, is_local, source_reference
from thanos.runner.texts import check_texts
from thanos.runner.workdirs import default_workdir, model_slug
from thanos.stages.common import Compute, resolve_device
from thanos.stages.depth.blocks import check_depth
from thanos.stages.describe.provenance import path_bytes
from thanos.stages.engine import Calibration, RecipeFiles
from thanos.stages.publish import check_directory, check_out

MAX_SEQLEN = 2048


@dataclass(frozen=True)
class Plan:
    """What one recipe's run does, every input checked before anything is written."""

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
    part_of: dict[str, Any] | None = None  # a combined recipe's later part: the recipe so far (its report's)
    # a recipe with ``distill``: the whole recipe (``recipe`` is then what it prunes, ``Recipe.pruned``);
    # ``teacher``: the input model, the baseline of the evaluations and the model distillation is toward (a
    # combined recipe's: the model its first part read)
    distilled: Recipe | None = None
    teacher: str | None = None
    publish: bool = True  # False: ``out`` is where the model is assembled (``PruneRequest.publish``)

    @property
    def files(self) -> RecipeFiles:
        """Where the run's stages write: the workflow's layout under ``WORKDIR/results``."""
        return RecipeFiles.of(self._layout, model_slug(self.reference), self.recipe)

    @property
    def _layout(self) -> Layout:
        return Layout(str(self.workdir / "results"), sequential=self.recipe.sequential)

    @property
    def name(self) -> str:
        """The run's recipe name: the distilled one's for a recipe with ``distill``."""
        return (self.distilled or self.recipe).name  # type: ignore[return-value]

    @property
    def published_dir(self) -> Path:
        """The model ``out`` gets: the assembled model, or the distilled one (``rule distill``'s place)."""
        return Path(self._layout.model_dir(model_slug(self.reference), self.name))

    @property
    def distill_work(self) -> Path:
        """The distillation's checkpoints."""
        return Path(self._layout.distill_work(model_slug(self.reference), self.name))

    @property
    def log_file(self) -> Path:
        return self.workdir / "logs" / f"{self.name}.log"

    @property
    def model_root(self) -> Path:
        return self.workdir / "results" / model_slug(self.reference) / self.name

    @property
    def label(self) -> str:
        """``Thanos 2:4``, ``Wanda unstructured 70 % (OWL per block: M 5, lambda 0.08)``."""
        return recipe_label(self.recipe)


@dataclass(frozen=True)
class Model:
    """The model a request names, opened once for every check: its reference (an absolute local
    directory or a hub id), its config's facts and, for a local directory, its layout and checkpoint."""

    reference: str
    model_type: str
    max_positions: int
    layers: list[str]  # the layers of a block
    dtype: torch.dtype  # the checkpoint's
    layout: ModelLayout | None = None  # None: a hub id (its weights are not here yet)
    checkpoint: Checkpoint | None = None

    @property
    def local(self) -> bool:
        return self.layout is not None


def plan(request: PruneRequest) -> Plan:
    """Check the model, the output, the calibration and evaluation sources of a request of one recipe:
    what is wrong is refused here, naming the option, before anything is written."""
    recipe, resources = request.recipe, request.resources
    out = Path(request.output.out).expanduser().resolve()
    reference = model_reference(request.model)
    if request.publish:
        check_out_beside(out, reference, recipe, request.output.overwrite)
        check_out(out)
    given = Path(resources.workdir).expanduser().resolve() if resources.workdir else None
    if given is not None:  # the default one (named after the calibration) is checked once it is known
        check_directory("workdir", given)
    check_device(resources.device)
    if recipe.sparsity.structure.tokens:  # its tokenizer files: a hub id is refused before the hub is asked
        check_vocab_model(reference, recipe.sparsity)
    model = open_model(reference)
    try:
        layers = select_layers(model.layers, recipe.exclude)
    except ConfigError as err:
        raise OptionError(Option("exclude"), str(err)) from None
    computes_in = compute_dtype_text(resources.device, resources.compute_dtype, model.dtype)
    if recipe.sparsity.structure.shrinks and model.local:
        check_structure(model, recipe)
    calibration = checked_calibration(request, model.max_positions, recipe)
    if recipe.distill is not None:
        named = recipe.name if recipe.name != recipe.default_name() else None  # named again by its source
        distill = checked_distillation(recipe.distill, model.max_positions)
        recipe = dataclasses.replace(recipe, name=named, distill=distill)
    evaluation = checked_evaluation(request.evaluation, model.max_positions)
    check_texts(reference, evaluation, recipe.distill, model.max_positions)
    workdir = given or default_workdir(reference, calibration)
    if given is None:
        check_directory("workdir", workdir)  # the default one: under THANOS_WORKDIR
    if request.publish:
        check_apart(workdir, out)
    run_plan = Plan(
        recipe.pruned,
        reference,
        model.model_type,
        out,
        workdir,
        calibration,
        evaluation,
        resources,
        [layer for layer in model.layers if layer not in layers],
        computes_in,
        disk_estimate(model, recipe, calibration),
        request.part_of,
        recipe if recipe.distill is not None else None,
        (request.part_of or {}).get("base_model", reference),
    )
    if not request.publish:  # the model stays where it is assembled
        run_plan = dataclasses.replace(run_plan, publish=False, out=run_plan.published_dir)
    if resources.disk_check and model.layout is not None:
        check_disk(run_plan, model.layout.num_blocks)
    return run_plan


def model_reference(model: str | Path) -> str:
    """A local model directory as an absolute path; a hub id unchanged."""
    if is_local(model):
        path = Path(model).expanduser().resolve()
        if not path.is_dir():
            raise MissingOption(
                Option("model", str(model)), "no such directory; give a Hugging Face model directory"
            )
        return str(path)
    return str(model)


def open_model(reference: str) -> Model:
    """The model's facts; an unsupported one, or a local directory without config, safetensors weights or
    tokenizer files, is refused here, before any step runs. Reads config.json and the weights' headers
    (for a hub id: downloads only config.json). A local model's adapter is the one the run's stages use
    (``thanos.models.handle``: built once per process)."""
    from thanos import models
    from thanos.models.handle import ModelHandle

    local = Path(reference).is_dir()
    config = models.load_config(reference) if local else hub_config(reference)
    handle = ModelHandle.open(reference) if local else None
    try:
        adapter = handle.adapter if handle is not None else models.get_adapter(config)
    except ValueError as err:
        raise OptionError(Option("model", reference), str(err)) from None
    layout, checkpoint = (handle.layout, handle.checkpoint) if handle is not None else (None, None)
    if handle is not None:
        models.check_tokenizer_files(reference)
    facts = (config.model_type, adapter.max_positions, adapter.layers, adapter.dtype)
    return Model(reference, *facts, layout, checkpoint)


def compute_dtype_text(device: str, compute_dtype: str, checkpoint: torch.dtype) -> str:
    """``float32`` (the checkpoint's dtype too) or ``float32 (checkpoint bfloat16)``: what the header shows;
    an unknown or unsupported ``compute_dtype`` is refused naming it."""
    try:
        compute = Compute.of(device, compute_dtype, checkpoint)
    except ValueError as err:
        raise OptionError(Option("compute_dtype", compute_dtype), str(err)) from None
    if not compute.converts:
        return dtype_name(compute.dtype)
    return f"{dtype_name(compute.dtype)} (checkpoint {dtype_name(checkpoint)})"


def check_device(device: str) -> None:
    """Refuse ``cuda``/``cuda:N`` when no such device is visible, before anything runs (the stages' own
    check, ``thanos.stages.common.resolve_device``)."""
    if device.startswith("cuda"):
        resolve_device(device)


def check_sources(request: PruneRequest, model: Model) -> Calibration:
    """The texts the recipes of ``request`` (the parts of a combined one, in order) read, checked on the
    input ``model`` before the first one runs: each part's calibration (``checked_calibration``: a text it
    reads, recovery's windows), and what only the last part reads, the evaluation's options and texts and
    the distillation's. Returns the checked calibration (the last part's)."""
    for recipe in request.recipes:
        calibration = checked_calibration(request, model.max_positions, recipe)
    evaluation = checked_evaluation(request.evaluation, model.max_positions)
    distill = request.recipes[-1].distill
    if distill is not None:
        distill = checked_distillation(distill, model.max_positions)
    check_texts(model.reference, evaluation, distill, model.max_positions)
    return calibration


def window_length(seqlen: int | None, max_positions: int) -> int:
    """The calibration's window length: ``seqlen`` given, else ``MAX_SEQLEN`` within the model's positions."""
    return min(MAX_SEQLEN, max_positions) if seqlen is None else seqlen


def checked_calibration(request: PruneRequest, max_positions: int, recipe: Recipe) -> Calibration:
    """The calibration, the one value every step after the door takes (the engine's, the working
    directory's key and record, the ledger's): a checked source (when the recipe uses one), the window
    length within the model's, room for recovery's held-out windows."""
    options = request.calibration
    seqlen = window_length(options.seqlen, max_positions)
    if seqlen > max_positions:
        raise OptionError(
            Option("seqlen", str(seqlen)),
            f" exceeds the model's {max_positions} positions; give ",
            Option("seqlen", str(max_positions)),
            " or less",
        )
    if recipe.recover is not None:
        try:
            recipe.recover.held_out(options.nsamples)
        except ConfigError as err:
            given = (
                Option("recover.holdout", f"{recipe.recover.holdout:g}"),
                Option("nsamples", str(options.nsamples)),
            )
            raise OptionError(given, str(err)) from None
    chooses = recipe.sparsity.structure.tokens and recipe.vocab_text is None  # the text of a vocabulary
    source = source_reference(
        options.calibration, "calibration", options.text_field, recipe.needs_calibration or chooses
    )
    if recipe.vocab_text is not None:
        check_vocab_text(recipe.vocab_text)
    return Calibration(source, options.nsamples, seqlen, options.seed, options.text_field)


def checked_distillation(distill: Distillation, max_positions: int) -> Distillation:
    """The distillation's text found now (a local source as an absolute path), its windows within the
    model's positions: refused before the pruning, not after it."""
    if distill.seqlen > max_positions:
        raise OptionError(
            Option("distill.seqlen", str(distill.seqlen)),
            f" exceeds the model's {max_positions} positions; give ",
            Option("distill.seqlen", str(max_positions)),
            " or less",
        )
    if dataset := streamed_dataset(distill.source):  # the hub reachable now, the dataset when it is read
        if not Path(dataset[0]).expanduser().exists():  # not a local dataset directory
            check_hub("distill.source", distill.source)
        return distill
    source = source_reference(distill.source, "distill.source", distill.text_field)
    return dataclasses.replace(distill, source=source)


def checked_evaluation(evaluation: Evaluation, max_positions: int | None) -> Evaluation:
    """The evaluation's sources found now rather than after pruning: the perplexity text (when asked), its
    window against the model's positions, the directory of local lm-eval tasks and the task names (lm-eval's
    index, which the evaluation after the pruning reads again: built once per process)."""
    unused = {  # an evaluation's options without the evaluation: refused rather than ignored
        "ppl_seqlen": "ppl" not in evaluation.kinds and evaluation.ppl_seqlen is not None,
        "ppl_source": "ppl" not in evaluation.kinds
        and str(evaluation.ppl_source) != HUB_SOURCES["ppl_source"],
        "tasks": "zeroshot" not in evaluation.kinds and evaluation.tasks is not None,
        "include_path": "zeroshot" not in evaluation.kinds and evaluation.include_path is not None,
    }
    for name, given in unused.items():
        if given:
            kind = "ppl" if name.startswith("ppl") else "zeroshot"
            raise OptionError(Option(name), " is set without its evaluation; add ", Option("evaluate", kind))
    seqlen = evaluation.ppl_seqlen
    if seqlen is not None and max_positions and seqlen > max_positions:
        raise OptionError(
            Option("ppl_seqlen", str(seqlen)),
            f" is longer than the model's {max_positions} positions; give at most {max_positions}",
        )
    ppl = source_reference(evaluation.ppl_source, "ppl_source", check="ppl" in evaluation.kinds)
    include_path = evaluation.include_path
    if include_path is not None:
        include_path = str(Path(include_path).expanduser().resolve())
    if "zeroshot" in evaluation.kinds:  # a name lm-eval does not know, or its documents unreadable (the hub
        check_documents(parse_tasks(evaluation.tasks), include_path)  # offline): refused before the pruning
    return dataclasses.replace(evaluation, ppl_source=ppl, include_path=include_path)


def check_structure(model: Model, recipe: Recipe) -> None:
    """Refuse, before any step runs, a model whose neurons (``neurons:p``), heads (``heads:p``,
    ``kv_heads:p``), blocks (``depth:k``) or tokens (``vocab:``) cannot be removed, or whose code cannot hold
    what is left, naming the model type and why."""
    if recipe.sparsity.structure.tokens:
        check_vocab_model(model.reference, recipe.sparsity)
        return
    layout, checkpoint, model_dir = model.layout, model.checkpoint, model.reference
    assert layout is not None
    try:
        if recipe.sparsity.structure.whole_blocks:
            _count(recipe, lambda: depth_count(recipe.sparsity, layout.num_blocks))
            check_depth(model_dir, layout.model_type, recipe.sparsity, layout.num_blocks)
        elif recipe.sparsity.structure.one_layer == "mlp":
            mlp_layout(layout, checkpoint)
        else:
            attention = attention_layout(model_dir, layout, checkpoint)
            _count(recipe, lambda: attention.removed(recipe.sparsity))
            if recipe.compact:
                check_expressible(model_dir, attention, recipe.sparsity)
    except OptionError:
        raise
    except ValueError as err:
        raise OptionError(Option("model", model.reference), str(err)) from None


def check_vocab_model(model: str, pattern: Any) -> None:
    """Refuse a vocab ``pattern`` the model cannot take: not a local directory, a tokenizer that cannot lose
    tokens, a count that removes none or keeps fewer than the tokens every vocabulary keeps."""
    from thanos.models.vocabulary_files import check_vocab_pattern

    if not Path(model).is_dir():
        raise OptionError(
            Option("model", model),
            f" is not a local directory; {pattern} rewrites its tokenizer files: download it first (`hf "
            f"download {model} --local-dir DIR`) and give that directory",
        )
    try:
        check_vocab_pattern(model, pattern)
    except ValueError as err:
        said = str(err).removeprefix("vocab: ").removeprefix(f"{pattern} ")  # the option names the pattern
        raise OptionError(Option("sparsity", str(pattern)), said) from None


def check_vocab_text(text: str | Path) -> None:
    """Refuse a ``vocab_text`` that is neither ``c4`` nor an existing path, before anything runs."""
    if str(text).lower() != "c4" and not Path(text).exists():
        raise OptionError(
            Option("vocab_text", text), "does not exist; give a text/jsonl/parquet file or directory, or c4"
        )


def _count(recipe: Recipe, count: Any) -> None:
    """``count()``, whose ValueError is about the count the pattern asks for, not the model: named by
    ``sparsity``."""
    try:
        count()
    except ValueError as err:
        raise OptionError(Option("sparsity", str(recipe.sparsity)), str(err)) from err


def disk_estimate(model: Model, recipe: Recipe, calibration: Calibration) -> DiskEstimate | None:
    """The run's disk use (``thanos.runner.disk``) for a local model; None for a hub id (its files are not
    here yet)."""
    if model.layout is None:
        return None
    nsamples, seqlen = calibration.nsamples, calibration.seqlen
    return estimate(model.layout, model.checkpoint, Path(model.reference), recipe, nsamples, seqlen)


def check_disk(run_plan: Plan, num_blocks: int) -> None:
    """Refuse a run that would not fit: what the working directory still needs (its peak less what this
    recipe finds there: a resumed run has written part of it, another recipe the stores it reads) and the
    copy in ``out``."""
    disk, files, keep = run_plan.disk, run_plan.files, run_plan.resources.keep
    if disk is None:
        return
    reads = recipe_reads(run_plan.recipe, num_blocks, sequential=files.chain_dir is not None)
    dense = files.dense_dir
    shared = [dense / store_name(kind, block) for kind, block in reads.dense] if dense is not None else []
    mine = [files.tokens, *shared, files.chain_dir, files.pruned_root, files.model_dir]
    present = sum(path_bytes(path) for path in mine if path is not None)
    peak = max(0, disk.peak(keep) - present)
    if not run_plan.publish:  # a size's point: its model stays where it is assembled, in the workdir
        check_free(run_plan.workdir, None, peak, 0, peak)
        return
    check_free(run_plan.workdir, run_plan.out, peak, disk.model, max(0, disk.with_out(keep) - present))


def check_out_beside(out: Path, reference: str, recipe: Recipe, overwrite: bool) -> None:
    """Refuse an ``out`` that is the input model, inside it or holding it (``check_outside``), and, unless
    ``overwrite``, one that holds another model's or another recipe's result (the same recipe's is written
    again)."""
    check_outside(out, reference)
    local = Path(reference).is_dir()  # a hub model's report names its snapshot: the recipe alone is compared
    report = out / "pruning_report.json"
    if overwrite or not report.is_file():
        return
    wanted = {
        "model": reference if local else None,
        "recipe": recipe.pruned.name,
        "distilled": bool(recipe.distill),
        "distillation": _distillation(dataclasses.asdict(recipe.distill) if recipe.distill else None),
    }
    try:  # what --out holds, as the ledger compares it (``thanos.files.ledger``)
        previous = json.loads(report.read_text())
        holds = {"model": previous["model"]["path"], "recipe": previous["recipe"]["name"]}
        holds["distilled"] = bool(previous.get("distillation"))
        holds["distillation"] = _distillation((previous.get("distillation") or {}).get("options"))
        why = difference(holds | ({} if local else {"model": None}), wanted)
    except (OSError, ValueError, KeyError, TypeError):
        holds, why = {"model": "?", "recipe": "an unreadable report", "distilled": False}, "unreadable"
    if why is not None:
        what = f"{holds['recipe']}{' distilled' * holds['distilled']} of {holds['model']}"
        raise holds_another(out, f"pruned model ({what})", why)


def _distillation(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """A distillation's options as an ``--out``'s report and a request compare them: a local text by its
    absolute path (a report records it so; a request may name it relative)."""
    if not options:
        return None
    source = Path(str(options.get("source", ""))).expanduser()
    return options | ({"source": str(source.resolve())} if source.exists() else {})


def check_outside(out: Path, reference: str) -> None:
    """Refuse an ``out`` (absolute) that is the local input model ``reference``, inside it or holding it."""
    model = Path(reference).resolve()
    if Path(reference).is_dir() and (out == model or model in out.parents or out in model.parents):
        where = "is" if out == model else "is inside" if model in out.parents else "holds"
        raise OptionError(
            Option("out", str(out)), f" {where} the input model {model}; give a directory outside it"
        )


def check_apart(workdir: str | Path | None, out: str | Path, option: str = "workdir") -> None:
    """Refuse a working directory (``option``) that is ``out`` or inside it: a model is published only into
    an empty ``out`` or over a previous result, so the run would compute every step there and be refused at
    the end, or replace its own working directory (``--out`` inside the working directory is taken: the
    model is published there)."""
    if workdir is None:
        return
    work, published = Path(workdir).expanduser().resolve(), Path(out).expanduser().resolve()
    if work == published or published in work.parents:
        where = "is" if work == published else "is inside"
        raise OptionError(
            Option(option, str(work)), f" {where} ", Option("out", str(published)),
            ", where the model is published (into a new or empty directory, or over a previous result); "
            "give a working directory outside it",
        )  # fmt: skip


def held_result(out: Path) -> dict[str, Any] | None:
    """What the pruned model in ``out`` is, as its ``pruning_report.json`` says: the recipe (a combined
    one whole), the input model, the last part's recipe and whether it was distilled; None when ``out``
    holds no report, or one that cannot be read."""
    try:
        report = json.loads((out / "pruning_report.json").read_text())
        combined = (report.get("workflow") or {}).get("combined") or {}
        return {
            "recipe": combined.get("sparsity", report["recipe"]["name"]),
            "model": combined.get("base_model", report["model"]["path"]),
            "last part": (combined.get("then") or [report["recipe"]])[-1].get("name"),
            "distilled": bool(report.get("distillation")),
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def holds_another(out: Path, what: str, why: str) -> OptionError:
    """The refusal of an ``out`` that holds ``what`` (another pruned model, another vocabulary), not this
    run's (``why``: the first difference): replaced only with ``--overwrite``."""
    return OptionError(
        Option("out", str(out)),
        f" holds another {what}, not this run's ({why}); give another ",
        Option("out"),
        ", or ",
        Option("overwrite"),
        " to replace it",
    )
