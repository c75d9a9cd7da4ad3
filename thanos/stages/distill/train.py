"""The training of a distillation (``thanos.stages.distill.distill``'s steps 2 and 3): the student's steps
toward the teacher's next-token distributions, the held-out scores and the checkpoints, from the last
checkpoint (or the first step) to the last.

Each step trains ``batch_size`` windows (``step_windows``: a function of the step alone, so a resumed run
trains on the windows an uninterrupted run trains on) in micro-batches, AdamW on fp32 master weights, the
gradients masked so that every zero pruning wrote stays zero. Every ``checkpoint_every`` steps and at the
last, the held-out KL is measured and ``Checkpoints`` written (the weights with the lowest held-out KL so far
kept as ``best.pt``). Each step, checkpoint and resume is told to ``on_event`` (``thanos.events``: the
terminal's status line shows the steps) and logged (a step twenty times a run, every step's with -v).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from thanos.events import (
    DistillBefore,
    DistillCheckpoint,
    DistillResumed,
    DistillStep,
    OnEvent,
    ignore,
)
from thanos.pruning.distillation import (
    apply_masks,
    hidden_loss,
    kl_sum,
    lr_at,
    mask_gradients,
    step_windows,
)
from thanos.recipes.training import Distillation
from thanos.stages.common import random_state, set_random_state
from thanos.stages.distill.files import Checkpoints
from thanos.stages.distill.ranks import Ranks, local
from thanos.stages.distill.text import Text

log = logging.getLogger("thanos.stages.distill.distill")

CLIP = 1.0  # gradient norm clipped to this (Minitron's setting)


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
    # a student of a smaller vocabulary (``vocab:P``): the teacher's id of each of its tokens (its
    # vocabulary.json's ``kept_ids``); the teacher reads the student's windows in its own ids, and its
    # distributions are those over the student's tokens (its logits at them: softmax renormalises)
    kept: torch.Tensor | None = None

    def teacher_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The student's token ids ``ids`` as the teacher's."""
        return ids if self.kept is None else self.kept.to(ids.device)[ids]

    def at_student_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The teacher's ``logits`` at the student's tokens (all of them for a student of its vocabulary)."""
        return logits if self.kept is None else logits[..., self.kept.to(logits.device)]

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)


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
            teacher = models.teacher(input_ids=models.teacher_ids(ids), use_cache=False).logits.float()
            teacher = models.at_student_tokens(teacher)
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
            teacher = models.teacher(
                input_ids=models.teacher_ids(ids), use_cache=False, output_hidden_states=hidden
            )
        last = i == len(chunks) - 1
        if models.sharded:  # FSDP: gradients reduce-scattered at the last micro-batch's backward only
            models.student.set_requires_gradient_sync(last)
        quiet = not last and ranks.world > 1 and not models.sharded
        sync = models.forward.no_sync() if quiet else contextlib.nullcontext()
        with sync:
            with models.autocast(device):
                student = models.forward(input_ids=ids, use_cache=False, output_hidden_states=hidden)
            kl = kl_sum(student.logits, models.at_student_tokens(teacher.logits)) / tokens
            loss = kl
            if hidden:  # block b's output is hidden_states[b + 1]
                pairs = [(s + 1, t + 1) for s, t in models.pairs]
                share = ids.numel() / tokens
                matched = hidden_loss(student.hidden_states, teacher.hidden_states, pairs)
                loss = kl + options.hidden_weight * share * matched
            loss.backward()
        total += float(kl.detach())
    return total


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
    on_event: OnEvent,
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
        resumed = DistillResumed(state["progress"]["step"], str(checkpoints.dir))
        log.info("distill: %s", resumed.text)
        on_event(resumed)
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
    on_event: OnEvent,
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
    written = DistillCheckpoint(
        progress.step, options.steps, scores["kl"], progress.best["kl"], progress.best["step"]
    )
    log.info("distill: %s", written.text)
    on_event(written)


def _report(progress: Progress, options: Distillation, ranks: Ranks, on_event: OnEvent) -> None:
    """The step just done, told to ``on_event`` (the first process's) and in the log (twenty lines a run;
    every step's with -v): its KL, tokens/s, the time left at the mean step time so far, the learning
    rate."""
    step = progress.history[-1]
    done = DistillStep(
        progress.step,
        options.steps,
        step["kl"],
        options.batch_size * options.seqlen / step["seconds"],
        (options.steps - progress.step) * progress.seconds / len(progress.history),
        step["lr"],
    )
    log.log(logging.INFO if done.listed and ranks.main else logging.DEBUG, "distill: %s", done.text)
    if ranks.main:
        on_event(done)


def train(
    models: Models,
    text: Text,
    options: Distillation,
    work: Path,
    device: torch.device,
    ranks: Ranks,
    on_event: OnEvent = ignore,
) -> Progress:
    """Steps from the last checkpoint (or the first) to the last (the module's steps 2 and 3), each told to
    ``on_event`` (``thanos.events``) on the first process."""
    params = list(models.params.values())
    optimizer = torch.optim.AdamW(params, lr=options.lr, betas=(0.9, 0.95), weight_decay=0.0)
    checkpoints = Checkpoints(work)
    progress = _resume(models, optimizer, checkpoints, device, ranks, on_event)
    if progress is None:
        progress = Progress()
        if ranks.main or models.sharded:
            before = heldout_scores(models, text.heldout, options.micro_batch, device) | {"step": 0}
            progress.heldout.append(before)
            progress.best = before
            if ranks.main:
                start = DistillBefore(before["kl"])
                log.info("distill: %s", start.text)
                on_event(start)
    if ranks.world > 1 and not models.sharded:
        models.forward = nn.parallel.DistributedDataParallel(models.student)
    share = options.batch_size // ranks.world
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
        _report(progress, options, ranks, on_event)
        if progress.step % options.checkpoint_every == 0 or progress.step == options.steps:
            if ranks.main or models.sharded:
                _checkpoint(models, optimizer, progress, text, options, checkpoints, device, ranks, on_event)
            ranks.barrier()
    return progress


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
