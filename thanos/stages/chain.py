"""``chain`` stage: one recipe's whole chain in one process (workflow ``granularity: chain``).

For each block l, in order: capture block l's Hessians (sequential chain, l >= 1: from the recipe's own
``inputs_l``; block 0 and the dense chain read the shared dense stores), prune every layer of block l,
then propagate through the pruned block l into ``inputs_{l+1}`` (sequential chain only). It calls the
``capture``, ``prune`` and ``propagate`` stage functions with the same arguments the per-block jobs pass,
so every store and pruned file is byte-identical to what ``granularity: block`` or ``layer`` writes, at the
same paths.

Resumable: a store (``complete`` attribute) or a pruned layer (``.safetensors`` and ``.json``) that already
exists is kept, so a killed chain job resumes at the first unfinished step. Reuse is guarded by a
fingerprint (``PRUNED_ROOT/.chain.json``: the recipe, the model and the modification times of the
upstream inputs): when any of them changed, the recipe's previous per-block outputs are deleted first.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from thanos.atomic import write_json
from thanos.stages.capture import capture, propagate
from thanos.stages.prune import prune
from thanos.storage import open_complete

log = logging.getLogger(__name__)

FINGERPRINT = ".chain.json"


def store_complete(path: Path) -> bool:
    """A finished zarr store (stores are renamed into place; ``complete`` is their last attribute)."""
    try:
        open_complete(path, "chain")
    except (FileNotFoundError, ValueError):
        return False
    return True


def _identity(path: str | Path) -> int | None:
    """An upstream input's modification time (what Snakemake compares too): rewritten inputs change it."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def chain(
    model: str | Path,
    method: str,
    sparsity: str,
    pruned_root: str | Path,
    out: str | Path,
    dense_dir: str | Path | None = None,
    chain_dir: str | Path | None = None,
    blocksize: int | None = None,
    alpha: float | None = None,
    damp: float = 0.01,
    batch_size: int = 8,
    device: str = "auto",
    keep_activations: bool = True,
    keep_hessians: bool = True,
) -> dict[str, Any]:
    """Prune every block of ``model`` with one recipe; write the summary ``out``; return it.

    ``dense_dir``: the dense chain's stores (``inputs_0``, ``hessians_0``; every ``hessians_l`` when
    ``chain_dir`` is None, the dense chain). ``chain_dir``: the recipe's sequential chain stores (l >= 1),
    written here. Magnitude needs neither.
    """
    from thanos.models import open_model

    _, adapter, _ = open_model(model)
    num_blocks = int(adapter.num_blocks)
    layers = list(adapter.layers)
    calibrated = method != "magnitude"
    if calibrated and dense_dir is None:
        raise ValueError(f"--dense-dir is required for method {method!r} (only magnitude runs without)")
    root = Path(pruned_root)
    dense = Path(dense_dir) if dense_dir is not None else None
    own = Path(chain_dir) if (calibrated and chain_dir is not None) else None

    def inputs(block: int) -> Path:
        return dense / f"inputs_{block}.zarr" if block == 0 or own is None else own / f"inputs_{block}.zarr"

    def hessians(block: int) -> Path:
        return (
            dense / f"hessians_{block}.zarr" if block == 0 or own is None else own / f"hessians_{block}.zarr"
        )

    upstream = [str(model)]
    if calibrated:
        upstream += (
            [str(inputs(0)), str(hessians(0))]
            if own is not None
            else [str(hessians(b)) for b in range(num_blocks)]
        )
    fingerprint = {
        "model": str(model),
        "method": method,
        "sparsity": str(sparsity),
        "blocksize": blocksize,
        "alpha": alpha,
        "damp": damp,
        "chain": "dense" if own is None else "sequential",
        "chain_dir": None if own is None else str(own),
        "batch_size": batch_size,
        "upstream": {path: _identity(path) for path in upstream},
    }
    state = root / FINGERPRINT
    previous = json.loads(state.read_text()) if state.is_file() else None
    if previous != fingerprint:
        stale = sorted(root.glob("block*")) + (sorted(own.glob("*.zarr")) if own is not None else [])
        if stale:
            log.info("chain: recipe or upstream inputs changed: removing %d previous outputs", len(stale))
        for path in stale:
            _remove(path)
        write_json(state, fingerprint)

    done = {"capture": 0, "prune": 0, "propagate": 0}
    reused = dict(done)
    for block in range(num_blocks):
        H = None
        if calibrated:
            H = hessians(block)
            if block > 0 and own is not None:
                if store_complete(H):
                    reused["capture"] += 1
                else:
                    _remove(H)
                    capture(model, block, inputs(block), H, batch_size, device)
                    done["capture"] += 1
        block_dir = root / f"block{block}"
        todo = [
            layer
            for layer in layers
            if not (
                (block_dir / f"{layer}.safetensors").is_file() and (block_dir / f"{layer}.json").is_file()
            )
        ]
        reused["prune"] += len(layers) - len(todo)
        if todo:  # the missing layers only, with the per-block job's arguments
            prune(
                model,
                block,
                todo,
                method,
                sparsity,
                block_dir,
                hessians=H,
                blocksize=blocksize,
                alpha=alpha,
                damp=damp,
                device=device,
            )
            done["prune"] += len(todo)
        if own is not None and block + 1 < num_blocks:
            nxt = inputs(block + 1)
            if store_complete(nxt):
                reused["propagate"] += 1
            else:
                _remove(nxt)
                propagate(model, block, inputs(block), nxt, block_dir, batch_size, device)
                done["propagate"] += 1
        log.info("chain: block %d/%d done", block + 1, num_blocks)

    if own is not None:
        for block in range(1, num_blocks):
            if not keep_activations:
                _remove(inputs(block))
            if not keep_hessians:
                _remove(hessians(block))
    summary = {
        "method": method,
        "sparsity": str(sparsity),
        "num_blocks": num_blocks,
        "layers": layers,
        "chain": fingerprint["chain"],
        "computed": done,
        "reused": reused,
    }
    write_json(out, summary)
    return summary
