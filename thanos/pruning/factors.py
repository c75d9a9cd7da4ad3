"""The damped inverse factors of Hessians already factored, kept by the Hessian's bytes.

Layers that read one Hessian factor it once: within a block (``block``: the stage that prunes a block's
layers), its q, k and v projections (one input, one H) and its up and gate projections; while a size's cost
table is measured (``keeping``), every point that prunes a block's MLP width or heads from the dense chain
(``neurons:0.08`` .. ``neurons:0.5`` read the same stored H of each block: SmolLM2-135M, 1536 x 1536, 0.09 s
a factor on 2 cores, 30 blocks a point). A factor is the same object for the same Hessian (its values, bit
for bit) and damping; callers read it and never write it (the kernels update W alone:
``tests/test_factors.py``). On the CPU only (a GPU factors in milliseconds and keeps its memory). Outside
both, nothing is kept: ``thanos.prune_layer`` called alone frees its factor as it returns.

Memory: within a block, the current factor is kept until the next Hessian's is formed (it is dropped first)
or the block ends: the one factor the pruning held anyway. A cost table keeps the last ``KEPT_BYTES``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Iterator

import torch

from thanos.pruning.hessian import InverseFactor, inverse_cholesky

KEPT_BYTES = 512 << 20  # a cost table's: SmolLM2-135M's 30 MLP output projections' factors take 283 MB

_kept: OrderedDict[tuple[bytes, tuple[int, ...], float], InverseFactor] = OrderedDict()
_budget = 0  # bytes of factors kept across blocks (``keeping``)
_in_block = False


def inverse_factor(H: torch.Tensor, damp: float = 0.01, name: str | None = None) -> InverseFactor:
    """``inverse_cholesky(H, damp)``; within a block or while a table keeps them, the factor kept for an H
    of the same values and the same ``damp`` when there is one (read it, never write it)."""
    if H.device.type != "cpu" or not (_in_block or _budget):
        return inverse_cholesky(H, damp=damp, name=name)
    values = H.detach().contiguous()
    key = (hashlib.blake2b(values.view(torch.uint8).numpy(), digest_size=32).digest(), tuple(H.shape), damp)
    if key in _kept:
        _kept.move_to_end(key)
        return _kept[key]
    _trim(_budget)  # within a block alone: the previous factor dropped before this one is formed
    factor = inverse_cholesky(H, damp=damp, name=name)
    _kept[key] = factor
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
        _trim(_budget)


@contextlib.contextmanager
def keeping(budget: int = KEPT_BYTES) -> Iterator[None]:
    """While a size's cost table is measured: the last ``budget`` bytes of factors kept across blocks and
    runs; every one dropped at the end (or at ``stop_keeping``)."""
    global _budget
    _budget = budget
    try:
        yield
    finally:
        stop_keeping()


def stop_keeping() -> None:
    """The table measured: the factors it kept dropped, none kept across blocks from now on."""
    global _budget
    _budget = 0
    _trim(0)


def _trim(budget: int) -> None:
    """Drop every factor larger than ``budget`` bytes, then those used longest ago until the rest take at
    most ``budget``."""
    for key in [key for key, factor in _kept.items() if _bytes(factor.U) > budget]:
        del _kept[key]
    while sum(_bytes(factor.U) for factor in _kept.values()) > budget:
        _kept.popitem(last=False)


def _bytes(A: torch.Tensor) -> int:
    return A.numel() * A.element_size()
