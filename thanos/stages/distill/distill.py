"""Distillation: a pruned model (the student) trained toward the dense model (the teacher) on real text.

``distill(student, teacher, out, work, options)`` (``options``: a ``thanos.recipes.training.Distillation``) is
``prepare`` (every input checked, the device and compute dtype resolved, the text read: what ``thanos
distill`` says in its header, before any weight is read), then ``run`` (steps 2-4):

1. **Text**: the documents of ``options.source`` (a local text/jsonl/parquet file or directory, ``c4``, or
   ``hf:NAME[:CONFIG]`` streamed) in their order, each tokenized with the student's tokenizer and followed by
   its end-of-text token, packed and cut into windows of ``seqlen`` tokens. The first ``heldout`` windows are
   held out (never trained on); then as many as the token budget needs (a text shorter than the budget is
   gone over again, in a new order).
2. **Training**: ``thanos.pruning.distillation``: the KL divergence of the student's next-token
   distributions from the teacher's, AdamW on fp32 master weights, warm-up then cosine decay, ``batch_size``
   windows per step in micro-batches of ``micro_batch`` (with ``hidden_weight``, the block outputs' loss
   added); every zero pruning wrote stays zero. The teacher runs without gradients in the compute dtype
   (``auto``: bf16 on a GPU, float32 on a CPU without bf16 instructions); the student's forward is autocast
   to that dtype.
3. **Checkpoints** (``thanos.stages.distill.train``) every ``checkpoint_every`` steps and at the last:
   ``WORK/checkpoint/`` (written whole, then renamed into place) holds ``state.pt`` (the weights, AdamW's
   moments, the step, the random state, the history) and ``best.pt`` (the weights with the lowest held-out
   KL so far). The held-out KL is measured at each checkpoint. The same call again continues from the last
   checkpoint, on exactly the windows an uninterrupted run trains on (they are a function of the step), to
   the same weights (bitwise on a CPU). ``WORK/run.json`` says what the checkpoints are of (the models'
   files, the windows, the options: the ledger's record, ``thanos.files.ledger``): a checkpoint of other
   inputs is not resumed from, and the log names the input that changed.
4. **Output**: ``out`` holds the student's files with the best weights (the student's own if no checkpoint
   beat it on held-out text): the same shards, tensor names and dtype; ``distillation.json`` (the source and
   its checksum, tokens, steps, losses, seconds, tokens/s, the device and the compute dtype); for a pruned
   student its report with a ``distillation`` section and new file digests, ``sparsity.json`` counted again
   and the card. Then ``WORK`` is deleted (unless ``keep_checkpoints``): the checkpoints serve only to
   resume a killed run.

Data parallel: started by ``torchrun`` (``WORLD_SIZE`` > 1), every process trains ``batch_size / world``
windows of each step through ``torch.nn.parallel.DistributedDataParallel`` (gloo on CPUs, NCCL on GPUs): the
gradients are averaged over the processes, so a step is the one-process step of the same global batch. The
first process measures the held-out KL and writes the checkpoints and the output. Sharded (``shard_models``):
FSDP instead of ``DistributedDataParallel``, each process holding a slice of every weight, gradient and AdamW
moment of the student and of the teacher's weights; the held-out KL and a checkpoint's gathering of the whole
tensors run on every process, and the checkpoints are in the one format (whole tensors, AdamW's state by
parameter name) whichever way the run is split.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from thanos.errors import MissingOption, Option, OptionError
from thanos.events import DistillSharded, DistillWarning, OnEvent, ignore
from thanos.files import digests
from thanos.files.ledger import digest, model_identity
from thanos.files.locks import exclusive_workdir
from thanos.pruning.distillation import hidden_pairs, zero_masks
from thanos.pruning.structures import of_sidecar
from thanos.recipes.labels import public_name
from thanos.recipes.training import Distillation
from thanos.stages.common import compute_dtype
from thanos.stages.describe.card import base_model
from thanos.stages.describe.sparsity import combined_record
from thanos.stages.distill.files import (
    RECORD,
    Checkpoints,
    check_work,
    mark_finished,
    prepare_work,
    write_student,
)
from thanos.stages.distill.ranks import Ranks, device_mesh, shard, start_ranks
from thanos.stages.distill.text import Text, load_text, passes_note
from thanos.stages.distill.train import Models, Progress, train, zeros_held

log = logging.getLogger(__name__)


def run_record(student: str, teacher: str, text: Text, options: Distillation) -> dict[str, Any]:
    """What a run's checkpoints and output are computed from, as the ledger holds it
    (``thanos.files.ledger``): the models' files, the windows and the options."""
    return {
        "student": model_identity(student),
        "teacher": model_identity(teacher),
        "text": {**text.provenance, "windows_sha256": text.sha256},
        "options": asdict(options),
    }


