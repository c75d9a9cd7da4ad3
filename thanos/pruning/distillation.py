"""Distillation: a pruned model (the student) trained toward the dense model (the teacher) on real text.

Minitron's logit loss (Muralidharan et al. 2024, arXiv:2407.14679): for every position t of a window, the
forward KL divergence from the teacher's next-token distribution p_t to the student's q_t,

    L = (1 / T) sum_t sum_v p_t(v) (log p_t(v) - log q_t(v))

over the T tokens of a global batch, in fp32 whatever the compute dtype. With a hidden-state weight w
(Minitron's intermediate-state loss, for students whose blocks were removed or narrowed), each student
block's output h_i is also matched to the output g_j(i) of the teacher block it stands for (``hidden_pairs``):

    L += w (1 / |pairs|) sum_(i, j) ||h_i - g_j||^2 / ||g_j||^2    (``hidden_loss``, per window batch)

AdamW on fp32 master weights, the
learning rate warmed up linearly and decayed on a cosine to a tenth (``lr_at``). The zeros pruning wrote stay
zeros: a weight matrix that holds zeros gets a mask of its non-zeros (``zero_masks``), its gradient is masked
before each step (its Adam moments and update stay 0) and its weights after (``apply_masks``).

Which windows a step trains on is a function of the step alone (``step_windows``: a seeded permutation per
pass over the text), so a run resumed at step s continues on exactly the windows an uninterrupted run would.

Pure tensors: no I/O, no models loaded, no config (``thanos.stages.distill.distill`` reads the text and the
models, checkpoints and writes the student).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def kl_sum(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """sum over the positions of KL(p_teacher || q_student) of their next-token distributions, in fp32.

    Both are (..., vocab) logits of the same positions; a student with a larger padded vocabulary than the
    teacher is compared on the teacher's entries (the rest get no probability from the teacher)."""
    vocab = teacher_logits.shape[-1]
    log_q = F.log_softmax(student_logits[..., :vocab].float(), dim=-1)
    log_p = F.log_softmax(teacher_logits.float(), dim=-1)
    return F.kl_div(log_q.reshape(-1, vocab), log_p.reshape(-1, vocab), log_target=True, reduction="sum")


def hidden_pairs(student_blocks: int, teacher_blocks: int, removed: Sequence[int]) -> list[tuple[int, int]]:
    """(student block, teacher block) whose outputs are matched: the teacher's blocks less ``removed`` are
    the student's, in order; a kept block followed by a removed run stands for the run's last block (its
    output is what the next kept block read in the teacher; with a fitted map it is fitted to it)."""
    kept = [block for block in range(teacher_blocks) if block not in set(removed)]
    if len(kept) != student_blocks:
        raise ValueError(
            f"the student has {student_blocks} blocks, the teacher {teacher_blocks} less {len(removed)} "
            f"removed: {len(kept)}"
        )
    return [(i, (kept[i + 1] - 1 if i + 1 < len(kept) else teacher_blocks - 1)) for i in range(len(kept))]


def hidden_loss(
    student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor], pairs: Sequence[tuple[int, int]]
) -> torch.Tensor:
    """The mean over ``pairs`` of the relative squared error ||h_i - g_j||^2 / ||g_j||^2 of the student's
    block outputs ``student[i]`` to the teacher's ``teacher[j]`` (each (..., hidden)), in fp32."""
    terms = [
        (student[i].float() - teacher[j].float()).pow(2).sum()
        / teacher[j].float().pow(2).sum().clamp_min(1e-12)
        for i, j in pairs
    ]
    return torch.stack(terms).mean()


def lr_at(step: int, steps: int, warmup: int, lr: float, floor: float = 0.1) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``steps``: linear warm-up over the first
    ``warmup`` steps to ``lr``, then a cosine decay to ``floor * lr`` at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    decay = steps - warmup
    progress = (step - warmup) / decay if decay > 1 else 1.0
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def step_windows(step: int, batch: int, windows: int, seed: int) -> list[int]:
    """The ``batch`` window indices (of ``windows`` training windows) optimizer step ``step`` trains on:
    position ``step * batch + j`` of the endless sequence of passes over the text, pass e in the order of
    ``torch.randperm`` seeded with ``seed + e`` (every window once per pass)."""
    indices, orders = [], {}
    for position in range(step * batch, (step + 1) * batch):
        epoch, within = divmod(position, windows)
        if epoch not in orders:
            generator = torch.Generator().manual_seed(seed + epoch)
            orders[epoch] = torch.randperm(windows, generator=generator).tolist()
        indices.append(orders[epoch][within])
    return indices


def zero_masks(named: Iterable[tuple[str, nn.Parameter]]) -> dict[str, torch.Tensor]:
    """A boolean mask (True: kept) for every weight matrix that holds exact zeros: the zeros that pruning
    wrote (unstructured, n:m, outlier rows) stay zeros through training. Matrices without a zero (dense
    layers, the smaller shapes of removed structures) are trained whole."""
    masks = {}
    for name, W in named:
        if W.dim() == 2 and bool((W == 0).any()):
            masks[name] = W.detach() != 0
    return masks


def mask_gradients(params: dict[str, nn.Parameter], masks: dict[str, torch.Tensor]) -> None:
    """A pruned weight gets no gradient: its Adam moments and its update stay 0."""
    for name, keep in masks.items():
        grad = params[name].grad
        if grad is not None:
            grad.mul_(keep)


@torch.no_grad()
def apply_masks(params: dict[str, nn.Parameter], masks: dict[str, torch.Tensor]) -> None:
    """Every pruned weight exactly 0 again (after each optimizer step)."""
    for name, keep in masks.items():
        params[name].mul_(keep)
