"""Recovery: a pruned block's kept weights trained so that its outputs match the dense block's again.

Block-wise reconstruction by gradient descent (EBFT, Guo et al. 2024, arXiv:2402.12419): for one decoder
block with pruned weights W (masks M, 1 where a weight is kept), minimise over the kept weights

    L(W) = mean over the calibration tokens of || f(X; W) - Y ||^2

where X are the block's inputs and Y the dense model's outputs of that block. Adam on fp32 master weights,
the learning rate decayed linearly to 0 over the run. The pattern is kept by construction: each gradient
is multiplied by M before the step, so a pruned weight's Adam moments stay 0 and its update is 0, and the
weights are multiplied by M after each step as well, so every pruned weight stays exactly 0.

Part of the calibration windows is held out: the validation loss is measured before training and after
every epoch, and the weights of the best epoch are kept (an epoch that makes it worse is not), so recovery
never leaves a block worse on held-out data than pruning left it.

Pure tensors and callables: no I/O, no config (``thanos.stages.recover`` reads the stores and writes the
weights).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

Batches = Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]  # (X, Y) pairs, one pass
EpochBatches = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]  # epoch -> its (X, Y) pairs


@dataclass
class RecoveryLog:
    """What one block's recovery did: the validation loss before training and after each epoch, the epoch
    kept (0: none, the pruned weights are kept as they were), the mean training loss of each epoch."""

    loss_before: float
    val_losses: list[float] = field(default_factory=list)
    train_losses: list[float] = field(default_factory=list)
    best_epoch: int = 0
    seconds: float = 0.0

    @property
    def loss_after(self) -> float:
        return self.val_losses[self.best_epoch - 1] if self.best_epoch else self.loss_before

    def to_dict(self) -> dict[str, object]:
        return {
            "loss_before": self.loss_before,
            "loss_after": self.loss_after,
            "epochs_kept": self.best_epoch,
            "val_losses": self.val_losses,
            "train_losses": self.train_losses,
            "seconds": round(self.seconds, 3),
        }


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every token and feature, in fp32."""
    return torch.mean((output.float() - target.float()) ** 2)


def validation_loss(forward: Callable[[torch.Tensor], torch.Tensor], batches: Batches) -> float:
    """The mean squared error of ``forward`` over every validation batch, weighted by its samples."""
    total, count = 0.0, 0
    with torch.no_grad():
        for X, Y in batches():
            total += float(mse(forward(X), Y)) * X.shape[0]
            count += X.shape[0]
    return total / count


def recover_block(
    forward: Callable[[torch.Tensor], torch.Tensor],
    weights: dict[str, nn.Parameter],
    masks: dict[str, torch.Tensor],
    train: EpochBatches,
    steps_per_epoch: int,
    validation: Batches,
    epochs: int,
    lr: float,
    on_epoch: Callable[[int, float], None] | None = None,
) -> RecoveryLog:
    """Train ``weights`` (fp32 parameters that ``forward`` uses, each with its boolean ``masks``: True
    where a weight is kept; 1 byte a weight instead of 4 for an fp32 mask) for
    ``epochs`` passes over ``train(epoch)`` (``steps_per_epoch`` batches each) with Adam at learning rate
    ``lr`` decayed linearly to 0; keep the epoch with the lowest loss on ``validation`` (or none).
    ``on_epoch(epoch, val_loss)`` after each epoch.

    The weights are changed in place and hold the kept epoch's values on return."""
    started = time.monotonic()
    for name, W in weights.items():
        if W.dtype != torch.float32:
            raise ValueError(f"{name}: recovery trains fp32 master weights, got {W.dtype}")
        W.data.mul_(masks[name])
    log = RecoveryLog(loss_before=validation_loss(forward, validation))
    steps = epochs * steps_per_epoch
    optimizer = torch.optim.Adam(list(weights.values()), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / max(steps, 1)))
    best = {name: W.detach().clone() for name, W in weights.items()}
    best_loss = log.loss_before
    for epoch in range(1, epochs + 1):
        total, count = 0.0, 0
        for X, Y in train(epoch):
            loss = mse(forward(X), Y)
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            for name, W in weights.items():
                if W.grad is not None:  # None: no token reached it (an expert the router skipped)
                    W.grad.mul_(masks[name])  # a pruned weight gets no gradient: moments and update stay 0
            optimizer.step()
            schedule.step()
            with torch.no_grad():
                for name, W in weights.items():
                    W.mul_(masks[name])
            total += float(loss.detach()) * X.shape[0]
            count += X.shape[0]
        log.train_losses.append(total / count)
        val = validation_loss(forward, validation)
        log.val_losses.append(val)
        if val < best_loss and math.isfinite(val):
            best_loss, log.best_epoch = val, epoch
            best = {name: W.detach().clone() for name, W in weights.items()}
        if on_epoch is not None:
            on_epoch(epoch, val)
    with torch.no_grad():
        for name, W in weights.items():
            W.copy_(best[name])
    log.seconds = time.monotonic() - started
    return log


def split_windows(nsamples: int, held: int) -> tuple[list[int], list[int]]:
    """(training, validation) window indices: the last ``held`` of ``nsamples`` windows are held out."""
    return list(range(nsamples - held)), list(range(nsamples - held, nsamples))


def batched(indices: Iterable[int], batch_size: int) -> list[list[int]]:
    """``indices`` in consecutive batches of ``batch_size`` (the last one shorter)."""
    indices = list(indices)
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]
