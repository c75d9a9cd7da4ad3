"""SparseGPT (Frantar & Alistarh 2023; paper Section 3.3 and appendix Alg. 5).

Columns are processed left to right in blocks of B; removing column i's masked weights is an OBS step
(eq. (4)) whose error is spread over the columns to its right with row i of U, where
H^-1 = U^T U is the upper Cholesky factor. In-block updates are applied column by column, the rest of
the matrix is updated lazily once per block with one matrix product.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from thanos.pruning.algorithms import masks

UPDATE_BYTES = 1 << 26  # memory bound of one chunk of the lazy update W[:, i2:] -= Err U[i1:i2, i2:]


def sparsegpt(
    W: torch.Tensor,
    U: torch.Tensor,
    blocksize: int,
    *,
    p: Fraction | None = None,
    n: int = 0,
    m: int = 0,
    column_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prune ``W`` (c, b; fp32, modified in place) and return ``(W, mask)``.

    Exactly one pattern is given: ``p`` (unstructured: floor(p c B) weights per block, chosen by the
    OBS score w^2 / U_jj^2), ``n``/``m`` (n:m, chosen every m columns from the current weights) or
    ``column_mask`` (bool (b,), whole columns, see ``structured_columns``).

    The lazy update of the columns right of a block is computed ``UPDATE_BYTES`` of columns at a time
    (the same values as one product: each column of Err U only depends on that column of U).
    """
    c, b = W.shape
    update_columns = max(1, UPDATE_BYTES // (4 * c))
    d = torch.diagonal(U)
    mask = torch.zeros_like(W, dtype=torch.bool)
    for i1 in range(0, b, blocksize):
        i2 = min(i1 + blocksize, b)
        count = i2 - i1
        W1 = W[:, i1:i2].clone()
        U1 = U[i1:i2, i1:i2]
        d1 = d[i1:i2]
        Err1 = torch.zeros_like(W1)
        if column_mask is not None:
            M1 = column_mask[i1:i2].unsqueeze(0).expand(c, -1).clone()
        elif p is not None:
            M1 = masks.smallest(W1**2 / d1**2, math.floor(p * c * count))
        else:
            M1 = torch.zeros_like(W1, dtype=torch.bool)
        for i in range(count):
            if n and i % m == 0:
                M1[:, i : i + m] = masks.n_of_m(W1[:, i : i + m] ** 2 / d1[i : i + m] ** 2, n, m)
            w = W1[:, i]
            q = torch.where(M1[:, i], torch.zeros_like(w), w)
            err = (w - q) / d1[i]
            W1[:, i:] -= err.unsqueeze(1) * U1[i, i:].unsqueeze(0)
            W1[:, i] = q
            Err1[:, i] = err
        W[:, i1:i2] = W1
        for j1 in range(i2, b, update_columns):  # the lazy update in column chunks: no (c, b) temporary
            j2 = min(j1 + update_columns, b)
            W[:, j1:j2] -= Err1 @ U[i1:i2, j1:j2]
        mask[:, i1:i2] = M1
    return W, mask


def structured_columns(W: torch.Tensor, U: torch.Tensor, s: int) -> torch.Tensor:
    """Bool (b,): the ``s`` columns with the smallest OBS error sum_i W_ij^2 / U_jj^2."""
    score = (W**2).sum(dim=0) / torch.diagonal(U) ** 2
    return masks.smallest(score, s)
