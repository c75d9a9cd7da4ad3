"""``chain`` stage: one recipe's whole chain in one process (workflow ``granularity: recipe``).

For each block l, in order: capture block l's Hessians (sequential chain, l >= 1: from the recipe's own
``inputs_l``; block 0 and the dense chain read the shared dense stores, ``thanos.files.layout``), prune every
layer of block l, then propagate through the pruned block l into ``inputs_{l+1}`` (sequential chain
only): the block loop of ``chain`` reads like SparseGPT's sequential loop over the layers. It calls the
``capture``, ``prune`` and ``propagate`` stage functions with the same arguments the per-block jobs pass,
so every store and pruned file is byte-identical to what ``granularity: block`` or ``layer`` writes, at the
same paths.

Resumable: a store (``complete`` attribute) or a pruned layer that already exists is kept, so a killed chain
job resumes at the first unfinished step. A pruned layer is kept only when both its files exist and its stats
are of this recipe and of the model's shape (``thanos.files.pruned_layers``); any other is recomputed, the log
says which, and in a sequential chain the later blocks, computed through the old layer, are recomputed too.
Reuse is guarded by the ledger (``thanos.files.ledger``; its record ``PRUNED_ROOT/.chain.json``: the recipe,
the model's files and the modification times of the upstream stores): when any of them changed, the
recipe's previous per-block outputs are deleted first, and the log names the input that changed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thanos.events import BlockDone, ChainResumed, OnEvent, ignore
from thanos.files.atomic import write_json
from thanos.files.layout import (
    RECOVERED,
    RECOVERY_RECORD,
    StoreKind,
    pruned_block_name,
    reads_dense_chain,
    store_name,
)
from thanos.files.ledger import Entry, Upstream, remove
from thanos.files.pruned_layers import mismatch
from thanos.models import ModelHandle, as_handle
from thanos.pruning import methods
from thanos.recipes.reads import recipe_reads
from thanos.recipes.recipe import Recipe
from thanos.stages.capture import capture, propagate
from thanos.stages.memory import peak_rss_mib, release_free_memory, rss_mib, single_arena
from thanos.stages.outputs import store_complete
from thanos.stages.prune import BlockInputs, prune
from thanos.stages.recover import recover

log = logging.getLogger(__name__)

RECORD = ".chain.json"  # the ledger's record of what the per-block outputs were computed from
STEPS = ("capture", "prune", "recover", "propagate")


@dataclass
class _Chain:
    """One recipe's chain: where its stores live, how it prunes, and which steps it computed or reused.

    ``own``: the recipe's sequential chain stores (l >= 1); None for the dense chain (every block reads
    ``dense``). ``dense`` is None only for methods that need no Hessian.
    """

    model: ModelHandle
    root: Path
    dense: Path | None
    own: Path | None
    recipe: Recipe
    layers: list[list[str]]  # the layers pruned in each block
    shape: Callable[[int, str], list[int]]  # (block, layer) -> the original weight's shape
    batch_size: int
    device: str
    dtype: str  # the compute dtype (``thanos.stages.common.compute_dtype``)
    owl: Path | None = None  # the recipe's owl.json (per-block sparsities), None for uniform sparsity
    on_event: OnEvent = ignore  # told of each block done and each recovery epoch (``thanos.events``)
    computed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))
    reused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))

    def store(self, kind: StoreKind, block: int) -> Path:
        chain_dir = self.dense if reads_dense_chain(block, sequential=self.own is not None) else self.own
        return chain_dir / store_name(kind, block)

    def capture(self, block: int) -> Path | None:
        """Block l's Hessians: the dense chain's, or captured over the recipe's own inputs_l (l >= 1)."""
        if self.dense is None:
            return None
        H = self.store("hessians", block)
        if reads_dense_chain(block, sequential=self.own is not None):
            return H  # the dense chain's jobs computed it
        if store_complete(H):
            self.reused["capture"] += 1
        else:
            remove(H)
            capture(
                self.model, block, self.store("inputs", block), H, self.batch_size, self.device, self.dtype
            )
            self.computed["capture"] += 1
        return H

    def prune(self, block: int, H: Path | None) -> Path:
        """The block's layers that are not finished (missing, or not of this recipe or shape), with the
        per-block job's arguments; when the job resumes, the log names the layers it recomputes."""
        block_dir = self.root / pruned_block_name(block)
        reasons = {
            layer: mismatch(block_dir, layer, self.recipe.to_dict(), self.shape(block, layer))
            for layer in self.layers[block]
        }
        todo = [layer for layer, reason in reasons.items() if reason is not None]
        resuming = self.reused["prune"] > 0 or len(todo) < len(self.layers[block])
        if todo and (resuming or any(reasons[layer] != "missing" for layer in todo)):
            log.warning(
                "chain: block %d: recomputing %d pruned layer(s): %s",
                block,
                len(todo),
                ", ".join(f"{layer} ({reasons[layer]})" for layer in todo),
            )
        self.reused["prune"] += len(self.layers[block]) - len(todo)
        if todo:
            self.discard_after(block)
            remove(self.recovered(block))
            inputs = BlockInputs(H, self.owl)
            prune(self.model, block, self.recipe, block_dir, todo, inputs, self.device)
            self.computed["prune"] += len(todo)
        return block_dir

    def discard_after(self, block: int) -> None:
        """Sequential chain: delete what the later blocks computed through block ``block``'s previous
        pruned layers (their pruned layers and the recipe's own stores), before some are recomputed."""
        if self.own is None:
            return
        later = [
            path
            for path in [
                *self.root.glob("block*"),
                *self.root.glob(f"{RECOVERED}/block*"),
                *self.own.glob("*.zarr"),
            ]
            if (match := re.fullmatch(r"(?:block|inputs_|hessians_)(\d+)(?:\.zarr)?", path.name))
            and int(match.group(1)) > block
        ]
        if later:
            log.warning(
                "chain: block %d changed: removing %d outputs of later blocks computed through it",
                block,
                len(later),
            )
        for path in sorted(later):
            remove(path)

    def recovered(self, block: int) -> Path:
        return self.root / RECOVERED / pruned_block_name(block)

    def recover(self, block: int, block_dir: Path) -> Path:
        """A recovered recipe's block after recovery (``thanos.stages.recover``), from its pruned layers;
        the pruned layers themselves for a recipe without recovery."""
        if self.recipe.recover is None:
            return block_dir
        out = self.recovered(block)
        if (out / RECOVERY_RECORD).is_file():
            self.reused["recover"] += 1
            return out
        remove(out)
        self.discard_after(block)
        targets = (
            self.dense / store_name("inputs", block + 1) if self.recipe.recover.target == "dense" else None
        )
        inputs = self.store("inputs", block)
        recover(
            self.model, block, self.recipe, block_dir, out, inputs, targets, self.device, self.dtype,
            self.on_event,
        )  # fmt: skip
        self.computed["recover"] += 1
        return out

    def recovery_losses(self, block_dir: Path) -> tuple[float, float] | None:
        """A recovered block's validation loss before and after its recovery, else None."""
        record = block_dir / RECOVERY_RECORD
        if not record.is_file():
            return None
        done = json.loads(record.read_text())
        return done["loss_before"], done["loss_after"]

    def propagate(self, block: int, block_dir: Path) -> None:
        """Block l+1's inputs of the sequential chain, through the pruned block l."""
        nxt = self.store("inputs", block + 1)
        if store_complete(nxt):
            self.reused["propagate"] += 1
            return
        remove(nxt)
        propagate(
            self.model, block, self.store("inputs", block), nxt, block_dir, self.batch_size, self.device,
            self.recipe.exclude, self.dtype,
        )  # fmt: skip
        self.computed["propagate"] += 1

    def upstream(self, num_blocks: int) -> list[str]:
        """The inputs this chain reads from other jobs (their modification times guard reuse): the model,
        the OWL plan and the dense chain's stores it reads (``thanos.recipes.reads``)."""
        owl = [str(self.owl)] if self.owl else []
        reads = recipe_reads(self.recipe, num_blocks, sequential=self.own is not None).chain
        dense = [str(self.dense / store_name(kind, block)) for kind, block in reads] if self.dense else []
        return [self.model.reference, *owl, *dense]

    def discard_if_changed(self, inputs: dict[str, Any]) -> None:
        """Delete the previous per-block outputs unless the ledger's record (``RECORD``) says they were
        computed from ``inputs``; the log says which input changed."""
        stale = sorted(self.root.glob("block*")) + sorted(self.root.glob(f"{RECOVERED}/block*"))
        stale += sorted(self.own.glob("*.zarr")) if self.own else []
        why = Entry(self.root, self.root / RECORD).discard_if_changed(inputs, stale)
        if why is not None and stale:
            log.info("chain: removing %d previous outputs: %s", len(stale), why)

    def layers_dir(self, block: int) -> Path:
        """Where block ``block``'s final layers are: recovered, or pruned."""
        pruned = self.root / pruned_block_name(block)
        return self.recovered(block) if self.recipe.recover is not None else pruned

    def frontier(self, num_blocks: int) -> int:
        """Sequential chain: the last block whose inputs are written (0: none but the dense block 0's). The
        chain went through every block before it, whatever retention deleted since."""
        if self.own is None:
            return 0
        return max((b for b in range(1, num_blocks) if store_complete(self.store("inputs", b))), default=0)

    def finished(self, block: int, num_blocks: int, frontier: int) -> bool:
        """Whether block ``block`` is done: its layers pruned (of this recipe and shape) and recovered, and
        (sequential chain) propagated: the next block's inputs written, or a later block's (``frontier``,
        retention deletes a block's inputs once the next block is done). A resumed chain skips it without
        reading its own stores."""
        block_dir = self.root / pruned_block_name(block)
        shape, recipe = self.shape, self.recipe.to_dict()
        if any(mismatch(block_dir, layer, recipe, shape(block, layer)) for layer in self.layers[block]):
            return False
        if self.recipe.recover is not None and not (self.recovered(block) / RECOVERY_RECORD).is_file():
            return False
        return self.own is None or block + 1 == num_blocks or block < frontier

    def skip(self, block: int, num_blocks: int) -> None:
        """Count a finished block's steps as reused."""
        sequential = self.own is not None
        self.reused["capture"] += int(sequential and block > 0)
        self.reused["prune"] += len(self.layers[block])
        self.reused["recover"] += int(self.recipe.recover is not None)
        self.reused["propagate"] += int(sequential and block + 1 < num_blocks)

    def restore_inputs(self, block: int) -> None:
        """Sequential chain: block ``block``'s inputs when retention deleted them but the block is not done
        (a layer file removed by hand): propagated again from the last inputs kept through the finished
        blocks' layers (no block is pruned again)."""
        if self.own is None or block == 0 or store_complete(self.store("inputs", block)):
            return
        start = max(b for b in range(block) if b == 0 or store_complete(self.store("inputs", b)))
        log.warning("chain: block %d's inputs were deleted: propagating again from block %d", block, start)
        for previous in range(start, block):
            self.propagate(previous, self.layers_dir(previous))

    def drop_block(self, block: int, drop: Sequence[StoreKind]) -> None:
        """Delete block ``block``'s own stores (retention false: ``drop`` names the kinds) once nothing of
        this chain reads them again: the block is pruned, recovered and propagated."""
        if self.own is None or block == 0:
            return
        for kind in drop:
            remove(self.store(kind, block))


