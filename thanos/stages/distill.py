"""Distillation: a pruned model (the student) trained toward the dense model (the teacher) on real text.

``distill(student, teacher, out, work, options)`` (``options``: a ``thanos.recipe.Distillation``):

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
3. **Checkpoints** every ``checkpoint_every`` steps and at the last: ``WORK/checkpoint/`` (written whole, then
   renamed into place) holds ``state.pt`` (the weights, AdamW's moments, the step, the random state, the
   history) and ``best.pt`` (the weights with the lowest held-out KL so far). The held-out KL is measured at
   each checkpoint. The same call again continues from the last checkpoint, on exactly the windows an
   uninterrupted run trains on (they are a function of the step), to the same weights (bitwise on a CPU).
   ``WORK/run.json`` says what the checkpoints are of (the models' files, the windows, the options): a
   checkpoint of other inputs is not resumed from.
4. **Output**: ``out`` holds the student's files with the best weights (the student's own if no checkpoint
   beat it on held-out text): the same shards, tensor names and dtype; ``distillation.json`` (the source and
   its checksum, tokens, steps, losses, seconds, tokens/s); for a pruned student its report with a
   ``distillation`` section and new file digests, ``sparsity.json`` counted again and the card.

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
import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from thanos.errors import MissingOption, Option, OptionError
from thanos.files import digests
from thanos.files.fingerprint import model_fingerprint
from thanos.files.workdir_lock import exclusive_workdir
from thanos.labels import public_name
from thanos.pruning.distillation import (
    apply_masks,
    hidden_loss,
    hidden_pairs,
    kl_sum,
    lr_at,
    mask_gradients,
    step_windows,
    zero_masks,
)
from thanos.recipe import Distillation
from thanos.stages.achieved_sparsity import combined_record
from thanos.stages.card import base_model
from thanos.stages.common import compute_dtype
from thanos.stages.distill_files import (
    RECORD,
    Checkpoints,
    prepare_work,
    random_state,
    set_random_state,
    write_student,
)
from thanos.stages.distill_ranks import Ranks, device_mesh, local, shard, start_ranks
from thanos.stages.distill_text import Text, load_text

log = logging.getLogger(__name__)

CLIP = 1.0  # gradient norm clipped to this (Minitron's setting)


def _identity(model: str) -> Any:
    """What identifies a model argument: its files' fingerprint for a directory, else the hub id."""
    return model_fingerprint(model) if Path(model).is_dir() else model


def run_record(student: str, teacher: str, text: Text, options: Distillation) -> dict[str, Any]:
    """What a run's checkpoints are of: the models' files, the windows and the options."""
    return {
        "student": _identity(student),
        "teacher": _identity(teacher),
        "text": {**text.provenance, "windows_sha256": text.sha256},
        "options": asdict(options),
    }


@dataclass
class Models:
    """The student (fp32 master weights, training), what its steps run (``DistributedDataParallel`` around
    it under torchrun; itself when sharded), its parameters by name, the masks of its zeros, the teacher (no
    gradients). ``sharded``: both models sharded over the processes by FSDP (their parameters DTensors)."""

    student: nn.Module
    forward: nn.Module
    params: dict[str, nn.Parameter]
    masks: dict[str, torch.Tensor]
    teacher: nn.Module
    dtype: torch.dtype  # the compute dtype
    pairs: list[tuple[int, int]] = field(default_factory=list)  # matched block outputs (hidden-state loss)
    sharded: bool = False

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)


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


