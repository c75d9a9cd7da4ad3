"""Thanos (arXiv:2504.05346): block-wise multi-weight updates.

Alg. 1 (unstructured), Alg. 8 (n:m, appendix) and Alg. 2 (structured) of the paper.

Notation follows the paper: W (c, b), H = (2/N) sum X X^T, block size B, mask M (True = removed).

Row k of the block [j1, j2) removes q = phi(M_k:) (eq. 12) with the update of eq. (10),
    Delta_k: = -u R_hat^-1 R,  R = (H_res^-1)[q, :] (eq. 7),  R_hat = R[:, q] (eq. 8),  u = W[k, q] (eq. 9),
where H_res = H[j1:, j1:] is the Hessian of the columns not yet fixed. With H^-1 = U^T U (upper
Cholesky), H_res^-1 = U[j1:, j1:]^T U[j1:, j1:], and because U is triangular the block's rows of it are
    R_blk = U[j1:j2, j1:j2]^T U[j1:j2, j1:],
so nothing is re-inverted per block. Every R_hat is a principal submatrix of G = R_blk[:, :B]: the
rows' systems of a block are solved together (``solve_systems``): on a GPU by one batched Cholesky per
block (``solve_batched``, a handful of launches), on a CPU by a compiled row solver (``native_solver``) or,
without a C compiler, by a batched blocked Cholesky in torch (``solve_grouped``); the updates are applied
as Delta = -Y R_blk, one matrix product.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from thanos.pruning.algorithms import masks
from thanos.pruning.machine import machine_cache

CHUNK_BYTES = 16 << 20  # torch solver on CPU: rows are solved in batches whose factors stay in cache
NOT_PD = "R_hat is not positive definite; increase `damp`"

# The CPU row solver (per row: gather, blocked Cholesky, back substitution), as C beside this file.
NATIVE_SOURCE = Path(__file__).with_name("solve_rows.c")
NATIVE_FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")

RowSolver = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def cpu_identity() -> str:
    """What ``-march=native`` (and how fast each dtype multiplies) depends on: the architecture and, where
    readable, the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    cpu = [line for line in lines if line.startswith(("model name", "flags"))][:2]
    return "\n".join([platform.machine(), platform.processor(), *cpu])