def other_teacher(student: str, teacher: str) -> str | None:
    """What to say when ``teacher`` is not the model ``student`` was pruned from (its pruning report's base
    model: a directory that still exists, or a hub id); None when it is, or when that cannot be told (no
    report, or the base directory is gone)."""
    report_file = Path(student) / digests.REPORT
    if not report_file.is_file():
        return None
    base = base_model(json.loads(report_file.read_text()))
    if Path(base).is_dir():
        same = Path(teacher).is_dir() and Path(base).samefile(teacher)
    elif Path(base).is_absolute():
        return None
    else:
        same = teacher == base
    if same:
        return None
    return (
        f"the student was pruned from {base} (its pruning report), the teacher is {teacher}: it is trained "
        f"toward another model (a larger one with the same tokenizer can teach it; to train it toward the "
        f"model it came from, give --teacher {base})"
    )


def check_models(
    student: str, teacher: str, device: torch.device, dtype: str, seqlen: int
) -> tuple[Any, torch.dtype]:
    """The student's tokenizer and the compute dtype on ``device``, before any weight is read: the student a
    directory whose files are the ones its pruning report records, the teacher's ``config.json`` readable
    (a local one), ``seqlen`` within the student's positions."""
    from thanos.models import load_tokenizer, model_config
    from thanos.models.base import config_dtype, max_positions

    if not Path(student).is_dir():
        raise MissingOption(
            Option("student", student), " is not a directory; give the pruned model's directory"
        )
    if (Path(student) / digests.REPORT).is_file():
        digests.verify(student)  # a pruned model: train what was computed, nothing else
    config = model_config(student)
    if Path(teacher).is_dir():  # a local teacher without a readable config.json, or of another vocabulary
        vocab = getattr(model_config(teacher), "vocab_size", None)
        if isinstance(vocab, int) and isinstance(getattr(config, "vocab_size", None), int):
            check_vocabularies(student, teacher, config.vocab_size, vocab, kept_ids(student))
    limit = max_positions(config)
    if limit is not None and seqlen > limit:
        raise OptionError(
            Option("seqlen", str(seqlen)),
            f" is longer than the model's {limit} positions; give at most {limit}",
        )
    return load_tokenizer(student), compute_dtype(dtype, device, config_dtype(config))


def read_models(
    student: str, teacher: str, device: torch.device, dtype: torch.dtype, ranks: Ranks, sharded: bool
) -> Models:
    """The student in fp32 and the teacher in the compute dtype ``dtype``, on ``device``. ``sharded``: both
    are read by one process after the other (the host holds one whole pair at a time) and sharded over
    ``ranks`` by FSDP."""
    if not sharded:
        model, dense = _read_pair(student, teacher, dtype, device)
    else:
        mesh = device_mesh(device)
        for turn in range(ranks.world):
            if turn == ranks.rank:
                model, dense = _read_pair(student, teacher, dtype, torch.device("cpu"))
                masked = zero_masks(model.named_parameters())
                shard(model, mesh)
                shard(dense, mesh)
            ranks.barrier()
    kept = kept_ids(student)
    check_vocabularies(student, teacher, model.get_output_embeddings().weight.shape[0],
                       dense.get_output_embeddings().weight.shape[0], kept)  # fmt: skip
    model.train()
    params = dict(model.named_parameters())
    if sharded:  # the masks sliced as the weights are: DTensors of the same placement
        masks = {name: params[name].detach() != 0 for name in masked}
    else:
        masks = zero_masks(params.items())
    kept_tensor = None if kept is None else torch.tensor(kept, dtype=torch.long, device=device)
    return Models(model, model, params, masks, dense, dtype, sharded=sharded, kept=kept_tensor)


