"""The disk a ``prune_model`` run takes: estimated before the first step, checked against the free space,
and measured after.

The stores are uncompressed zarr arrays (``thanos.data.storage``), so their sizes are arithmetic:

- calibration tokens: n x seqlen x 4 B (int32);
- a block's inputs: n x seqlen x hidden x the checkpoint dtype's bytes;
- a block's Hessians: the sum over its groups (layers that read one input) of cols^2 x 4 B (fp32);
- the pruned layers: the pruned weights at the checkpoint's dtype (twice with recovery: pruned, then
  recovered), a few hundred bytes of stats each;
- the assembled model and its published copy: the weights as read from the checkpoint's headers, less the
  neurons a ``neurons:p`` recipe removes, plus the tokenizer and config files.

Retention (``--keep``): ``needed`` (default) keeps what a resume and another recipe on the same model and
calibration need -- the tokens, the dense chain's stores (block 0's, or every block's for OWL and recovery
towards the dense model's outputs), the assembled model's small files (report, config, tokenizer, card) --
and deletes each block's own inputs and Hessians once the block is done, the pruned layers once the model is
assembled and the assembled weights once ``--out`` holds their verified copy (``--out`` is then the only full
copy; ``thanos.stages.publish.release``). ``all`` keeps everything.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.errors import Option, OptionError

if TYPE_CHECKING:
    from thanos.models.checkpoint import Checkpoint
    from thanos.models.layout import ModelLayout
    from thanos.recipes.recipe import Recipe

KEEP = ("needed", "all")
GiB = 1024**3
# the assembled model's records (pruning_report.json, sparsity.json: about 0.9 KB per pruned layer) and the
# run's log, which --keep needed keeps with the model's small files
RECORD_BYTES_PER_LAYER = 1024
LOG_BYTES = 16 * 1024
# weights that are not safetensors, and the card, are not copied into the assembled model
NOT_COPIED = (".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt")


@dataclass(frozen=True)
class DiskEstimate:
    """Bytes of one run: ``shared`` (model info, tokens, the dense chain's stores: kept for other recipes),
    ``block_stores`` (one block's own inputs and Hessians, sequential chain), ``own_blocks`` (the blocks
    with stores of their own), ``activations`` (one block's inputs), ``layers`` (the pruned and recovered
    layers), ``model`` (the assembled model, and its copy in ``--out``), ``small`` (the model's files
    other than its weights: what ``--keep needed`` keeps of it once ``--out`` holds it), ``distill`` (a
    recipe with distillation: one checkpoint, 16 bytes a parameter: fp32 weights, AdamW's two moments and
    the best weights; the assembled model is then kept whole as the student, and the distilled model is
    the one published)."""

    shared: int
    block_stores: int
    own_blocks: int
    activations: int
    layers: int
    model: int
    small: int = 0
    distill: int = 0

    def peak(self, keep: str) -> int:
        """The most the working directory holds during the run (a new checkpoint is written whole beside
        the last before it replaces it)."""
        if keep == "all":
            return self.kept(keep)
        own = self.block_stores + self.activations if self.own_blocks else 0  # this block's, the next inputs
        pruning = self.shared + max(own + self.layers, self.layers + self.model)
        return max(pruning, self.shared + 2 * self.model + 2 * self.distill) if self.distill else pruning

    def with_out(self, keep: str) -> int:
        """The most the working directory and ``--out`` hold together on one filesystem: the copy is
        written once the model is assembled (``needed``: the working copy is deleted after)."""
        assembled = self.kept(keep) if keep == "all" else self.shared + self.model
        return max(self.peak(keep), assembled + self.model)

    def kept(self, keep: str) -> int:
        """What the working directory holds when the run is done."""
        if keep == "all":
            distilled = self.distill + self.model if self.distill else 0
            return self.shared + self.own_blocks * self.block_stores + self.layers + self.model + distilled
        return self.shared + self.small + (self.model if self.distill else 0)  # the student, kept


def estimate(
    layout: ModelLayout, checkpoint: Checkpoint, model_dir: Path, recipe: Recipe, nsamples: int, seqlen: int
) -> DiskEstimate:
    """The bytes of ``recipe`` on the model of ``layout`` (weights read by ``checkpoint``, files in
    ``model_dir``) with ``nsamples`` x ``seqlen`` calibration tokens."""
    import torch

    pruning = _pruning_estimate(layout, checkpoint, model_dir, recipe, nsamples, seqlen)
    if recipe.distill is None:
        return pruning
    parameters = (pruning.model - pruning.small) // getattr(torch, layout.dtype).itemsize
    return replace(pruning, distill=16 * parameters)


def _pruning_estimate(
    layout: ModelLayout, checkpoint: Checkpoint, model_dir: Path, recipe: Recipe, nsamples: int, seqlen: int
) -> DiskEstimate:
    """``estimate`` of the pruning alone."""
    import torch

    itemsize = getattr(torch, layout.dtype).itemsize
    blocks = layout.num_blocks
    activations = nsamples * seqlen * layout.hidden_size * itemsize

    def hessians(block: int) -> int:
        prefix = layout.block_prefix(block)
        cols = [checkpoint.shape(f"{prefix}{layer}.weight")[-1] for layer in _firsts(layout, block)]
        return sum(4 * c**2 for c in cols)

    shared = own_blocks = block_stores = 0
    if recipe.sparsity.structure.tokens:  # the model sliced: at most the dense model, no store, no layer
        small = _other_files(model_dir) + LOG_BYTES
        weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        return DiskEstimate(0, 0, 0, 0, 0, weights + small, small)
    if recipe.sparsity.structure.whole_blocks:  # the dense inputs of every block and the last one's output
        return _depth_estimate(
            layout, checkpoint, model_dir, recipe, nsamples * seqlen * 4 + activations * (blocks + 1)
        )
    if recipe.needs_calibration:
        shared = nsamples * seqlen * 4 + activations + hessians(0)
        every_dense = recipe.owl or not recipe.sequential  # the dense chain's stores of every block
        if every_dense:
            shared += (blocks - 1) * activations + sum(hessians(b) for b in range(1, blocks))
        if recipe.recover is not None and recipe.recover.target == "dense":
            shared += activations * (1 if every_dense else blocks)  # the dense outputs of blocks 1..L
        if recipe.needs_hessian and recipe.sequential:
            own_blocks = blocks - 1
            block_stores = activations + max((hessians(b) for b in range(1, blocks)), default=0)
    pruned = count = 0
    for block in range(blocks):
        prefix = layout.block_prefix(block)
        for layer in recipe.layers(layout.block_layers(block), layout.layers):
            shape = checkpoint.shape(f"{prefix}{layer}.weight")
            pruned += math.prod(shape) * itemsize
            count += 1
    weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    if recipe.sparsity.structure.one_layer == "mlp":
        removed = _removed_by_neurons(layout, recipe.sparsity.p) * itemsize
        weights -= removed  # the pruned layers keep the original shapes; the model is written without them
    elif recipe.sparsity.structure.one_layer == "attention" and recipe.compact:
        weights -= _removed_by_heads(layout, checkpoint, model_dir, recipe.sparsity) * itemsize
    layers = pruned * (2 if recipe.recover is not None else 1)
    small = _other_files(model_dir) + count * RECORD_BYTES_PER_LAYER + LOG_BYTES
    return DiskEstimate(shared, block_stores, own_blocks, activations, layers, weights + small, small)


def _depth_estimate(
    layout: ModelLayout, checkpoint: Checkpoint, model_dir: Path, recipe: Recipe, shared: int
) -> DiskEstimate:
    """A ``depth:k`` recipe: the shared stores, no block's own, no pruned layer; the model without the k
    smallest blocks' tensors (which go is decided later: the model is at most this large)."""
    from thanos.pruning.sparsity import depth_count

    weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    itemsize = weights / max(1, sum(math.prod(checkpoint.shape(name)) for name in checkpoint.names()))
    sizes = sorted(
        sum(math.prod(checkpoint.shape(name)) for name in checkpoint.names(layout.block_prefix(block)))
        for block in range(layout.num_blocks)
    )
    removed = sum(sizes[: depth_count(recipe.sparsity, layout.num_blocks)])
    small = _other_files(model_dir) + LOG_BYTES
    return DiskEstimate(shared, 0, 0, 0, 0, int(weights - removed * itemsize) + small, small)


def _firsts(layout: ModelLayout, block: int) -> list[str]:
    """The first layer of each group of block ``block``: one Hessian each."""
    return [members[0] for members in layout.block_groups(block).values()]


def _removed_by_neurons(layout: ModelLayout, p: float) -> int:
    """Parameters a ``neurons:p`` recipe removes: floor(p x width) neurons per block, each a row of every
    input projection of the MLP and a column of its output projection (of hidden size)."""
    width = int(next(iter(layout.mlp_config.values()), 0) or 0)
    mlp = [layer for layer in layout.layers if layer.startswith(("mlp.", "feed_forward.")) or "fc" in layer]
    return layout.num_blocks * math.floor(p * width) * layout.hidden_size * max(len(mlp), 2)


def _removed_by_heads(layout: ModelLayout, checkpoint: Any, model_dir: Path, pattern: Any) -> int:
    """Parameters a ``heads:p`` or ``kv_heads:p`` recipe removes (``thanos.models.heads``)."""
    from thanos.models.heads import attention_layout, removed_parameters

    attention = attention_layout(model_dir, layout, checkpoint)
    return sum(
        removed_parameters(attention, checkpoint, layout.block_prefix(block), pattern)
        for block in range(layout.num_blocks)
    )


def _other_files(model_dir: Path) -> int:
    """The model directory's files the assembled model copies (config, tokenizer, ...)."""
    return sum(
        f.stat().st_size
        for f in model_dir.iterdir()
        if f.is_file() and f.suffix not in (".safetensors", *NOT_COPIED) and f.name != "README.md"
    )


def free_bytes(path: Path) -> tuple[int, int]:
    """(free bytes, device id) of the filesystem ``path`` is or would be on."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    return shutil.disk_usage(existing).free, existing.stat().st_dev


def size_text(size: float) -> str:
    """``1.23 GiB``, ``456 MiB``, ``12 KiB``."""
    for unit, scale in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}" if size < 100 * scale else f"{size / scale:.0f} {unit}"
    return f"{size:.0f} B"


# what a filesystem takes beyond the bytes estimated: each file rounded up to its blocks (a zarr store is a
# file per chunk), the stores' metadata (a depth:2 run of a 6-block tiny model: 19.0 MiB where its bytes
# were estimated at 16.8)
MARGIN_SHARE, MARGIN_BYTES = 50, 16 * 1024**2


def with_margin(need: int) -> int:
    """``need`` bytes and the filesystem's margin (2 % and 16 MiB); nothing for nothing to write."""
    return need + need // MARGIN_SHARE + MARGIN_BYTES if need > 0 else 0


def check_free(
    workdir: Path,
    out: Path | None,
    need_workdir: int,
    need_out: int,
    need_together: int,
    what: str = "the run",
) -> None:
    """Refuse a run that would not fit in the free space, naming the numbers and the ways out:
    ``need_workdir`` more bytes in the working directory at its peak, ``need_out`` for ``--out``, and
    ``need_together`` at the worst moment when both are on one filesystem (``--out`` is written after the
    pruned layers are deleted); each with the filesystem's margin (``with_margin``). ``what``: the run, as
    the refusal names it; ``out`` None: the model stays in the working directory (a size's point), which
    holds it all."""
    need_workdir, need_out, need_together = map(with_margin, (need_workdir, need_out, need_together))
    free_work, device_work = free_bytes(workdir)
    free_out, device_out = free_bytes(out) if out is not None else (free_work, device_work)
    where, there = Option("workdir", str(workdir)), Option("out", str(out))
    if device_work == device_out:  # one filesystem (``out`` None: the working directory holds it all)
        short = need_together > free_work
        together = () if out is None else (" and ", there, " together")
        needs: tuple[str | Option, ...] = (f"{size_text(need_together)} in ", where, *together)
        needs += (f", {size_text(free_work)} free",)
    else:  # each with the free space of its own filesystem
        short = need_workdir > free_work or need_out > free_out
        needs = (f"{size_text(need_workdir)} in ", where, f" ({size_text(free_work)} free) and ")
        needs += (f"{size_text(need_out)} for ", there, f" ({size_text(free_out)} free)")
    if short:
        raise OptionError(
            (),
            f"not enough disk space: {what} needs about ",
            *needs,
            f" (each with {100 // MARGIN_SHARE} % and {size_text(MARGIN_BYTES)} for the filesystem's blocks)"
            "; free some space (`thanos workdirs` lists the working directories of "
            "earlier runs and deletes them), give ",
            Option("workdir"),
            " or ",
            Option("out"),
            " on a larger disk, or ",
            Option("keep", "needed"),
            " if ",
            Option("keep", "all"),
            " was given (",
            Option("disk_check"),
            " runs anyway)",
        )