@dataclass(frozen=True)
class ChainPaths:
    """Where one recipe's chain reads and writes.

    ``pruned_root``: its pruned layers (``block{l}/{layer}.*``). ``dense_dir``: the dense chain's stores
    (``inputs_0``, ``hessians_0``; every ``hessians_l`` when ``chain_dir`` is None, the dense chain);
    methods without a Hessian (magnitude) need none. ``chain_dir``: the recipe's sequential chain stores
    (l >= 1), written here. ``owl``: an OWL recipe's ``owl.json`` (``thanos.stages.owl_plan``).
    """

    pruned_root: Path
    dense_dir: Path | None = None
    chain_dir: Path | None = None
    owl: Path | None = None


def _open_chain(
    model: ModelHandle, recipe: Recipe, paths: ChainPaths, batch_size: int, device: str, dtype: str
) -> _Chain:
    """The chain of ``recipe`` on ``model`` (its adapter names the layers, its checkpoint has their shapes)
    at ``paths``; a method with Hessians without ``paths.dense_dir`` is refused."""
    adapter, checkpoint = model.adapter, model.checkpoint
    calibrated = recipe.needs_hessian
    if calibrated and paths.dense_dir is None:
        raise ValueError(
            f"--dense-dir is required for method {recipe.method!r} "
            f"(only {methods.without_hessian()} run without)"
        )
    return _Chain(
        model=model,
        root=Path(paths.pruned_root),
        dense=Path(paths.dense_dir) if calibrated else None,
        own=Path(paths.chain_dir) if (calibrated and paths.chain_dir is not None) else None,
        recipe=recipe,
        layers=[
            recipe.layers(adapter.block_layers(block), adapter.layers)
            for block in range(int(adapter.num_blocks))
        ],
        shape=lambda block, layer: checkpoint.shape(f"{adapter.block_prefix(block)}{layer}.weight"),
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        owl=Path(paths.owl) if paths.owl is not None else None,
    )


