"""Activation stages: ``embed`` (tokens -> block 0 inputs), ``capture`` (dense block -> Hessians) and
``propagate`` (block l, pruned or dense -> block l + 1 inputs).

Each stage loads only the tensors it needs (one block, or the embeddings) and streams the activations
``batch_size`` samples at a time, so memory does not depend on the depth of the model.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from thanos.data.safetensors_io import load_safetensors
from thanos.data.storage import Activations, dtype_name, read_tokens, write_activations, write_hessians
from thanos.models import Checkpoint, ModelAdapter, ModelHandle, as_handle
from thanos.models.experts import MIN_SHARE
from thanos.pruning.hessian import HessianAccumulator, all_finite
from thanos.recipes.recipe import select_layers
from thanos.stages.common import Compute, batches, check_finite

log = logging.getLogger(__name__)


def embed(
    model: str | Path | ModelHandle,
    tokens: str | Path,
    out: str | Path,
    batch_size: int = 8,
    device: str = "auto",
    dtype: str = "auto",
) -> None:
    """Block 0 inputs: the embedding part of the model (token embeddings, plus positions for OPT), computed
    in ``dtype`` (``thanos.stages.common.compute_dtype``) and stored in the embeddings' own dtype."""
    handle = as_handle(model)
    adapter, checkpoint = handle.adapter, handle.checkpoint
    ids, attrs = read_tokens(tokens)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(
            f"{tokens}: expected a non-empty (nsamples, seqlen) token array, got shape {ids.shape}"
        )
    nsamples, seqlen = ids.shape
    if seqlen > adapter.max_positions:
        raise ValueError(f"{tokens}: seqlen {seqlen} exceeds the model's {adapter.max_positions} positions")
    embedding = adapter.load_embedding(checkpoint)
    stored = next(embedding.parameters()).dtype
    compute = Compute.of(device, dtype, stored)
    embedding = compute.module(embedding)
    vocab = int(adapter.config.vocab_size)
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(
            f"{tokens}: token ids span {int(ids.min())}..{int(ids.max())} but the model's vocabulary has "
            f"{vocab} entries; the tokens were made with another tokenizer"
        )
    log.info(
        "embed: %d samples x %d tokens -> %s (computed in %s, stored in %s)",
        nsamples, seqlen, out, dtype_name(compute.dtype), dtype_name(stored),
    )  # fmt: skip
    provenance = {
        "tokens": str(tokens),
        "calibration": {k: v for k, v in attrs.items() if k != "complete"},
        "compute_dtype": dtype_name(compute.dtype),
    }
    with (
        write_activations(out, nsamples, seqlen, adapter.hidden_size, stored, 0, provenance) as writer,
        torch.inference_mode(),
    ):
        for start, stop in batches(nsamples, batch_size, "embed"):
            hidden = embedding(torch.from_numpy(ids[start:stop].astype(np.int64)).to(compute.device))
            check_finite(hidden, "inputs", 0, start, out)
            writer.write(start, hidden.to(stored).cpu())


def open_block(
    model: str | Path | ModelHandle, block: int, inputs: str | Path
) -> tuple[ModelAdapter, Checkpoint, Activations]:
    """The model's adapter and lazy checkpoint, and block ``block``'s input store checked against them."""
    handle = as_handle(model)
    adapter, checkpoint = handle.adapter, handle.checkpoint
    adapter.check_block(block)
    acts = Activations(inputs)
    acts.check(adapter.hidden_size, block)
    return adapter, checkpoint, acts