def kept_ids(student: str) -> list[int] | None:
    """The teacher's id of each token of a student whose vocabulary was pruned (its ``vocabulary.json``,
    ``kept_ids``: student token i is the teacher's ``kept_ids[i]``); None for a student of the teacher's
    vocabulary."""
    try:
        record = json.loads((Path(student) / "vocabulary.json").read_text())
        return [int(i) for i in record["kept_ids"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_vocabularies(student: str, teacher: str, student_vocab: int, teacher_vocab: int,
                       kept: list[int] | None) -> None:  # fmt: skip
    """Refuse a teacher whose vocabulary is not the one the student's was made from: larger than the
    student's (a student's may be padded), or, for a student whose vocabulary was pruned, one its kept
    tokens do not fit."""
    if kept is not None and kept and max(kept) < teacher_vocab:
        return
    if kept is not None or teacher_vocab > student_vocab:
        raise OptionError(
            Option("teacher", teacher),
            f" has {teacher_vocab} output tokens, the student {student_vocab}"
            + (f" (its vocabulary keeps tokens up to id {max(kept)})" if kept else "")
            + ": not the model the student was pruned from; give the dense model it was pruned from",
        )


def _read_pair(
    student: str, teacher: str, dtype: torch.dtype, device: torch.device
) -> tuple[nn.Module, nn.Module]:
    """The student in fp32 and the teacher in ``dtype`` (no gradients), on ``device``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(student, dtype=torch.float32).to(device)
    try:
        dense = AutoModelForCausalLM.from_pretrained(teacher, dtype=dtype).to(device).eval()
    except Exception as err:  # noqa: BLE001 - a missing or damaged file: transformers' and safetensors' kinds
        if not isinstance(err, OSError) and "Safetensor" not in type(err).__name__:
            raise
        text = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise OptionError(
            Option("teacher", teacher), f" cannot be loaded ({text}); give the dense model"
        ) from err
    dense.requires_grad_(False)
    return model, dense


def block_pairs(student: Path, models: Models) -> list[tuple[int, int]]:
    """The student's blocks matched to the teacher's (``hidden_pairs``): the blocks removed as its pruning
    report records them (a depth recipe's, or a combined recipe's depth part's), none for the rest."""
    removed: list[int] = []
    report_file = student / digests.REPORT
    if report_file.is_file():
        report = json.loads(report_file.read_text())
        parts = combined_record(report).get("parts") or []
        for compact in [report.get("compact"), *(part.get("compact") for part in parts)]:
            kind = of_sidecar(compact.get("structure")) if compact else None
            if kind is not None and kind.whole_blocks:
                removed = list(compact["removed_blocks"])
    blocks = (models.student.config.num_hidden_layers, models.teacher.config.num_hidden_layers)
    try:
        return hidden_pairs(*blocks, removed)
    except ValueError as err:
        raise OptionError(
            Option("hidden_weight"),
            f" matches the student's blocks to the teacher's, but {err} (no pruning report says which "
            "blocks went); leave it at 0",
        ) from None


def step_label(options: Distillation) -> str:
    """How progress lines name a distillation: ``distill: 131,072 tokens of corpus.jsonl``."""
    return f"distill: {options.tokens:,} tokens of {options.source}"


@dataclass
class Prepared:
    """A distillation checked and ready to run (``prepare``): its inputs, this process among the
    data-parallel ones, the device and compute dtype resolved, the text read, what its checkpoints are of
    (``record``), and what the run should say before it starts (``warnings``; ``work_state``: what ``work``
    holds, ``thanos.stages.distill.files.check_work``)."""

    student: str
    teacher: str
    out: Path
    work: Path
    options: Distillation
    ranks: Ranks
    device: torch.device
    dtype: torch.dtype
    text: Text
    record: dict[str, Any]
    sharded: bool
    work_state: str
    warnings: list[str]
    # what ``out``'s distillation.json records when it holds this very run's result (one process: the same
    # command again after it finished has nothing to do; under torchrun every process trains as before)
    finished: dict[str, Any] | None = None


def prepare(
    student: str,
    teacher: str,
    out: str | Path,
    work: str | Path,
    options: Distillation,
    device: str = "auto",
    dtype: str = "auto",
    shard_models: bool = False,
    overwrite: bool = False,
) -> Prepared:
    """Every input of a distillation checked (``out`` neither model, new or this run's own result unless
    ``overwrite``; the student, the teacher's config, the batch over the processes, ``work``), the device and
    compute dtype resolved, the text read and cut into windows: all before any weight is read."""
    from thanos.stages.publish import check_out

    out, work = Path(out), Path(work)
    for name, model in (("student", student), ("teacher", teacher)):
        if Path(model).exists() and out.resolve() == Path(model).resolve():
            raise OptionError(Option("out", str(out)), f" is the {name}; give a new directory")
    check_out(out)
    ranks, dev = start_ranks(device)
    if options.batch_size % ranks.world:
        raise OptionError(
            Option("batch_size", str(options.batch_size)),
            f" is not a multiple of the {ranks.world} processes; give a multiple of {ranks.world}",
        )
    warnings = [other] if ranks.main and (other := other_teacher(student, teacher)) else []
    sharded = shard_models and ranks.world > 1
    if shard_models and not sharded:
        warnings.append(
            "--shard has nothing to shard in one process: start it under torchrun --nproc-per-node N"
        )
    tokenizer, chosen = check_models(student, teacher, dev, dtype, options.seqlen)
    text = load_text(
        options.source, tokenizer, options.seqlen, options.heldout, options.tokens, options.text_field
    )
    if note := passes_note(text, options.tokens):
        warnings.append(note)
    if options.warmup is not None and options.warmup >= options.steps:  # (a budget cut after the warm-up set)
        warnings.append(
            f"the warm-up of {options.warmup} steps is not below the run's {options.steps}: the learning "
            f"rate never reaches its peak ({options.lr:g}); give fewer warm-up steps or a larger token budget"
        )
    record = run_record(student, teacher, text, options)
    state, finished = "new", None
    if ranks.main:
        if not overwrite:
            finished = check_previous(out, digest(record))
        state = check_work(work, record)
    return Prepared(
        student, teacher, out, work, options, ranks, dev, chosen, text, record, sharded, state, warnings,
        finished if ranks.world == 1 else None,
    )  # fmt: skip


def run(prepared: Prepared, keep_checkpoints: bool = False, on_event: OnEvent = ignore) -> dict[str, Any]:
    """A prepared distillation's models read, trained from its last checkpoint (or the first step) and
    written to ``out`` (the module's steps 2-4); returns what ``distillation.json`` records (on every
    process; only the first writes). ``work`` is deleted once ``out`` is written unless ``keep_checkpoints``
    (they serve only to resume this run; ``distillation.json`` keeps their held-out history).
    ``on_event``: told of the steps, checkpoints and warnings (``thanos.events``) on the first process."""
    p, ranks = prepared, prepared.ranks
    models = read_models(p.student, p.teacher, p.device, p.dtype, ranks, p.sharded)
    if p.sharded and ranks.main:
        sharded = DistillSharded(ranks.world)
        log.info("distill: %s", sharded.text)
        on_event(sharded)
    if p.options.hidden_weight:
        models.pairs = block_pairs(Path(p.student), models)
    with contextlib.ExitStack() as held:
        if ranks.main:
            held.enter_context(exclusive_workdir(p.work, "--work"))  # one run at a time on these checkpoints
            about = {
                "student": str(Path(p.student).resolve()),
                "teacher": p.teacher,
                "out": str(p.out.resolve()),
            }
            prepare_work(p.work, p.record, about, on_event)
        ranks.barrier()
        progress = train(models, p.text, p.options, p.work, p.device, ranks, on_event)
        result = summary(p, progress, zeros_held(models, ranks, p.device))
        if ranks.main:
            write_student(Path(p.student), p.out, Checkpoints(p.work).best_weights(), result)
            log.info("distill: wrote %s (the weights of step %d)", p.out, progress.best["step"])
            if keep_checkpoints:
                mark_finished(p.work)
            else:
                shutil.rmtree(p.work)
                log.info("distill: deleted the checkpoints (%s)", p.work)
        ranks.barrier()
    return result


def distill(
    *inputs: Any, keep_checkpoints: bool = False, on_event: OnEvent = ignore, **choices: Any
) -> dict[str, Any]:
    """Train a student toward a teacher on text and write it to ``out``: ``prepare(*inputs, **choices)``
    (the student, teacher, out, work and options; the device, dtype, ``shard_models``, ``overwrite``) with
    its warnings logged and told to ``on_event``, then ``run`` (``keep_checkpoints``, ``on_event``).
    ``shard_models``: under torchrun, the student, its gradients and AdamW's moments and the teacher sharded
    over the processes by FSDP instead of whole in each (for models that do not fit one device; the same
    steps, equal to rounding). An ``out`` that holds another model, or the distillation of other inputs or
    options, is replaced only with ``overwrite`` (refused before any training)."""
    prepared = prepare(*inputs, **choices)
    if prepared.finished is not None:  # the same run finished: ``out`` holds its result
        return prepared.finished
    for warning in prepared.warnings:
        log.warning("distill: %s", warning)
        on_event(DistillWarning(warning))
    return run(prepared, keep_checkpoints, on_event)


def check_previous(out: Path, digest: str) -> dict[str, Any] | None:
    """Refuse an ``out`` that holds anything but this run's own earlier result (its ``distillation.json``
    recording the same inputs and options): another pruned model, or another distillation. Returns that
    record when ``out`` holds this run's result whole (its files as its digests record them), else None."""
    if not out.is_dir() or not any(out.iterdir()):
        return None
    try:
        recorded = json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        recorded = None
    previous = recorded.get("run_sha256") if isinstance(recorded, dict) else None
    if previous != digest:
        what = (
            "the distillation of another student, teacher, text or options"
            if previous
            else "a distillation by an earlier version (no run_sha256 in distillation.json)"
            if recorded is not None
            else "another model"
        )
        raise OptionError(
            Option("out", str(out)), f" holds {what}; give another --out, or --overwrite to replace it"
        )
    try:  # whole: the files its report records, as recorded (a file changed or missing: trained again)
        whole = bool(digests.recorded(out)) and not digests.differences(out, digests.recorded(out), ())
    except (OSError, ValueError):
        whole = False
    return recorded if whole else None


def summary(prepared: Prepared, progress: Progress, zeros: int) -> dict[str, Any]:
    """What ``distillation.json`` records: the source, the teacher (as a card names it), the budget and what
    was trained, where and in which dtype, the losses."""
    options, device = prepared.options, prepared.device
    trained = progress.step * options.batch_size * options.seqlen
    where = {"device": str(device), "compute_dtype": str(prepared.dtype).removeprefix("torch.")}
    if device.type == "cuda":
        where["device_name"] = torch.cuda.get_device_name(device)
    return {
        "source": prepared.record["text"],
        "teacher": public_name(prepared.teacher),
        "run_sha256": digest(prepared.record),  # a rerun of the same inputs and options may replace it
        "options": asdict(options),
        "steps": progress.step,
        "tokens": trained,
        "heldout_windows": int(prepared.text.heldout.shape[0]),
        "processes": prepared.ranks.world,
        "sharded": prepared.sharded,
        **where,
        "seconds": round(progress.seconds, 1),
        "tokens_per_second": round(trained / progress.seconds, 1) if progress.seconds else None,
        "zeros_kept": zeros,
        "heldout": progress.heldout,
        "best": progress.best,
        "train_kl": [entry["kl"] for entry in progress.history],
    }