@functools.cache
def native_solver() -> RowSolver | None:
    """The compiled CPU row solver, or None where it cannot be built (no C compiler; then torch solves).

    Built once per machine with the system C compiler (``$CC``, else ``cc``) into
    ``$XDG_CACHE_HOME/thanos-prune`` (default ``~/.cache``), named by a hash of source, flags and CPU; set
    ``THANOS_NATIVE=0`` (read at the first call) to always use the torch solver. The returned function solves
    A_r x_r = rhs_r with A_r = Z[idx_r][:, idx_r] for the first ``size[r]`` entries of every row r of
    ``idx`` (n, s) and returns x (n, s), zero beyond each row's size; rows are split over
    ``torch.get_num_threads()`` threads. Each row's result depends on that row alone.
    """
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if os.environ.get("THANOS_NATIVE") == "0" or compiler is None:
        return None
    code = NATIVE_SOURCE.read_text()
    key = hashlib.sha256("\0".join([code, *NATIVE_FLAGS, compiler, cpu_identity()]).encode()).hexdigest()
    try:
        cache = machine_cache()
        library = cache / f"solve_rows-{key[:16]}.so"
        if not library.exists():
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                source = Path(tmp) / "solve_rows.c"
                source.write_text(code)
                built = Path(tmp) / "solve_rows.so"
                command = [compiler, *NATIVE_FLAGS, str(source), "-o", str(built), "-lm"]
                subprocess.run(command, check=True, capture_output=True, timeout=300)
                os.replace(built, library)  # atomic: concurrent builders leave one complete library
        function = ctypes.CDLL(str(library)).solve_rows
    except (OSError, RuntimeError, subprocess.SubprocessError):  # RuntimeError: no home directory
        return None
    pointer, integer = ctypes.c_void_p, ctypes.c_int64
    function.restype = integer
    function.argtypes = [pointer, integer, pointer, pointer, pointer, pointer, integer, integer, integer]

    def solve(Z: torch.Tensor, idx: torch.Tensor, size: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        Z, idx, size, rhs = Z.contiguous(), idx.contiguous(), size.contiguous(), rhs.contiguous()
        n, ld = idx.shape
        x = torch.empty_like(rhs)
        parts = max(1, min(n, torch.get_num_threads()))
        bounds = [n * t // parts for t in range(parts + 1)]
        pointers = (Z.data_ptr(), Z.shape[1], idx.data_ptr(), size.data_ptr(), rhs.data_ptr(), x.data_ptr())
        failed = [0] * parts

        def run(t: int) -> None:  # ctypes releases the GIL during the call
            failed[t] = function(*pointers, ld, bounds[t], bounds[t + 1])

        helpers = [threading.Thread(target=run, args=(t,)) for t in range(1, parts)]
        for helper in helpers:
            helper.start()
        run(0)
        for helper in helpers:
            helper.join()
        if sum(failed):
            raise ValueError(NOT_PD)
        return x

    return solve


def panel_width(s: int) -> int:
    """Columns per panel of the blocked Cholesky for systems of size ``s`` (a multiple of 8).

    LAPACK factors 8 x 8 blocks cheaply; large systems prefer 16 for more efficient batched products.
    """
    return 16 if s > 64 and s % 16 == 0 else 8


def solve_panels(Z: torch.Tensor, idx: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve A_i x_i = rhs_i with A_i = Z[idx_i][:, idx_i] for every row i of ``idx`` (n, s).

    ``Z`` is symmetric and every A_i positive definite; s is a multiple of 8. Left-looking blocked
    Cholesky, batched over the rows: for each panel of columns, its part of A_i is gathered from Z,
    the columns already factored are subtracted with one batched matrix product, and the diagonal
    block is factored (LAPACK) and inverted. T holds [L^T | z] right of the diagonal blocks, with
    L L^T = A_i and L z = rhs_i; x_i = L^-T z follows by back substitution, panel by panel.
    """
    n, s = idx.shape
    width = panel_width(s)
    flat = Z.reshape(-1)
    row_start = idx * Z.shape[0]
    T = torch.empty(n, s, s + 1, dtype=Z.dtype, device=Z.device)
    eye = torch.eye(width, dtype=Z.dtype, device=Z.device).expand(n, width, width)
    failed = torch.zeros(n, dtype=torch.int32, device=Z.device)
    inverses = []
    for k in range(0, s, width):
        e = k + width
        entries = flat.index_select(0, (row_start[:, k:e, None] + idx[:, None, k:]).reshape(-1))
        P = torch.cat([entries.view(n, width, s - k), rhs[:, k:e, None]], dim=2)  # [A[k:e, k:] | rhs]
        if k:
            P -= T[:, :k, k:e].mT @ T[:, :k, k:]
        L11, info = torch.linalg.cholesky_ex(P[:, :, :width])
        failed |= info
        inverse = torch.linalg.solve_triangular(L11, eye, upper=False)
        T[:, k:e, e:] = inverse @ P[:, :, width:]  # [L21^T | z_k]; L11^T itself is not needed again
        inverses.append(inverse)
    if bool(failed.any()):
        raise ValueError(NOT_PD)
    x = torch.empty(n, s, dtype=Z.dtype, device=Z.device)
    for k in reversed(range(0, s, width)):
        e = k + width
        z = T[:, k:e, s] - (T[:, k:e, e:s] * x[:, None, e:]).sum(2)  # products with vectors: mul-sum
        x[:, k:e] = (inverses[k // width] * z.unsqueeze(2)).sum(1)  # beats batched matrix-vector calls
    return x


def solve_grouped(
    parts: list[torch.Tensor],
    col: torch.Tensor,
    size: torch.Tensor,
    complement: torch.Tensor,
    rhs: torch.Tensor,
    row_batch_bytes: int,
) -> torch.Tensor:
    """The torch solver of ``solve_systems`` on a CPU: rows grouped by size rounded up to a multiple of 8.

    The padding adds identity rows with zero right-hand side, which leaves the solutions unchanged, so
    every system is a principal submatrix of blockdiag(G, I, K) (``solve_panels``); rows are solved in
    batches of at most ``min(row_batch_bytes, CHUNK_BYTES)``. Many small launches, fast on a CPU, where
    LAPACK's batched Cholesky factors one small matrix at a time on one thread.
    """
    c, s_max = col.shape
    B = parts[0].shape[0]
    padded = (size + 7) // 8 * 8
    s_pad = int(padded.max())
    eye = torch.eye(s_pad, dtype=rhs.dtype, device=rhs.device)
    Z = torch.block_diag(parts[0], eye, *parts[1:])  # G, identity for padding, K
    pad = torch.arange(s_pad, device=col.device)
    real = pad < size.unsqueeze(1)
    col = torch.cat([col, col.new_zeros(c, s_pad - s_max)], dim=1)
    zidx = torch.where(real, col + (B + s_pad) * complement.unsqueeze(1), B + pad)
    rhs = torch.cat([rhs, rhs.new_zeros(c, s_pad - s_max)], dim=1) * real
    x = torch.zeros_like(rhs)
    limit = min(row_batch_bytes, CHUNK_BYTES)
    for s in padded.unique().tolist():
        if s == 0:
            continue
        rows = torch.nonzero(padded == s).squeeze(1)
        idx, b = zidx[rows, :s], rhs[rows, :s]
        out = torch.empty_like(b)
        step = max(1, limit // (8 * s * (s + 1)))
        for start in range(0, rows.numel(), step):
            chunk = slice(start, start + step)
            out[chunk] = solve_panels(Z, idx[chunk], b[chunk])
        x[rows, :s] = out
    return x[:, :s_max]


def solve_batched(
    Z: torch.Tensor,
    idx: torch.Tensor,
    size: torch.Tensor,
    rhs: torch.Tensor,
    failed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The GPU's row solver, the compiled one's contract (``native_solver``): x_r = A_r^-1 rhs_r with
    A_r = Z[q_r][:, q_r], q_r = idx[r, :size[r]], for every row r of ``idx`` (n, s); zero beyond size[r].

    ``Z`` is symmetric and every A_r positive definite. The systems are gathered into one batch (n, s, s),
    padded with identity rows (zero right-hand side: the solutions are unchanged, and exactly zero where
    padded), factored by one batched Cholesky and solved together: a fixed handful of launches whatever n
    and s. A system that is not positive definite raises ValueError, or with ``failed`` (a bool scalar on
    the device) sets it instead, for the caller to check when it next reads the device anyway.
    """
    s = idx.shape[1]
    real = torch.arange(s, device=idx.device) < size.unsqueeze(1)
    eye = torch.eye(s, dtype=Z.dtype, device=Z.device)
    A = torch.where(
        real.unsqueeze(2) & real.unsqueeze(1), Z.take(idx.unsqueeze(2) * Z.shape[1] + idx.unsqueeze(1)), eye
    )
    L, info = torch.linalg.cholesky_ex(A)
    z = torch.linalg.solve_triangular(L, (rhs * real).unsqueeze(2), upper=False)
    x = torch.linalg.solve_triangular(L.mT, z, upper=True).squeeze(2)  # x = L^-T L^-1 rhs
    if failed is not None:
        failed.logical_or_(info.any())
    elif bool(info.any()):  # checked after the solves are queued: a GPU waits once, at the end
        raise ValueError(NOT_PD)
    return x


def solve_systems(
    parts: list[torch.Tensor],
    col: torch.Tensor,
    size: torch.Tensor,
    complement: torch.Tensor,
    rhs: torch.Tensor,
    row_batch_bytes: int,
    failed: torch.Tensor | None = None,
) -> torch.Tensor:
    """x_r = A_r^-1 rhs_r for every row r, A_r = (G or K)[q_r, q_r] with q_r = col[r, :size[r]]; zero beyond.

    ``parts`` is [G] or [G, K]; rows with ``complement`` use K. On a GPU (or with ``THANOS_BATCHED=1``, for
    counting a GPU's launches on a CPU: ``bench/kernel_calls.py``) the rows go to ``solve_batched`` in
    batches of at most ``row_batch_bytes`` of systems: with the default 1 GiB, one batch per block for the
    unstructured blocks of any layer of a 70B model. On a CPU, fp32 goes to the compiled row solver
    (``native_solver``) where one could be built, everything else to ``solve_grouped``. All solve the same
    systems exactly up to rounding. ``failed``: as in ``solve_batched`` (the CPU's solvers raise at once).
    """
    B = parts[0].shape[0]
    Z = parts[0]
    if len(parts) > 1:  # blockdiag(G, K): K's rows and columns follow G's
        Z = Z.new_zeros(2 * B, 2 * B)
        Z[:B, :B], Z[B:, B:] = parts
    idx = col + B * complement.unsqueeze(1)
    if not masks.gpu_path(rhs):
        solver = native_solver() if rhs.dtype == torch.float32 else None
        if solver is None:
            return solve_grouped(parts, col, size, complement, rhs, row_batch_bytes)
        return solver(Z, idx, size.long(), rhs)
    c, s = col.shape
    step = max(1, row_batch_bytes // (4 * s * s))
    if step >= c:
        return solve_batched(Z, idx, size, rhs, failed)
    rows = [slice(i, i + step) for i in range(0, c, step)]
    return torch.cat([solve_batched(Z, idx[r], size[r], rhs[r], failed) for r in rows])


def diagonal_inverses(U: torch.Tensor, blocksize: int) -> list[torch.Tensor]:
    """V_j = U_j^-1 for the diagonal blocks U_j = U[j1:j2, j1:j2] of the upper factor ``U``, j1 = 0, B, 2B,
    ...: the full blocks in one batched triangular solve, a shorter last block by itself."""
    b = U.shape[0]
    full = b // blocksize
    blocks = [U[j : j + blocksize, j : j + blocksize] for j in range(0, b, blocksize)]
    eye = torch.eye(blocksize, dtype=U.dtype, device=U.device)
    V = (
        list(torch.linalg.solve_triangular(torch.stack(blocks[:full]), eye, upper=True).unbind())
        if full
        else []
    )
    if b % blocksize:
        V.append(torch.linalg.solve_triangular(blocks[-1], eye[: b % blocksize, : b % blocksize], upper=True))
    return V


def multi_weight_update(
    W: torch.Tensor,
    U: torch.Tensor,
    V_blk: torch.Tensor,
    M: torch.Tensor,
    j1: int,
    row_batch_bytes: int,
    failed: torch.Tensor,
) -> int:
    """Apply eq. (10) to every row of ``W`` (in place) for the block mask ``M`` (c, B) at column ``j1``;
    ``V_blk`` is U_blk^-1 for the block's diagonal block of ``U`` (``diagonal_inverses``). Returns the
    count of M: the host waits once, for the systems' sizes and that count. ``failed`` (a bool scalar on the
    device) is set where the block's systems are not positive definite (``solve_systems``; the CPU's
    solvers raise at once); the caller checks it after the last block (``check_solved``).

    Row k needs y = R_hat^-1 u with R_hat = G[q, q], G = H_res^-1 on the block. When |q| > B/2 the
    same y comes from the complement p of q in the block (block inversion with K = G^-1 = V_blk V_blk^T):
        G[q, q]^-1 = K[q, q] - K[q, p] K[p, p]^-1 K[p, q],
    so no system is larger than B/2 (``solve_systems``). Then Delta = -Y R_blk for all rows in one matrix
    product; afterwards W[:, j1:j1+B][M] is exactly zero.
    """
    c, B = M.shape
    j2 = j1 + B
    U_blk = U[j1:j2, j1:j2]
    R_blk = U_blk.T @ U[j1:j2, j1:]  # (B, b - j1): rows of H_res^-1 for the block's columns
    counts = M.sum(dim=1, dtype=torch.int32)
    complement = 2 * counts > B
    size = torch.where(complement, B - counts, counts)
    waited = torch.stack([size.max(), complement.sum(dtype=torch.int32), counts.sum(dtype=torch.int32)])
    s_max, complements, removed = waited.tolist()  # the block's one wait
    u = W[:, j1:j2] * M  # u of eq. (9) per row, zero outside q
    parts = [R_blk[:, :B]]  # G
    src = u
    if complements:
        K = V_blk @ V_blk.T  # G^-1
        v = u @ K
        parts.append(K)
        src = torch.where(complement.unsqueeze(1), v, u)
    chosen = M != complement.unsqueeze(1)  # q = phi(M_k:) (eq. 12), or its complement p
    order = torch.sort((~chosen).to(torch.int8), dim=1, stable=True).indices  # chosen columns first
    col = order[:, :s_max]
    Y = torch.zeros_like(u)
    if s_max:
        rhs = torch.gather(src, 1, col)
        Y.scatter_(1, col, solve_systems(parts, col, size, complement, rhs, row_batch_bytes, failed))
    if len(parts) > 1:
        Y = torch.where(complement.unsqueeze(1), (v - Y @ K) * M, Y)
    W[:, j1:].addmm_(Y, R_blk, alpha=-1.0)
    W[:, j1:j2].mul_(~M)  # exact zeros where removed (cheaper than masked_fill_ on a strided view)
    return removed


def check_solved(failed: torch.Tensor) -> None:
    """Raise if any block's systems were not positive definite (``multi_weight_update``): checked once per
    layer, so that a GPU's host does not wait for it per block; the blocks after a failing one run on
    non-finite weights, and their result is dropped with the error."""
    if bool(failed):
        raise ValueError(NOT_PD)


def thanos_unstructured(
    W: torch.Tensor, U: torch.Tensor, xnorm: torch.Tensor, k: int, blocksize: int, row_batch_bytes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1: remove exactly ``k`` = floor(p c b) weights of ``W`` (fp32, in place).

    Before every block the global residual mask psi_X(W[:, j1:], r) (eq. 11) is recomputed from the
    current weights over all remaining columns; its first B columns are the block mask and r shrinks
    by their count (Alg. 1, lines 6-8). Rows may lose unequal numbers of weights. A GPU's host waits
    twice per block: for the bracket's counts (``masks.smallest_leading``) and for the systems' sizes
    (``multi_weight_update``).
    """
    c, b = W.shape
    mask = torch.zeros_like(W, dtype=torch.bool)
    scratch = torch.empty(c * b, dtype=W.dtype, device=W.device)  # every block's metric, one allocation
    V = diagonal_inverses(U, blocksize)
    failed = torch.zeros((), dtype=torch.bool, device=W.device)
    r = k
    for j1 in range(0, b, blocksize):
        if r == 0:
            break
        j2 = min(j1 + blocksize, b)
        metric = scratch[: c * (b - j1)].view(c, b - j1)
        torch.mul(W[:, j1:], xnorm[j1:], out=metric).abs_()  # |W_ij| ||X_j||, as ||X_j|| >= 0
        M = masks.smallest_leading(metric, r, j2 - j1)
        r -= multi_weight_update(W, U, V[j1 // blocksize], M, j1, row_batch_bytes, failed)
        mask[:, j1:j2] = M
    check_solved(failed)
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
    """Alg. 8 (n:m) on the non-outlier rows ``W`` (fp32, in place).

    For each block, the mask removes the n smallest |W_kq| ||X_q|| of every m-group from the current
    weights; every row then removes the same number n B / m of weights with eq. (10). A GPU's host waits
    once per block (``multi_weight_update``).
    """
    b = W.shape[1]
    mask = torch.zeros_like(W, dtype=torch.bool)
    V = diagonal_inverses(U, blocksize)
    failed = torch.zeros((), dtype=torch.bool, device=W.device)
    for j1 in range(0, b, blocksize):
        j2 = min(j1 + blocksize, b)
        M = masks.n_of_m(W[:, j1:j2].abs() * xnorm[j1:j2], n, m)
        multi_weight_update(W, U, V[j1 // blocksize], M, j1, row_batch_bytes, failed)
        mask[:, j1:j2] = M
    check_solved(failed)
    return W, mask


def thanos_structured(
    W: torch.Tensor, U: torch.Tensor, xnorm: torch.Tensor, s: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 2 on the non-outlier rows ``W`` (fp32, in place): remove ``s`` whole columns.

    Columns are ranked by v_j = ||W_:,j||^2 ||X_j||^2 (eq. 15) over these rows; with Q the chosen
    columns the closed-form update (eq. 13) is
        W <- W - W[:, Q] (H^-1[Q, Q])^-1 H^-1[Q, :].
    The paper's permutations P, Q only move Q to the front; indexing does the same without copies.
    """
    return remove_columns(W, U, masks.smallest(structured_metric(W, xnorm), s))


def structured_metric(W: torch.Tensor, xnorm: torch.Tensor) -> torch.Tensor:
    """v_j = ||W_:,j||^2 ||X_j||^2 (eq. 15): the structured algorithm's column metric."""
    return (W**2).sum(dim=0) * xnorm**2


def remove_columns(
    W: torch.Tensor, U: torch.Tensor, chosen: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed-form update of eq. (13) for the columns ``chosen`` (bool (b,)), applied together:
        W <- W - W[:, Q] (H^-1[Q, Q])^-1 H^-1[Q, :],  Q = the chosen columns,
    the same for a group of columns (a head's) as for one (Alg. 2). Returns (W, mask)."""
    mask = chosen.unsqueeze(0).expand(W.shape[0], -1).clone()
    if not bool(chosen.any()):
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
