"""``recover`` stage: one pruned block's kept weights trained to match the dense block's outputs again.

Reads the block's pruned layers (``PRUNED/block{l}``), its inputs (an activations store: the chain's
``inputs_l``) and its targets (``target: dense``: the dense model's outputs of the block, the dense chain's
``inputs_{l+1}``; ``target: block``: the dense block run here over the same inputs), trains the weights of
every layer the recipe covers (their zeros kept: a ``neurons:p`` recipe's attention and MLP feeders, which
it leaves as they are, are trained too) with ``thanos.pruning.recovery.recover_block`` in fp32 on
``device``, and writes the block atomically as ``PRUNED/recovered/block{l}``: every layer's file as prune
wrote it, the trained ones replaced (in the checkpoint's dtype, every pruned weight checked still zero,
their stats gaining ``recovery``), and ``recovery.json`` (the losses per epoch, the epoch kept, seconds,
peak memory). Norms, biases, routers and the layers a recipe excludes are not trained.

Memory is one block at a time: the block in fp32, its trained weights' Adam state and best copy, and
``batch_size`` windows of activations read from the stores per step.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from thanos.data.storage import Activations, dtype_name, write_activations
from thanos.events import OnEvent, RecoveryEpoch, ignore
from thanos.files.atomic import atomic_path
from thanos.files.layout import RECOVERY_RECORD, pruned_layer_name
from thanos.files.ledger import file_stamp
from thanos.files.pruned_layers import STAMP
from thanos.models import ModelHandle
from thanos.pruning.recovery import batched, recover_block, split_windows
from thanos.recipes.recipe import Recipe
from thanos.stages.capture import load_pruned, open_block
from thanos.stages.common import Compute, batches, check_finite
from thanos.stages.memory import peak_rss_mib

log = logging.getLogger(__name__)


def recover(
    model: str | Path | ModelHandle,
    block: int,
    recipe: Recipe,
    pruned_dir: str | Path,
    out_dir: str | Path,
    inputs: str | Path,
    targets: str | Path | None = None,
    device: str = "auto",
    dtype: str = "auto",
    on_event: OnEvent = ignore,
) -> dict[str, Any]:
    """Recover block ``block`` of ``recipe`` (``recipe.recover``'s options) into ``out_dir``; return its
    record (``recovery.json``). ``targets``: the dense model's outputs of the block (``target: dense``);
    None computes them with the dense block (``target: block``). The forward and backward passes run in
    the compute dtype ``dtype`` (``thanos.stages.common.compute_dtype``: autocast where it is not float32);
    the weights and Adam's state are float32 whatever it is. ``on_event``: told of each epoch's validation
    loss (``thanos.events.RecoveryEpoch``)."""
    options = recipe.recover
    if options is None:
        raise ValueError(f"recipe {recipe.name} has no recover options")
    started = time.monotonic()
    adapter, checkpoint, acts = open_block(model, block, inputs)
    layers = recipe.layers(adapter.block_layers(block), adapter.layers)
    pruned = load_pruned(pruned_dir, layers)
    if not pruned:
        raise ValueError(f"{pruned_dir}: no pruned layer of block {block} to recover")
    train_idx, val_idx = split_windows(acts.nsamples, options.held_out(acts.nsamples))
    compute = Compute.of(device, dtype, adapter.dtype)
    dev = compute.device
    out_dir = Path(out_dir)
    with atomic_path(out_dir, is_dir=True) as tmp:
        Y = _targets(adapter, checkpoint, block, acts, targets, tmp / ".targets.zarr", compute)
        module, before, weights, masks = _trainable_block(adapter, checkpoint, block, layers, pruned, dev)

        def pairs(indices: list[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            return _window_pairs(acts, Y, indices, options.batch_size, dev)

        def train(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            order = torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(epoch))
            return pairs([train_idx[i] for i in order.tolist()])

        def report(epoch: int, val: float) -> None:
            log.info("recover: block %d epoch %d/%d: validation loss %.6g", block, epoch, options.epochs, val)
            on_event(RecoveryEpoch(block, epoch, options.epochs, val))

        result = recover_block(
            _block_forward(adapter, module, block, compute),
            weights,
            masks,
            train,
            len(batched(train_idx, options.batch_size)),
            lambda: pairs(val_idx),
            options.epochs,
            options.lr,
            report,
        )
        shutil.rmtree(tmp / ".targets.zarr", ignore_errors=True)
        _write_block(
            tmp, Path(pruned_dir), adapter.layer_weights(module, block, layers), before, result.to_dict()
        )
        record = {
            "block": block,
            "recipe": recipe.name,
            "recover": options.to_dict(),
            "layers": sorted(layers),
            "windows": {"train": len(train_idx), "validation": len(val_idx)},
            "compute_dtype": dtype_name(compute.dtype),
            **result.to_dict(),
            "seconds": round(time.monotonic() - started, 3),
            "peak_rss_mib": round(peak_rss_mib(), 1),
        }
        (tmp / RECOVERY_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    log.info(
        "recover: block %d: validation loss %.6g -> %.6g (epoch %d of %d kept), %.1f s",
        block, result.loss_before, result.loss_after, result.best_epoch, options.epochs, record["seconds"],
    )  # fmt: skip
    return record


def _trainable_block(
    adapter: Any, checkpoint: Any, block: int, layers: list[str], pruned: dict[str, torch.Tensor], device: Any
) -> tuple[torch.nn.Module, dict[str, torch.Tensor], dict[str, torch.nn.Parameter], dict[str, torch.Tensor]]:
    """The pruned block in fp32 on ``device``, every parameter frozen but the weights to train: (the
    module, the pruned weights of ``layers`` as they were (CPU copies, the checkpoint's dtype: the zeros
    to keep), the weights to train by parameter name, their masks (bool, True where a weight is kept))."""
    module = adapter.load_block(checkpoint, block, pruned).to(device, torch.float32)
    module.requires_grad_(False)
    before = adapter.layer_weights(module, block, layers)  # the pruned block's weights, zeros to keep
    before = {layer: W.to("cpu", adapter.dtype, copy=True) for layer, W in before.items()}
    weights = adapter.trained_parameters(module, layers)
    masks = {name: W != 0 for name, W in weights.items()}  # bool: a quarter of an fp32 mask's memory
    for W in weights.values():
        W.requires_grad_(True)
    return module, before, weights, masks


def _window_pairs(
    acts: Activations, Y: Activations, indices: list[int], batch_size: int, device: Any
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) of the windows ``indices``, ``batch_size`` windows at a time, fp32 on ``device``."""
    for batch in batched(indices, batch_size):
        X = torch.cat([acts.read(i, i + 1) for i in batch]).to(device, torch.float32)
        yield X, torch.cat([Y.read(i, i + 1) for i in batch]).to(device, torch.float32)


def _block_forward(
    adapter: Any, module: torch.nn.Module, block: int, compute: Compute
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The block's training forward, under autocast to the compute dtype where it is not float32."""

    def forward(X: torch.Tensor) -> torch.Tensor:
        if compute.dtype == torch.float32:
            return adapter.train_block(module, block, X)
        with torch.autocast(compute.device.type, dtype=compute.dtype):
            return adapter.train_block(module, block, X)

    return forward


def _write_block(
    tmp: Path, pruned_dir: Path, trained: dict[str, torch.Tensor], before: dict[str, torch.Tensor], log: dict
) -> None:
    """Every file of the pruned block as prune wrote it, the ``trained`` layers' weights replacing theirs
    (``_write_layer``)."""
    for path in pruned_dir.iterdir():
        if path.is_file():
            shutil.copy2(path, tmp / path.name)
    for layer, W in trained.items():
        _write_layer(tmp, layer, W, before[layer], log)


def _targets(
    adapter: Any,
    checkpoint: Any,
    block: int,
    acts: Activations,
    targets: str | Path | None,
    scratch: Path,
    compute: Compute,
) -> Activations:
    """The block's targets: the given store (checked against the inputs), or the dense block's outputs over
    the inputs, computed as propagate computes them, written to ``scratch`` (deleted with the step)."""
    if targets is not None:
        store = Activations(targets)
        shape = (acts.nsamples, acts.seqlen, acts.hidden_size)
        if (store.nsamples, store.seqlen, store.hidden_size) != shape:
            raise ValueError(
                f"{targets}: {store.nsamples} x {store.seqlen} x {store.hidden_size} activations, the inputs "
                f"are {acts.nsamples} x {acts.seqlen} x {acts.hidden_size}; both must be of one calibration"
            )
        return store
    dense = compute.module(adapter.load_block(checkpoint, block))
    attrs = {"targets": "dense block"}
    with write_activations(
        scratch, acts.nsamples, acts.seqlen, acts.hidden_size, acts.dtype, block + 1, attrs
    ) as writer:
        for start, stop in batches(acts.nsamples, 8, f"recover block {block}: dense targets"):
            hidden = adapter.run_block(dense, block, compute.tensor(acts.read(start, stop))).to(acts.dtype)
            check_finite(hidden, "outputs", block, start, scratch)
            writer.write(start, hidden.cpu())
    del dense
    return Activations(scratch)


def _write_layer(out: Path, layer: str, W: torch.Tensor, before: torch.Tensor, log: dict[str, Any]) -> None:
    """The trained ``W`` in ``before``'s dtype, refused if a weight pruned in ``before`` is not zero; its
    stats gain ``recovery``."""
    weight = W.to(device="cpu", dtype=before.dtype).contiguous()
    revived = int(((before == 0) & (weight != 0)).sum())
    if revived:
        raise RuntimeError(f"recover: {layer}: {revived} pruned weights are no longer zero (a bug)")
    save_file({"weight": weight}, str(weight_file := out / pruned_layer_name(layer, "safetensors")))
    stats_file = out / pruned_layer_name(layer, "json")
    stats = json.loads(stats_file.read_text())
    stats["recovery"] = {key: log[key] for key in ("loss_before", "loss_after", "epochs_kept")}
    stats[STAMP] = file_stamp(weight_file)
    stats_file.write_text(json.dumps(stats, indent=2) + "\n")