def capture(
    model: str | Path | ModelHandle,
    block: int,
    inputs: str | Path,
    out: str | Path,
    batch_size: int = 8,
    device: str = "auto",
    dtype: str = "auto",
    outputs: str | Path | None = None,
) -> None:
    """One fp32 H = (2/N) sum X X^T per input group of the dense block, from one pass over its inputs, the
    block computed in ``dtype`` (``thanos.stages.common.compute_dtype``); ``outputs``: the block's outputs
    (the next block's inputs) written there from the same pass, as ``propagate`` writes them.

    N counts calibration sequences for every group. A mixture-of-experts expert's groups get the tokens
    the router sent to it; an expert sent fewer than ``MIN_SHARE`` of its fair share gets the Hessian of
    every token through it instead, from a second pass over the inputs for those experts alone (the
    store's ``experts`` attribute records the tokens and the rule per expert group)."""
    adapter, checkpoint, acts = open_block(model, block, inputs)
    compute = Compute.of(device, dtype, adapter.dtype)
    module = compute.module(adapter.load_block(checkpoint, block))
    prefix = adapter.block_prefix(block)
    groups = adapter.block_groups(block)
    columns = {g: checkpoint.shape(f"{prefix}{members[0]}.weight")[1] for g, members in groups.items()}
    log.info(
        "capture: block %d, %d samples from %s (computed in %s)",
        block, acts.nsamples, inputs, dtype_name(compute.dtype),
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        write = None
        if outputs is not None:
            write = stack.enter_context(_outputs(outputs, acts, block, inputs, compute))
        accumulators, tokens = _accumulate(
            adapter, module, block, acts, inputs, columns, batch_size, compute, write=write
        )
    experts = {}
    if any(g in adapter.experts for g in groups):
        starved = _starved(adapter.experts, tokens)
        if starved:
            for group in starved:
                log.warning(
                    "capture: block %d %s: the router sent it %d tokens (under %.0f %% of the experts' mean "
                    "share): it is pruned with the Hessian of every calibration token through it",
                    block, group, tokens[group], 100 * MIN_SHARE,
                )  # fmt: skip
            again, _ = _accumulate(
                adapter, module, block, acts, inputs, columns, batch_size, compute, starved
            )
            accumulators |= again
        experts = {
            g: {"tokens": tokens[g], "hessian": "every token" if g in starved else "routed tokens"}
            for g in groups
            if g in adapter.experts
        }
    hessians = {group: acc.take().cpu() for group, acc in accumulators.items()}  # scaled in place
    for group, H in hessians.items():
        if not all_finite(H):
            raise ValueError(f"block {block}: the Hessian of group {group} has NaN/Inf; check {inputs}")
    attrs = {
        "block": block,
        "nsamples": acts.nsamples,
        "seqlen": acts.seqlen,
        "groups": {g: list(m) for g, m in groups.items()},
        "model_type": adapter.model_type,
        "inputs": str(inputs),
        "compute_dtype": dtype_name(compute.dtype),
    }
    if experts:
        attrs["experts"] = experts
    write_hessians(out, hessians, attrs)


def _accumulate(
    adapter: ModelAdapter,
    module: torch.nn.Module,
    block: int,
    acts: Activations,
    inputs: str | Path,
    columns: dict[str, int],
    batch_size: int,
    compute: Compute,
    every_token: set[str] | None = None,
    write: Callable[[int, torch.Tensor], None] | None = None,
) -> tuple[dict[str, HessianAccumulator], dict[str, int]]:
    """One pass of the block over its inputs: the groups' accumulators (those in ``every_token`` alone,
    fed every token, when given) and how many tokens each group received; ``write(start, outputs)``: the
    block's outputs of the samples from ``start`` handed on."""
    wanted = every_token if every_token is not None else set(columns)
    accumulators = {g: HessianAccumulator(columns[g], device=compute.device) for g in columns if g in wanted}
    tokens = dict.fromkeys(accumulators, 0)

    def add(group: str, x: torch.Tensor) -> None:
        rows = x.reshape(-1, columns[group])  # OPT flattens (batch, seq) before its MLP
        accumulators[group].add(rows)
        tokens[group] += rows.shape[0]

    handles = adapter.watch_inputs(module, block, add, only=wanted, every_token=every_token is not None)
    try:
        for start, stop in batches(acts.nsamples, batch_size, f"capture block {block}"):
            hidden = acts.read(start, stop)
            check_finite(hidden, "inputs", block, start, inputs)
            result = adapter.run_block(module, block, compute.tensor(hidden))
            if write is not None:
                write(start, result)
    finally:
        for handle in handles:
            handle.remove()
    for acc in accumulators.values():
        acc.nsamples = acts.nsamples  # N counts the calibration sequences, for an expert's tokens too
    return accumulators, tokens


def _starved(experts: dict, tokens: dict[str, int]) -> set[str]:
    """Expert groups sent fewer than ``MIN_SHARE`` times the mean tokens of their experts module's groups."""
    mean = {}
    for path in {experts[g].experts for g in tokens if g in experts}:
        counts = [n for g, n in tokens.items() if g in experts and experts[g].experts == path]
        mean[path] = sum(counts) / len(counts)
    return {g for g, n in tokens.items() if g in experts and n < MIN_SHARE * mean[experts[g].experts]}


def _kept_dense(stats: Path) -> bool:
    """Whether a pruned layer's stats say it was left as it is (``thanos.stages.prune``, neurons recipes)
    and recovery did not train it (an empty weight file: the original weight is used)."""
    try:
        stats = json.loads(stats.read_text())
    except (OSError, ValueError):
        return False
    return bool(stats.get("kept_dense")) and "recovery" not in stats


def load_pruned(pruned_dir: str | Path, layers: list[str]) -> dict[str, torch.Tensor]:
    """Pruned weights ``DIR/{layer}.safetensors`` for the layers that have a file (and were pruned)."""
    pruned_dir = Path(pruned_dir)
    if not pruned_dir.is_dir():
        raise FileNotFoundError(
            f"pruned-layer directory not found: {pruned_dir}; run prune for this block first"
        )
    found = {}
    for layer in layers:
        path = pruned_dir / f"{layer}.safetensors"
        if _kept_dense(path.with_suffix(".json")):
            continue  # a layer a neurons recipe leaves as it is (an empty file): the original weight
        if path.is_file():
            tensors = load_safetensors(path)
            if "weight" not in tensors:
                raise ValueError(f"{path} has no tensor 'weight'; delete it and rerun prune")
            found[layer] = tensors["weight"]
    return found


def propagate(
    model: str | Path | ModelHandle,
    block: int,
    inputs: str | Path,
    out: str | Path,
    pruned_dir: str | Path | None = None,
    batch_size: int = 8,
    device: str = "auto",
    exclude: Sequence[str] | None = None,
    dtype: str = "auto",
) -> None:
    """Block ``block`` (pruned layers from ``pruned_dir``, original weights elsewhere) over its inputs,
    computed in ``dtype`` (``thanos.stages.common.compute_dtype``) and stored in the inputs' dtype; the
    layers ``exclude`` matches keep their original weights whatever ``pruned_dir`` holds."""
    adapter, checkpoint, acts = open_block(model, block, inputs)
    layers = select_layers(adapter.block_layers(block), exclude or (), adapter.layers)
    overrides = {} if pruned_dir is None else load_pruned(pruned_dir, layers)
    dense = [layer for layer in layers if layer not in overrides]
    if pruned_dir is not None and dense:
        log.info(
            "propagate: block %d, no pruned file for %s: using the original weights", block, ", ".join(dense)
        )
    compute = Compute.of(device, dtype, adapter.dtype)
    module = compute.module(adapter.load_block(checkpoint, block, overrides))
    with _outputs(out, acts, block, inputs, compute, sorted(overrides)) as write:
        for start, stop in batches(acts.nsamples, batch_size, f"propagate block {block}"):
            hidden = acts.read(start, stop)
            check_finite(hidden, "inputs", block, start, inputs)
            write(start, adapter.run_block(module, block, compute.tensor(hidden)))


@contextlib.contextmanager
def _outputs(
    out: str | Path,
    acts: Activations,
    block: int,
    inputs: str | Path,
    compute: Compute,
    pruned: Sequence[str] = (),
) -> Iterator[Callable[[int, torch.Tensor], None]]:
    """The store of block ``block``'s outputs (block ``block + 1``'s inputs) in the inputs' dtype: a
    ``write(start, outputs)`` for the samples from ``start``, each checked finite; renamed into place
    when every sample is written. ``pruned``: the block's layers whose pruned weights it ran with."""
    attrs = {
        "source_block": block,
        "inputs": str(inputs),
        "pruned_layers": list(pruned),
        "compute_dtype": dtype_name(compute.dtype),
    }
    with write_activations(
        out, acts.nsamples, acts.seqlen, acts.hidden_size, acts.dtype, block + 1, attrs
    ) as writer:

        def write(start: int, outputs: torch.Tensor) -> None:
            result = outputs.to(acts.dtype)
            check_finite(result, "outputs", block, start, out)
            writer.write(start, result.cpu())

        yield write
