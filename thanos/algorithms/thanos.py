"""Thanos (ICML 2025): block-wise multi-weight updates.

Alg. 1 (unstructured), Alg. 5 (n:m) and Alg. 2 (structured).

Notation follows the paper: W (c, b), H = (2/N) sum X X^T, block size B, mask M (True = removed).

The update of row k for its removal set q inside the block [j1, j2) is eq. (5):
    Delta_k = -u R_hat^-1 R,   R = (H_res^-1)[q, :],   R_hat = R[:, q],   u = W[k, q],
with H_res = H[j1:, j1:] the Hessian of the columns not yet fixed. With H^-1 = U^T U (upper Cholesky),
H_res^-1 = U[j1:, j1:]^T U[j1:, j1:], and because U is triangular its first B rows are
    R_blk = U[j1:j2, j1:j2]^T U[j1:j2, j1:],
so no inverse is recomputed per block. Rows are grouped by |q|: each group solves its |q| x |q|
systems with one batched Cholesky and applies Delta = -Y R_blk as one matrix product.
"""

from __future__ import annotations

import torch

from thanos.algorithms import masks


def multi_weight_update(
    W: torch.Tensor, U: torch.Tensor, M: torch.Tensor, j1: int, row_batch_bytes: int
) -> None:
    """Apply eq. (5) to every row of ``W`` (in place) for the block mask ``M`` (c, B) at column ``j1``.

    Row k needs y = R_hat^-1 u with R_hat = G[q, q], G = H_res^-1 on the block. When |q| > B/2 the
    same y comes from the complement p of q in the block (block inversion with K = G^-1):
        G[q, q]^-1 = K[q, q] - K[q, p] K[p, p]^-1 K[p, q],
    so no system is larger than B/2. Then Delta = -Y R_blk for all rows in one matrix product.
    Afterwards W[:, j1:j1+B][M] is exactly zero. Memory per row batch stays under ``row_batch_bytes``.
    """
    B = M.shape[1]
    j2 = j1 + B
    U_blk = U[j1:j2, j1:j2]
    R_blk = U_blk.T @ U[j1:j2, j1:]  # (B, b - j1): rows of H_res^-1 for the block's columns
    G = R_blk[:, :B]
    eye = torch.eye(B, dtype=U.dtype, device=U.device)
    V = torch.linalg.solve_triangular(U_blk, eye, upper=True)
    K = V @ V.T  # G^-1
    counts = M.sum(dim=1)
    order = torch.sort(M.to(torch.int8), dim=1, stable=True).indices  # kept columns p first, then q
    u = W[:, j1:j2] * M  # u of eq. (u_def) per row, zero outside q
    v = u @ K
    Y = torch.zeros_like(u)
    for s in torch.unique(counts).tolist():
        if s == 0:
            continue
        direct = 2 * s <= B
        size = s if direct else B - s
        rows = torch.nonzero(counts == s).squeeze(1)
        step = max(1, row_batch_bytes // (4 * (3 * size * size + 4 * B)))
        for start in range(0, rows.numel(), step):
            r = rows[start : start + step]
            idx = order[r, B - s :] if direct else order[r, :size]  # q = phi(M_i:), or its complement p
            rhs = torch.gather(u[r] if direct else v[r], 1, idx)
            part = torch.zeros(r.numel(), B, dtype=W.dtype, device=W.device)
            if size:
                A = (G if direct else K)[idx.unsqueeze(2), idx.unsqueeze(1)]
                L, info = torch.linalg.cholesky_ex(A)
                if int(info.max()) != 0:
                    raise ValueError("R_hat is not positive definite; increase `damp`")
                part.scatter_(1, idx, torch.cholesky_solve(rhs.unsqueeze(2), L).squeeze(2))
            Y[r] = part if direct else (v[r] - part @ K) * M[r]
    W[:, j1:].addmm_(Y, R_blk, alpha=-1.0)
    W[:, j1:j2][M] = 0.0


def thanos_unstructured(
    W: torch.Tensor, U: torch.Tensor, xnorm: torch.Tensor, k: int, blocksize: int, row_batch_bytes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1: remove exactly ``k`` = floor(p c b) weights of ``W`` (fp32, in place).

    Before every block the global residual mask psi_X(W[:, j1:], r) (eq. psi_def) is recomputed from the
    current weights over all remaining columns; its first B columns are the block mask, r shrinks by
    their count (eq. global_res_mask_construction). Rows may lose unequal numbers of weights.
    """
    c, b = W.shape
    mask = torch.zeros_like(W, dtype=torch.bool)
    r = k
    for j1 in range(0, b, blocksize):
        if r == 0:
            break
        j2 = min(j1 + blocksize, b)
        residual = masks.smallest(W[:, j1:].abs() * xnorm[j1:], r)
        M = residual[:, : j2 - j1]
        r -= int(M.sum())
        multi_weight_update(W, U, M, j1, row_batch_bytes)
        mask[:, j1:j2] = M
    return W, mask


def thanos_nm(
    W: torch.Tensor,
    U: torch.Tensor,
    xnorm: torch.Tensor,
    n: int,
    m: int,
    blocksize: int,
    row_batch_bytes: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 5 (n:m) on the non-outlier rows ``W`` (fp32, in place).

    For each block, the mask removes the n smallest |W_kq| ||X_q|| of every m-group from the current
    weights; every row then removes the same number n B / m of weights with eq. (5).
    """
    b = W.shape[1]
    mask = torch.zeros_like(W, dtype=torch.bool)
    for j1 in range(0, b, blocksize):
        j2 = min(j1 + blocksize, b)
        M = masks.n_of_m(W[:, j1:j2].abs() * xnorm[j1:j2], n, m)
        multi_weight_update(W, U, M, j1, row_batch_bytes)
        mask[:, j1:j2] = M
    return W, mask


def thanos_structured(
    W: torch.Tensor, U: torch.Tensor, xnorm: torch.Tensor, s: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 2 on the non-outlier rows ``W`` (fp32, in place): remove ``s`` whole columns.

    Columns are ranked by v_j = ||W_:,j||^2 ||X_j||^2 (eq. column_loss_partial) over these rows; with Q
    the chosen columns the closed-form update (eq. several_weights_structured_solution) is
        W <- W - W[:, Q] (H^-1[Q, Q])^-1 H^-1[Q, :].
    The paper's permutations P, Q only move Q to the front; indexing does the same without copies.
    """
    v = (W**2).sum(dim=0) * xnorm**2
    chosen = masks.smallest(v, s)
    mask = chosen.unsqueeze(0).expand(W.shape[0], -1).clone()
    if s == 0:
        return W, mask
    Q = torch.nonzero(chosen).squeeze(1)
    Hinv_Q = U[:, Q].T @ U  # (s, b) = H^-1[Q, :]
    L, info = torch.linalg.cholesky_ex(Hinv_Q[:, Q])
    if int(info) != 0:
        raise ValueError("H^-1[Q, Q] is not positive definite; increase `damp`")
    Z = torch.cholesky_solve(W[:, Q].T.contiguous(), L)  # (s, c) = (H^-1[Q,Q])^-1 W[:, Q]^T
    W -= Z.T @ Hinv_Q
    W[:, Q] = 0.0
    return W, mask
