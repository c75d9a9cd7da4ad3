"""The damped inverse factors of Hessians already factored, kept by the Hessian's bytes.

Layers that read one Hessian factor it once: within a block (``block``: the stage that prunes a block's
layers), its q, k and v projections (one input, one H) and its up and gate projections; while a size's cost
table is measured (``thanos.pruning.kept.keeping``), every point that prunes a block's MLP width or heads
from the dense chain (``neurons:0.08`` .. ``neurons:0.5`` read the same stored H of each block:
SmolLM2-135M, 1536 x 1536, 0.09 s a factor on 2 cores, 30 blocks a point). A factor is the same object for
the same Hessian (its values, bit for bit) and damping; callers read it and never write it (the kernels
update W alone: ``tests/test_factors.py``). On the CPU only (a GPU factors in milliseconds and keeps its
memory). Outside both, nothing is kept: ``thanos.prune_layer`` called alone frees its factor as it returns.

Memory: within a block, the current factor is kept until the next Hessian's is formed (it is dropped first)
or the block ends: the one factor the pruning held anyway. A cost table keeps the first ``kept.KEPT_BYTES``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch

from thanos.pruning import kept
from thanos.pruning.hessian import InverseFactor, inverse_cholesky

_factors = kept.Kept(kept.FACTORS, lambda factor: factor.U.nbytes)
_in_block = False


def inverse_factor(H: torch.Tensor, damp: float = 0.01, name: str | None = None) -> InverseFactor:
    """``inverse_cholesky(H, damp)``; within a block or while a table keeps them, the factor kept for an H
    of the same values and the same ``damp`` when there is one (read it, never write it)."""
    if H.device.type != "cpu" or not (_in_block or _factors.budget()):
        return inverse_cholesky(H, damp=damp, name=name)
    values = H.detach().contiguous()
    key = (hashlib.blake2b(values.view(torch.uint8).numpy(), digest_size=32).digest(), tuple(H.shape), damp)
    if (factor := _factors.get(key)) is not None:
        return factor
    if not _factors.budget():  # in a block alone: the previous factor dropped before this one is formed
        _factors.trim(0)
    factor = inverse_cholesky(H, damp=damp, name=name)
    _factors.put(key, factor, _factors.budget() or factor.U.nbytes)  # in a block alone: whatever it takes
    return factor


@contextlib.contextmanager
def block() -> Iterator[None]:
    """One block's layers pruned: each factor kept for the block's next layers that read its Hessian, and
    dropped when the block is done (but those a table keeps)."""
    global _in_block
    _in_block = True
    try:
        yield
    finally:
        _in_block = False
        _factors.trim(_factors.budget())