def load_models(
    student: str,
    teacher: str,
    device: torch.device,
    dtype: str,
    seqlen: int,
    ranks: Ranks | None = None,
    sharded: bool = False,
) -> tuple[Models, Any]:
    """The student in fp32 and the teacher in the compute dtype, on ``device``; the student's tokenizer
    (``seqlen``: checked against the student's positions). ``sharded``: both are read by one process after
    the other (the host holds one whole pair at a time) and sharded over ``ranks`` by FSDP."""
    from thanos.models import load_tokenizer, model_config
    from thanos.models.base import config_dtype, max_positions

    if not Path(student).is_dir():
        raise MissingOption(
            Option("student", student), " is not a directory; give the pruned model's directory"
        )
    if (Path(student) / digests.REPORT).is_file():
        digests.verify(student)  # a pruned model: train what was computed, nothing else
    config = model_config(student)
    if Path(teacher).is_dir():
        model_config(teacher)  # a local teacher without a readable config.json: refused, named
    limit = max_positions(config)
    if limit is not None and seqlen > limit:
        raise OptionError(
            Option("seqlen", str(seqlen)),
            f" is longer than the model's {limit} positions; give at most {limit}",
        )
    tokenizer = load_tokenizer(student)
    chosen = compute_dtype(dtype, device, config_dtype(config))
    if not sharded:
        model, dense = _read_pair(student, teacher, chosen, device)
    else:
        mesh = device_mesh(device)
        for turn in range(ranks.world):
            if turn == ranks.rank:
                model, dense = _read_pair(student, teacher, chosen, torch.device("cpu"))
                masked = zero_masks(model.named_parameters())
                shard(model, mesh)
                shard(dense, mesh)
            ranks.barrier()
    student_vocab = model.get_output_embeddings().weight.shape[0]
    teacher_vocab = dense.get_output_embeddings().weight.shape[0]
    if teacher_vocab > student_vocab:
        raise OptionError(
            Option("teacher", teacher),
            f" has {teacher_vocab} output tokens, the student {student_vocab}: not the model the student "
            "was pruned from; give the dense model it was pruned from",
        )
    model.train()
    params = dict(model.named_parameters())
    if sharded:  # the masks sliced as the weights are: DTensors of the same placement
        masks = {name: params[name].detach() != 0 for name in masked}
    else:
        masks = zero_masks(params.items())
    return Models(model, model, params, masks, dense, chosen, sharded=sharded), tokenizer


def _read_pair(
    student: str, teacher: str, dtype: torch.dtype, device: torch.device
) -> tuple[nn.Module, nn.Module]:
    """The student in fp32 and the teacher in ``dtype`` (no gradients), on ``device``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(student, dtype=torch.float32).to(device)
    try:
        dense = AutoModelForCausalLM.from_pretrained(teacher, dtype=dtype).to(device).eval()
    except OSError as err:
        raise OptionError(
            Option("teacher", teacher), f" cannot be loaded ({err}); give the dense model"
        ) from err
    dense.requires_grad_(False)
    return model, dense


def _nll(logits: torch.Tensor, ids: torch.Tensor, vocab: int) -> float:
    """The summed cross-entropy of the windows' next tokens under ``logits`` (its first ``vocab``)."""
    shifted = logits[:, :-1, :vocab].reshape(-1, vocab)
    return float(nn.functional.cross_entropy(shifted, ids[:, 1:].reshape(-1), reduction="sum"))


def heldout_scores(models: Models, windows: torch.Tensor, micro: int, device: torch.device) -> dict:
    """On the held-out windows: the mean KL per token of the student from the teacher, and both models'
    mean next-token cross-entropy (nats; exp of it is their perplexity on these windows)."""
    kl = student_nll = teacher_nll = 0.0
    models.student.eval()
    with torch.no_grad(), models.autocast(device):
        for chunk in windows.split(micro):
            ids = chunk.to(device)
            teacher = models.teacher(input_ids=ids, use_cache=False).logits.float()
            student = models.student(input_ids=ids, use_cache=False).logits.float()
            kl += float(kl_sum(student, teacher))
            student_nll += _nll(student, ids, teacher.shape[-1])
            teacher_nll += _nll(teacher, ids, teacher.shape[-1])
    models.student.train()
    predicted = windows.shape[0] * (windows.shape[1] - 1)
    return {
        "kl": kl / windows.numel(),
        "student_nll": student_nll / predicted,
        "teacher_nll": teacher_nll / predicted,
    }


def train_step(
    models: Models, batch: torch.Tensor, options: Distillation, device: torch.device, ranks: Ranks
) -> float:
    """One optimizer step's forward and backward passes over this process's share of the windows
    ``batch``, in micro-batches; the gradients hold d(mean KL per token of the whole batch)/dW when it
    returns (averaged over the processes by DistributedDataParallel), plus the hidden-state loss's times
    ``hidden_weight`` when blocks are matched (``models.pairs``). Returns this process's mean KL."""
    chunks = batch.split(options.micro_batch)
    tokens = batch.numel()
    hidden = bool(models.pairs)
    total = 0.0
    for i, chunk in enumerate(chunks):
        ids = chunk.to(device)
        with torch.no_grad(), models.autocast(device):
            teacher = models.teacher(input_ids=ids, use_cache=False, output_hidden_states=hidden)
        last = i == len(chunks) - 1
        if models.sharded:  # FSDP: gradients reduce-scattered at the last micro-batch's backward only
            models.student.set_requires_gradient_sync(last)
        quiet = not last and ranks.world > 1 and not models.sharded
        sync = models.forward.no_sync() if quiet else contextlib.nullcontext()
        with sync:
            with models.autocast(device):
                student = models.forward(input_ids=ids, use_cache=False, output_hidden_states=hidden)
            kl = kl_sum(student.logits, teacher.logits) / tokens
            loss = kl
            if hidden:  # block b's output is hidden_states[b + 1]
                pairs = [(s + 1, t + 1) for s, t in models.pairs]
                share = ids.numel() / tokens
                matched = hidden_loss(student.hidden_states, teacher.hidden_states, pairs)
                loss = kl + options.hidden_weight * share * matched
            loss.backward()
        total += float(kl.detach())
    return total