def _inputs(run: _Chain, num_blocks: int, compute_dtype: str) -> dict[str, Any]:
    """What the chain's per-block outputs are computed from (the ledger's ``PRUNED_ROOT/.chain.json``): the
    recipe, the model's files, the chain, the options and the upstream outputs (modification times)."""
    recipe = run.recipe.to_dict()
    return {
        "model": run.model.reference,
        "model_files": run.model.fingerprint,
        "recipe": {key: value for key, value in recipe.items() if key not in ("name", "chain")},
        "chain": "dense" if run.own is None else "sequential",
        "chain_dir": None if run.own is None else str(run.own),
        "batch_size": run.batch_size,
        "compute_dtype": compute_dtype,
        **({"owl": str(run.owl)} if run.owl is not None else {}),
        "upstream": {path: Upstream(Path(path)) for path in run.upstream(num_blocks)},
    }


def chain(
    model: str | Path | ModelHandle,
    recipe: Recipe,
    paths: ChainPaths,
    out: str | Path,
    batch_size: int = 8,
    device: str = "auto",
    dtype: str = "auto",
    drop: Sequence[StoreKind] = (),
    on_event: OnEvent = ignore,
) -> dict[str, Any]:
    """Prune every block of ``model`` with ``recipe``; write the summary ``out``; return it.

    ``dtype``: the dtype the blocks are computed in (``thanos.stages.common.compute_dtype``).

    ``drop``: the kinds of the recipe's own stores (``inputs``, ``hessians``) deleted as soon as their block
    is done (retention false): a running sequential chain then holds only its current block's inputs and
    Hessians and the next block's inputs.

    ``on_event``: told where the chain resumes, of each block done and of each recovery epoch
    (``thanos.events``).

    Sets this process's malloc to a single arena and trims it after each block (``thanos.stages.memory``), so
    that its memory does not grow with the number of blocks; each block's log line says the RSS.
    """
    from thanos.data.storage import dtype_name
    from thanos.stages.common import Compute

    single_arena()  # else zarr's worker threads keep freed Hessian-sized buffers: RSS grows per block
    handle = as_handle(model)
    adapter = handle.adapter
    num_blocks = int(adapter.num_blocks)
    compute = Compute.of(device, dtype, adapter.dtype)
    run = _open_chain(handle, recipe, paths, batch_size, device, dtype)
    run.on_event = on_event
    inputs = _inputs(run, num_blocks, dtype_name(compute.dtype))
    run.discard_if_changed(inputs)

    frontier = run.frontier(num_blocks)
    done = [block for block in range(num_blocks) if run.finished(block, num_blocks, frontier)]
    if done and len(done) < num_blocks:
        resumed = ChainResumed(tuple(done), num_blocks)
        start = min(set(range(num_blocks)) - set(done))  # numbered from 0, as the log's other lines
        log.info("chain: resuming: %d of %d blocks done by an earlier run, starting at block %d", len(done),
                 num_blocks, start)  # fmt: skip
        on_event(resumed)
    for block in range(num_blocks):
        if run.finished(block, num_blocks, frontier):
            run.skip(block, num_blocks)
            run.drop_block(block, drop)
            continue
        run.restore_inputs(block)
        H = run.capture(block)
        block_dir = run.recover(block, run.prune(block, H))
        if run.own is not None and block + 1 < num_blocks:
            run.propagate(block, block_dir)
        run.drop_block(block, drop)
        # a computed block wrote the next inputs, and a recomputed one discarded what later blocks computed
        # through it: the frontier changes here only
        frontier = run.frontier(num_blocks)
        release_free_memory()
        finished = BlockDone(block, num_blocks, run.recovery_losses(block_dir))
        log.info("chain: %s: RSS %.0f MiB, peak %.0f MiB", finished.text, rss_mib(), peak_rss_mib())
        on_event(finished)

    summary = {
        "method": recipe.method,
        "sparsity": str(recipe.sparsity),
        "num_blocks": num_blocks,
        "layers": [layer for layer in adapter.layers if any(layer in block for block in run.layers)],
        "chain": inputs["chain"],
        **({"profile": "owl", "owl": str(run.owl)} if run.owl is not None else {}),
        "computed": run.computed,
        "reused": run.reused,
    }
    write_json(out, summary)
    return summary
