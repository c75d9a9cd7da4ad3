"""SparseGPT (Frantar & Alistarh 2023; paper Section 3.3 and appendix Alg. 5).

Columns are processed left to right in blocks of B; removing column i's masked weights is an OBS step
(eq. (4)) whose error is spread over the columns to its right with row i of U, where
H^-1 = U^T U is the upper Cholesky factor. The columns right of a block are updated lazily once per
block with one matrix product. Inside a block the column-by-column recursion
    err_i = M_i (W_i - sum_{j<i} err_j U_ji) / U_ii,   W_i <- (W_i - sum_{j<=i} err_j U_ji) (1 - M_i)
is solved ``LEAF`` columns at a time: for row r the leaf's errors solve the triangular system
err_r A_r = (W ⊙ M)_r with A_r = U_leaf on the removed columns and the identity on the kept ones
(``leaf_errors``), one batched solve for all rows; the leaf's errors then update the rest of the block
with one product. The same arithmetic as the column loop, up to rounding, with ~B/LEAF launches per block
instead of ~B times a handful.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from thanos.pruning.algorithms import masks

UPDATE_BYTES = 1 << 26  # memory bound of one chunk of the lazy update W[:, i2:] -= Err U[i1:i2, i2:]
LEAF = 32  # columns solved together inside a block (n:m: the m columns of a group)


def leaf_errors(W: torch.Tensor, M: torch.Tensor, U: torch.Tensor, eye: torch.Tensor) -> torch.Tensor:
    """The OBS errors (c, w) of removing ``M`` (c, w) from the leaf's current weights ``W`` (c, w).

    Row r solves err_r A_r = W_r ⊙ M_r with A_r upper triangular: the columns of the leaf's factor ``U``
    (w, w) where M_r removes, columns of ``eye`` (the identity, at least w x w) where it keeps (their error
    is zero). Entry by entry this is the recursion err_i = M_i (W_i - sum_{j<i} err_j U_ji) / U_ii of the
    column loop.
    """
    w = U.shape[0]
    A = torch.where(M.unsqueeze(1), U, eye[:w, :w])
    return torch.linalg.solve_triangular(A, (W * M).unsqueeze(1), upper=True, left=False).squeeze(1)


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
    leaf = m if n else LEAF
    eye = torch.eye(leaf, dtype=W.dtype, device=W.device)
    for i1 in range(0, b, blocksize):
        i2 = min(i1 + blocksize, b)
        W1, U1, M1 = W[:, i1:i2], U[i1:i2, i1:i2], mask[:, i1:i2]
        if column_mask is not None:
            M1[:] = column_mask[i1:i2]
        elif p is not None:
            M1[:] = masks.smallest(W1**2 / d[i1:i2] ** 2, math.floor(p * c * (i2 - i1)))
        Err1 = torch.empty_like(W1)
        for g1 in range(0, i2 - i1, leaf):
            g2 = min(g1 + leaf, i2 - i1)
            if n:  # the group's mask from its current weights
                M1[:, g1:g2] = masks.n_of_m(W1[:, g1:g2] ** 2 / d[i1 + g1 : i1 + g2] ** 2, n, m)
            Err1[:, g1:g2] = leaf_errors(W1[:, g1:g2], M1[:, g1:g2], U1[g1:g2, g1:g2], eye)
            W1[:, g1:].addmm_(Err1[:, g1:g2], U1[g1:g2, g1:], alpha=-1.0)
        W1.mul_(~M1)  # exact zeros where removed
        for j1 in range(i2, b, update_columns):  # the lazy update in column chunks: no (c, b) temporary
            j2 = min(j1 + update_columns, b)
            W[:, j1:j2].addmm_(Err1, U[i1:i2, j1:j2], alpha=-1.0)
    return W, mask


def structured_columns(W: torch.Tensor, U: torch.Tensor, s: int) -> torch.Tensor:
    """Bool (b,): the ``s`` columns with the smallest OBS error sum_i W_ij^2 / U_jj^2."""
    score = (W**2).sum(dim=0) / torch.diagonal(U) ** 2
    return masks.smallest(score, s)