def block_pairs(student: Path, models: Models) -> list[tuple[int, int]]:
    """The student's blocks matched to the teacher's (``hidden_pairs``): the blocks removed as its pruning
    report records them (a depth recipe's, or a combined recipe's depth part's), none for the rest."""
    removed: list[int] = []
    report_file = student / digests.REPORT
    if report_file.is_file():
        report = json.loads(report_file.read_text())
        parts = combined_record(report).get("parts") or []
        for compact in [report.get("compact"), *(part.get("compact") for part in parts)]:
            if compact and compact.get("structure") == "depth":
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


def _weights(models: Models) -> dict[str, torch.Tensor]:
    return {name: W.detach().to("cpu", copy=True) for name, W in models.student.state_dict().items()}


@dataclass
class Progress:
    """Where the run is: the next step, the history of steps and held-out scores, the best so far."""

    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    heldout: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resume(
    models: Models,
    optimizer: torch.optim.Optimizer,
    checkpoints: Checkpoints,
    device: torch.device,
    ranks: Ranks,
) -> Progress | None:
    """The last checkpoint's weights, AdamW state and random state restored; its progress (None: none)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = checkpoints.load()
    if state is None:
        return None
    whole = StateDictOptions(full_state_dict=True)  # each process takes its slice when sharded
    set_model_state_dict(models.student, state["model"], options=whole)
    named = _by_name(state["optimizer"], list(models.params))
    set_optimizer_state_dict(models.student, optimizer, named, options=whole)
    set_random_state(state["random"], device)
    if ranks.main:
        step = state["progress"]["step"]
        log.info("distill: resumed from the checkpoint of step %d (%s)", step, checkpoints.dir)
    return Progress(**state["progress"])


def _by_name(saved: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """AdamW's state keyed by parameter names, as checkpoints hold it; one keyed by the parameters' positions
    (``optimizer.state_dict()``: checkpoints of earlier versions) is rekeyed by ``names``, in that order."""
    if all(isinstance(key, str) for key in saved["state"]):
        return saved
    return {
        "state": {names[i]: value for i, value in saved["state"].items()},
        "param_groups": [
            group | {"params": [names[i] for i in group["params"]]} for group in saved["param_groups"]
        ],
    }


def _checkpoint(
    models: Models,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    text: Text,
    options: Distillation,
    checkpoints: Checkpoints,
    device: torch.device,
    ranks: Ranks,
) -> None:
    """The held-out scores at this step; the checkpoint, with the best weights if they are the best (every
    process when sharded: the forward passes and the gathering of the whole weights are collective; the
    first one writes)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    scores = heldout_scores(models, text.heldout, options.micro_batch, device)
    scores["step"] = progress.step
    progress.heldout.append(scores)
    improved = scores["kl"] < progress.best["kl"]
    if improved:
        progress.best = scores
    # whole tensors on the CPU, on the first process only when sharded
    whole = StateDictOptions(full_state_dict=True, cpu_offload=True) if models.sharded else None
    weights = get_model_state_dict(models.student, options=whole) if models.sharded else _weights(models)
    state = {
        "model": weights,
        "optimizer": get_optimizer_state_dict(models.student, optimizer, options=whole),
        "random": random_state(device),
        "progress": progress.to_dict(),
    }
    if not ranks.main:
        return
    checkpoints.save(state, state["model"] if improved else None)
    log.info(
        "distill: checkpoint at step %d/%d: held-out KL %.4g (best %.4g at step %d)",
        progress.step, options.steps, scores["kl"], progress.best["kl"], progress.best["step"],
    )  # fmt: skip


def _report(progress: Progress, options: Distillation, ranks: Ranks, bar: Any) -> None:
    """The step just done on the bar and in the log (twenty lines a run; every step's with -v): its KL, the
    learning rate, tokens/s and the time left at the mean step time so far."""
    step = progress.history[-1]
    rate = options.batch_size * options.seqlen / step["seconds"]
    left = (options.steps - progress.step) * progress.seconds / len(progress.history)
    every = max(1, options.steps // 20)
    level = logging.INFO if progress.step % every == 0 and ranks.main else logging.DEBUG
    log.log(
        level,
        "distill: step %d/%d: KL %.4g, lr %.3g, %.0f tokens/s, %s left",
        progress.step, options.steps, step["kl"], step["lr"], rate, _clock(left),
    )  # fmt: skip
    bar.set_postfix(kl=f"{step['kl']:.4f}", tokens_s=f"{rate:.0f}")
    bar.update(1)


def _clock(seconds: float) -> str:
    """1:05, 1:02:03."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _bar(options: Distillation, start: int, ranks: Ranks, show: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=options.steps, initial=start, desc="distill", unit="step", disable=not (show and ranks.main),
        dynamic_ncols=True,
    )  # fmt: skip


def train(
    models: Models,
    text: Text,
    options: Distillation,
    work: Path,
    device: torch.device,
    ranks: Ranks,
    progress_bar: bool = True,
) -> Progress:
    """Steps from the last checkpoint (or the first) to the last (the module's steps 2 and 3)."""
    params = list(models.params.values())
    optimizer = torch.optim.AdamW(params, lr=options.lr, betas=(0.9, 0.95), weight_decay=0.0)
    checkpoints = Checkpoints(work)
    progress = _resume(models, optimizer, checkpoints, device, ranks)
    if progress is None:
        progress = Progress()
        if ranks.main or models.sharded:
            before = heldout_scores(models, text.heldout, options.micro_batch, device) | {"step": 0}
            progress.heldout.append(before)
            progress.best = before
            if ranks.main:
                log.info("distill: before training: held-out KL %.4g", before["kl"])
    if ranks.world > 1 and not models.sharded:
        models.forward = nn.parallel.DistributedDataParallel(models.student)
    share = options.batch_size // ranks.world
    bar = _bar(options, progress.step, ranks, progress_bar)
    while progress.step < options.steps:
        started = time.monotonic()
        indices = step_windows(progress.step, options.batch_size, text.train.shape[0], options.seed)
        mine = indices[ranks.rank * share : (ranks.rank + 1) * share]
        lr = lr_at(progress.step, options.steps, options.warmup_steps, options.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        kl = train_step(models, text.train[mine], options, device, ranks)
        mask_gradients(models.params, models.masks)
        nn.utils.clip_grad_norm_(params, CLIP)
        optimizer.step()
        apply_masks(models.params, models.masks)
        kl = ranks.mean(kl, device)
        seconds = time.monotonic() - started
        progress.seconds += seconds
        progress.step += 1
        progress.history.append({"step": progress.step, "kl": kl, "lr": lr, "seconds": round(seconds, 4)})
        _report(progress, options, ranks, bar)
        if progress.step % options.checkpoint_every == 0 or progress.step == options.steps:
            if ranks.main or models.sharded:
                _checkpoint(models, optimizer, progress, text, options, checkpoints, device, ranks)
            ranks.barrier()
    bar.close()
    return progress


def distill(
    student: str,
    teacher: str,
    out: str | Path,
    work: str | Path,
    options: Distillation,
    device: str = "auto",
    dtype: str = "auto",
    progress_bar: bool = True,
    delete_checkpoints: bool = False,
    shard_models: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train ``student`` toward ``teacher`` on ``options.source`` and write it to ``out`` (the module's
    steps); returns what ``distillation.json`` records (on every process; only the first writes).
    ``delete_checkpoints``: ``work`` is deleted once ``out`` is written (the checkpoints serve only to resume
    this run; ``distillation.json`` keeps their held-out history). ``shard_models``: under torchrun, the
    student, its gradients and AdamW's moments and the teacher sharded over the processes by FSDP instead of
    whole in each (for models that do not fit one device; the same steps, equal to rounding). An ``out``
    that holds another model, or the distillation of other inputs or options, is replaced only with
    ``overwrite`` (refused before any training)."""
    from thanos.stages.publish import check_out

    out, work = Path(out), Path(work)
    for name, model in (("student", student), ("teacher", teacher)):
        if Path(model).exists() and out.resolve() == Path(model).resolve():
            raise OptionError(Option("out", str(out)), f" is the {name}; give a new directory")
    check_out(out)
    ranks, dev = start_ranks(device)
    if ranks.main and (other := other_teacher(student, teacher)):
        log.warning("distill: %s", other)
    if options.batch_size % ranks.world:
        raise OptionError(
            Option("batch_size", str(options.batch_size)),
            f" is not a multiple of the {ranks.world} processes; give a multiple of {ranks.world}",
        )
    sharded = shard_models and ranks.world > 1
    if shard_models and not sharded:
        log.warning(
            "distill: --shard has nothing to shard in one process: start it under torchrun --nproc-per-node N"
        )
    models, tokenizer = load_models(student, teacher, dev, dtype, options.seqlen, ranks, sharded)
    if sharded and ranks.main:
        log.info(
            "distill: sharded (FSDP) over %d processes: each holds 1/%d of the student, its gradients, "
            "AdamW's moments and the teacher", ranks.world, ranks.world,
        )  # fmt: skip
    if options.hidden_weight:
        models.pairs = block_pairs(Path(student), models)
    text = load_text(
        options.source, tokenizer, options.seqlen, options.heldout, options.tokens, options.text_field
    )
    record = run_record(student, teacher, text, options)
    with contextlib.ExitStack() as held:
        if ranks.main:
            if not overwrite:
                check_previous(out, run_digest(record))
            held.enter_context(exclusive_workdir(work, "--work"))  # one run at a time on these checkpoints
            about = {
                "student": str(Path(student).resolve()),
                "teacher": str(teacher),
                "out": str(out.resolve()),
            }
            prepare_work(work, record, about)
        ranks.barrier()
        progress = train(models, text, options, work, dev, ranks, progress_bar)
        zeros = zeros_held(models, ranks, dev)
        result = summary(record, teacher, progress, options, text, zeros, ranks, sharded)
        if ranks.main:
            best = Checkpoints(work).best_weights()
            write_student(Path(student), out, best, result)
            log.info("distill: wrote %s (the weights of step %d)", out, progress.best["step"])
            if delete_checkpoints:
                shutil.rmtree(work)
                log.info("distill: deleted the checkpoints (%s)", work)
        ranks.barrier()
    return result


def run_digest(record: dict[str, Any]) -> str:
    """The sha256 of a run's record (its inputs and options), which ``distillation.json`` keeps."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def check_previous(out: Path, digest: str) -> None:
    """Refuse an ``out`` that holds anything but this run's own earlier result (its ``distillation.json``
    recording the same inputs and options): another pruned model, or another distillation."""
    if not out.is_dir() or not any(out.iterdir()):
        return
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


def zeros_held(models: Models, ranks: Ranks, device: torch.device) -> int:
    """The pruned weights (the masks' zeros) that are exactly zero now: all of them, or it raises (each
    process counts its slices when sharded)."""
    held = pruned = 0
    for name, keep in models.masks.items():
        W, kept = local(models.params[name].detach()), local(keep)
        held += int((W[~kept] == 0).sum())
        pruned += int((~kept).sum())
    if models.sharded:
        held, pruned = int(ranks.sum(held, device)), int(ranks.sum(pruned, device))
    if held != pruned:
        raise RuntimeError(f"{pruned - held} pruned weight(s) are no longer zero after training")
    return held


def summary(
    record: dict[str, Any],
    teacher: str,
    progress: Progress,
    options: Distillation,
    text: Text,
    zeros: int,
    ranks: Ranks,
    sharded: bool,
) -> dict[str, Any]:
    """What ``distillation.json`` records: the source, the teacher (as a card names it), the budget and what
    was trained, the losses."""
    trained = progress.step * options.batch_size * options.seqlen
    return {
        "source": record["text"],
        "teacher": public_name(teacher),
        "run_sha256": run_digest(record),  # a rerun of the same inputs and options may replace it
        "options": asdict(options),
        "steps": progress.step,
        "tokens": trained,
        "heldout_windows": int(text.heldout.shape[0]),
        "processes": ranks.world,
        "sharded": sharded,
        "seconds": round(progress.seconds, 1),
        "tokens_per_second": round(trained / progress.seconds, 1) if progress.seconds else None,
        "zeros_kept": zeros,
        "heldout": progress.heldout,
        "best": progress.best,
        "train_kl": [entry["kl"] for entry in progress.history],
    }
