"""Pruning kernels: exact counts and patterns, optimality against independent solutions, robustness."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import pytest
import torch

import thanos
from thanos import HessianAccumulator, prune_layer
from thanos.pruning.algorithms import masks
from thanos.pruning.algorithms import thanos_blockwise as thanos_kernel
from thanos.pruning.hessian import inverse_cholesky
from thanos.pruning.layer import layer_objective
from thanos.pruning.sparsity import exact, structured_count

METHODS = ("magnitude", "wanda", "sparsegpt", "thanos")


def correlated_inputs(b: int, tokens: int, seed: int = 0) -> torch.Tensor:
    """X (b, tokens): correlated features with LLM-like spread of per-feature norms, float64."""
    g = torch.Generator().manual_seed(seed)
    mix = (
        torch.eye(b, dtype=torch.float64) + 0.6 * torch.randn(b, b, generator=g, dtype=torch.float64) / b**0.5
    )
    scale = torch.exp(torch.randn(b, 1, generator=g, dtype=torch.float64))
    return scale * (mix @ torch.randn(b, tokens, generator=g, dtype=torch.float64))


def hessian_of(X: torch.Tensor, nsamples: int = 1) -> torch.Tensor:
    """H = (2/N) X X^T with the tokens of X split over ``nsamples`` sequences."""
    return (2.0 / nsamples * X @ X.T).to(torch.float32)


def layer(c: int, b: int, tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    W = torch.randn(c, b, generator=g, dtype=torch.float64)
    X = correlated_inputs(b, tokens, seed)
    return W.to(torch.float32), X, hessian_of(X)


def least_squares_rows(W: torch.Tensor, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """For each row, the weights minimising ||(W_new - W) X|| with W_new zero on the mask (float64)."""
    W = W.to(torch.float64)
    out = torch.zeros_like(W)
    target = W @ X
    for i in range(W.shape[0]):
        free = ~mask[i]
        if free.any():
            sol = torch.linalg.lstsq(X[free].T, target[i].unsqueeze(1)).solution.squeeze(1)
            out[i, free] = sol
    return out


# ---------------------------------------------------------------- exact counts and patterns


@pytest.mark.parametrize("blocksize", [1, 16, 128])
@pytest.mark.parametrize("p", [0.3, 0.5, 0.7])
def test_thanos_unstructured_removes_exactly_floor_pcb(p: float, blocksize: int) -> None:
    W, _, H = layer(48, 64, 256)
    result = prune_layer(W, H, "thanos", p, blocksize=blocksize)
    k = math.floor(round(p * 10) * 48 * 64 / 10)
    assert int(result.mask.sum()) == k
    assert int((result.weight == 0).sum()) == k
    assert bool((result.weight[result.mask] == 0).all())
    per_row = result.mask.sum(dim=1)
    assert per_row.min() < per_row.max(), "the global residual mask gives unequal counts per row"


def test_counts_use_exact_arithmetic() -> None:
    """floor(0.57 * 10 * 10) is 57; float arithmetic gives 56."""
    assert math.floor(0.57 * 10 * 10) == 56
    W, _, H = layer(10, 10, 64)
    for method in ("magnitude", "thanos"):
        assert int(prune_layer(W, H, method, 0.57).mask.sum()) == 57


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pattern", ["2:4", "4:8", "3:8"])
def test_nm_pattern(method: str, pattern: str) -> None:
    n, m = map(int, pattern.split(":"))
    W, _, H = layer(40, 64, 256)
    alpha = 0.1 if method != "magnitude" else 0.0
    result = prune_layer(W, H, method, pattern, alpha=alpha, blocksize=32 if method != "magnitude" else None)
    outliers = math.ceil(alpha * 40)
    dense = result.mask.sum(dim=1) == 0
    assert int(dense.sum()) == outliers
    assert torch.equal(result.weight[dense], W[dense]), "outlier rows are bit-identical"
    groups = (result.weight[~dense] == 0).reshape(-1, 64 // m, m).sum(dim=2)
    assert bool((groups >= n).all())
    assert bool((result.mask[~dense].reshape(-1, 64 // m, m).sum(dim=2) == n).all())


@pytest.mark.parametrize(
    ("method", "alpha"),
    [(m, a) for m in METHODS for a in (0.0, 0.1, 0.25) if m != "magnitude" or a == 0.0],
)
def test_structured_removes_whole_columns(method: str, alpha: float) -> None:
    c, b, p = 40, 64, 0.3
    W, _, H = layer(c, b, 256)
    result = prune_layer(W, H, method, f"structured:{p}", alpha=alpha)
    s = structured_count(exact(p), exact(alpha), b)
    dense = torch.zeros(c, dtype=torch.bool)
    dense[result.mask.sum(dim=1) == 0] = True
    assert int(dense.sum()) == math.ceil(alpha * c)
    assert torch.equal(result.weight[dense], W[dense])
    pruned_rows = result.weight[~dense]
    zero_columns = (pruned_rows == 0).all(dim=0)
    assert int(zero_columns.sum()) == s
    assert torch.equal(result.mask[~dense], zero_columns.expand_as(pruned_rows))


# ---------------------------------------------------------------- optimality


@pytest.mark.parametrize("pattern", ["0.5", "2:4"])
def test_thanos_single_block_is_least_squares_optimal(pattern: str) -> None:
    """With B >= b, every row of Thanos equals the exact least-squares optimum for its own mask."""
    c, b = 24, 32
    W, X, H = layer(c, b, 400)
    result = prune_layer(W, H, "thanos", pattern, blocksize=b, alpha=0.0, damp=0.0)
    expected = least_squares_rows(W, X, result.mask)
    torch.testing.assert_close(result.weight.to(torch.float64), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_thanos_structured_is_least_squares_optimal(alpha: float) -> None:
    c, b = 30, 32
    W, X, H = layer(c, b, 400)
    result = prune_layer(W, H, "thanos", "structured:0.25", alpha=alpha, damp=0.0)
    expected = least_squares_rows(W, X, result.mask)
    torch.testing.assert_close(result.weight.to(torch.float64), expected, rtol=2e-3, atol=2e-3)


def literal_thanos(
    W: torch.Tensor,
    H: torch.Tensor,
    blocksize: int,
    p: float | None = None,
    nm: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1 / Alg. 8 (n:m) as written (float64): re-invert H_res for every block, solve row by row."""
    W = W.to(torch.float64).clone()
    H = H.to(torch.float64)
    xnorm = torch.sqrt(torch.diagonal(H))
    H = H + 0.01 * torch.diagonal(H).mean() * torch.eye(H.shape[0], dtype=torch.float64)
    c, b = W.shape
    mask = torch.zeros(c, b, dtype=torch.bool)
    r = math.floor(round(p * 100) * c * b / 100) if p is not None else 0
    for j1 in range(0, b, blocksize):
        j2 = min(j1 + blocksize, b)
        metric = W[:, j1:].abs() * xnorm[j1:]
        if nm is None:
            order = torch.argsort(metric.flatten(), stable=True)[:r]
            residual = torch.zeros(metric.numel(), dtype=torch.bool)
            residual[order] = True
            M = residual.view_as(metric)[:, : j2 - j1]
            r -= int(M.sum())
        else:
            n, m = nm
            groups = metric[:, : j2 - j1].reshape(c, -1, m)
            idx = torch.argsort(groups, dim=2, stable=True)[:, :, :n]
            M = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, idx, True).reshape(c, -1)
        Hinv = torch.linalg.inv(H[j1:, j1:])
        for i in range(c):
            q = torch.nonzero(M[i]).squeeze(1)
            if q.numel():
                R = Hinv[q]
                u = W[i, j1 + q]
                W[i, j1:] -= u @ torch.linalg.inv(R[:, q]) @ R
                W[i, j1 + q] = 0.0
        mask[:, j1:j2] = M
    return W, mask


@pytest.mark.parametrize(
    ("pattern", "blocksize"), [("0.5", 16), ("0.5", 1), ("0.3", 24), ("2:4", 16), ("4:8", 32)]
)
def test_thanos_matches_the_literal_algorithm(pattern: str, blocksize: int) -> None:
    """Several blocks: the fast implementation equals Alg. 1 / Alg. 8 (n:m) written out literally."""
    W, _, H = layer(24, 64, 300)
    result = prune_layer(W, H, "thanos", pattern, blocksize=blocksize, alpha=0.0)
    nm = tuple(map(int, pattern.split(":"))) if ":" in pattern else None
    expected, mask = literal_thanos(W, H, blocksize, p=None if nm else float(pattern), nm=nm)
    assert torch.equal(result.mask, mask)
    torch.testing.assert_close(result.weight.to(torch.float64), expected, rtol=1e-3, atol=1e-3)


def obs_loop(W: torch.Tensor, H: torch.Tensor, mask: torch.Tensor, damp: float) -> torch.Tensor:
    """Plain SparseGPT: for each column in order, OBS-remove masked weights, then eliminate the column."""
    W = W.to(torch.float64).clone()
    H = H.to(torch.float64)
    H = H + damp * torch.diagonal(H).mean() * torch.eye(H.shape[0], dtype=torch.float64)
    Hinv = torch.linalg.inv(H)
    for j in range(W.shape[1]):
        removed = mask[:, j]
        err = torch.where(removed, W[:, j], torch.zeros_like(W[:, j])) / Hinv[j, j]
        W -= err.unsqueeze(1) * Hinv[j].unsqueeze(0)
        W[removed, j] = 0.0
        Hinv = Hinv - torch.outer(Hinv[:, j], Hinv[j]) / Hinv[j, j]
    return W


@pytest.mark.parametrize("pattern", ["0.5", "2:4", "structured:0.3"])
@pytest.mark.parametrize(("b", "blocksize"), [(48, 16), (112, 80)])
def test_sparsegpt_equals_per_column_obs_loop(pattern: str, b: int, blocksize: int) -> None:
    """Blocks of one leaf and of several (``sparsegpt.LEAF`` columns solved together, a shorter last one)."""
    W, _, H = layer(20, b, 300)
    result = prune_layer(W, H, "sparsegpt", pattern, blocksize=blocksize)
    expected = obs_loop(W, H, result.mask, damp=0.01)
    torch.testing.assert_close(result.weight.to(torch.float64), expected, rtol=1e-3, atol=1e-3)
    if pattern == "0.5" and b == 48:
        per_block = result.mask.reshape(20, 3, 16).sum(dim=(0, 2))
        assert per_block.tolist() == [math.floor(0.5 * 20 * 16)] * 3


@pytest.mark.parametrize("pattern", ["0.5", "2:4", "structured:0.3"])
def test_objective_ordering(pattern: str) -> None:
    """On correlated inputs: thanos <= sparsegpt <= wanda <= magnitude (same pattern, no outlier rows)."""
    W, _, H = layer(64, 128, 1024)
    objective = {method: prune_layer(W, H, method, pattern, alpha=0.0).stats.objective for method in METHODS}
    assert objective["thanos"] <= objective["sparsegpt"] <= objective["wanda"] <= objective["magnitude"], (
        objective
    )


def test_objective_is_mean_squared_output_error() -> None:
    c, b, nsamples, tokens = 12, 16, 5, 20
    g = torch.Generator().manual_seed(3)
    W = torch.randn(c, b, generator=g)
    X = [torch.randn(tokens, b, generator=g) for _ in range(nsamples)]
    acc = HessianAccumulator(b)
    for x in X:
        acc.add(x)
    result = prune_layer(W, acc.H, "thanos", 0.5)
    dW = result.weight - W
    expected = sum(float(((x @ dW.T) ** 2).sum()) for x in X) / nsamples
    assert result.stats.objective == pytest.approx(expected, rel=1e-4)


# ---------------------------------------------------------------- robustness


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pattern", ["0.5", "2:4", "structured:0.3"])
def test_rank_deficient_hessian(method: str, pattern: str) -> None:
    """Fewer tokens than features: H is singular, damping makes it invertible."""
    W, _, H = layer(16, 64, 20)
    result = prune_layer(W, H, method, pattern, alpha=0.0)
    assert bool(torch.isfinite(result.weight).all())
    assert result.stats.achieved_sparsity == pytest.approx(
        0.5 if pattern != "structured:0.3" else 0.3, abs=0.02
    )


@pytest.mark.parametrize("method", ["sparsegpt", "thanos"])
def test_dead_columns_are_zeroed(method: str) -> None:
    W, X, _ = layer(16, 32, 200)
    X[[3, 17]] = 0.0
    H = hessian_of(X)
    result = prune_layer(W, H, method, 0.5)
    assert result.stats.dead_columns == 2
    assert bool((result.weight[:, [3, 17]] == 0).all())
    assert bool(torch.isfinite(result.weight).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", METHODS)
def test_half_precision_weights(dtype: torch.dtype, method: str) -> None:
    W, _, H = layer(16, 32, 200)
    W = W.to(dtype)
    result = prune_layer(W, H, method, "2:4", alpha=0.0)
    assert result.weight.dtype == dtype and result.weight.device == W.device
    assert bool((result.weight[result.mask] == 0).all())
    assert int(result.mask.sum()) == 16 * 32 // 2


@pytest.mark.parametrize("method", METHODS)
def test_all_zero_rows(method: str) -> None:
    W, _, H = layer(16, 32, 200)
    W[[0, 5]] = 0.0
    result = prune_layer(W, H, method, 0.5)
    assert bool(torch.isfinite(result.weight).all())
    assert int(result.mask.sum()) == 16 * 32 // 2


def test_deterministic_and_independent_of_row_batching() -> None:
    W, _, H = layer(40, 64, 256)
    first = prune_layer(W, H, "thanos", 0.5, blocksize=16)
    again = prune_layer(W, H, "thanos", 0.5, blocksize=16)
    tiny_batches = prune_layer(W, H, "thanos", 0.5, blocksize=16, row_batch_bytes=1)
    assert torch.equal(first.weight, again.weight)
    assert torch.equal(first.mask, tiny_batches.mask)
    torch.testing.assert_close(first.weight, tiny_batches.weight, rtol=1e-5, atol=1e-6)


def test_cholesky_retry_is_recorded() -> None:
    W = torch.randn(8, 16)
    H = torch.ones(16, 16)  # rank one: not invertible without enough damping
    result = prune_layer(W, H, "sparsegpt", 0.5, damp=0.0)
    assert result.stats.damp_retries > 0
    assert bool(torch.isfinite(result.weight).all())


def test_cholesky_failure_names_the_layer() -> None:
    W = torch.randn(8, 16)
    H = torch.eye(16) + 1e5 * (torch.ones(16, 16) - torch.eye(16))  # indefinite beyond any damping tried
    with pytest.raises(ValueError, match=r"block3\.self_attn\.q_proj.*damp"):
        prune_layer(W, H, "thanos", 0.5, name="block3.self_attn.q_proj")


# ---------------------------------------------------------------- bad input

W0, _, H0 = layer(8, 16, 64)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sparsity": 1.0}, r"sparsity.*\[0, 1\)"),
        ({"sparsity": -0.1}, r"sparsity.*\[0, 1\)"),
        ({"sparsity": "4:4"}, r"sparsity.*n < m"),
        ({"sparsity": "0:4"}, r"sparsity.*n < m"),
        ({"sparsity": "2:3"}, r"m=3 must divide"),
        ({"sparsity": "half"}, r"sparsity"),
        ({"sparsity": "2:4", "blocksize": 6}, r"blocksize.*multiple of m=4"),
        ({"blocksize": 0}, r"blocksize"),
        ({"sparsity": "2:4", "alpha": 1.0}, r"alpha.*\[0, 1\)"),
        ({"sparsity": "2:4", "alpha": -0.5}, r"alpha.*\[0, 1\)"),
        ({"alpha": 0.1}, r"alpha.*n:m and structured"),
        ({"sparsity": "structured:0.8", "alpha": 0.5}, r"columns"),
        ({"hessian": torch.eye(8)}, r"hessian.*\(16, 16\)"),
        ({"hessian": None}, r"hessian.*needs"),
        (
            {"method": "obc"},
            "method: unknown method 'obc'; choose one of " + re.escape(", ".join(thanos.METHODS)),
        ),
        ({"damp": -1.0}, r"damp"),
        ({"damp": "0.01"}, r"damp: expected a number, got '0.01'"),
        ({"damp": None}, r"damp: expected a number, got None"),
        ({"damp": float("inf")}, r"damp: must be a finite number"),
        ({"alpha": float("nan")}, r"alpha: expected a number, got nan"),
        ({"blocksize": True}, r"blocksize: must be a positive integer, got True"),
        ({"weight": torch.empty(8, 16, device="meta")}, r"weight: on device 'meta'"),
        ({"hessian": torch.empty(16, 16, device="meta")}, r"hessian: on device 'meta'"),
        ({"hessian": H0 + torch.triu(torch.ones(16, 16), 1)}, r"hessian: not symmetric"),
        ({"hessian": H0 - 2 * torch.diag(torch.diagonal(H0))}, r"hessian: a negative diagonal entry"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"weight": W0, "hessian": H0, "method": "thanos", "sparsity": 0.5} | kwargs
    with pytest.raises(ValueError, match=match):
        prune_layer(**args)


def test_objective_of_a_half_precision_weight_is_computed_in_fp32() -> None:
    dW = (W0 - prune_layer(W0, H0, "thanos", 0.5).weight).half()
    assert thanos.layer_objective(dW, H0) == pytest.approx(thanos.layer_objective(dW.float(), H0))
    with pytest.raises(ValueError, match=r"dW \(8, 16\) and H \(8, 8\)"):
        thanos.layer_objective(dW, torch.eye(8))


def test_nan_and_inf_are_rejected() -> None:
    W = W0.clone()
    W[1, 2] = float("nan")
    with pytest.raises(ValueError, match="weight.*NaN or Inf"):
        prune_layer(W, H0, "thanos", 0.5)
    H = H0.clone()
    H[0, 0] = float("inf")
    with pytest.raises(ValueError, match="hessian.*NaN or Inf"):
        prune_layer(W0, H, "wanda", 0.5)


def test_magnitude_runs_without_hessian() -> None:
    result = prune_layer(W0, None, "magnitude", "structured:0.25")
    assert result.stats.objective is None
    assert int((result.weight == 0).all(dim=0).sum()) == 4


# ---------------------------------------------------------------- the batched Thanos kernel


def reference_block_update(W: torch.Tensor, U: torch.Tensor, M: torch.Tensor, j1: int) -> None:
    """The Thanos block update as implemented before the batched blocked Cholesky (kept as a reference):
    rows grouped by their count |q|, one LAPACK Cholesky batch per group, complement systems for |q| > B/2."""
    B = M.shape[1]
    j2 = j1 + B
    U_blk = U[j1:j2, j1:j2]
    R_blk = U_blk.T @ U[j1:j2, j1:]
    G = R_blk[:, :B]
    V = torch.linalg.solve_triangular(U_blk, torch.eye(B), upper=True)
    K = V @ V.T
    counts = M.sum(dim=1)
    order = torch.sort(M.to(torch.int8), dim=1, stable=True).indices
    u = W[:, j1:j2] * M
    v = u @ K
    Y = torch.zeros_like(u)
    for s in torch.unique(counts).tolist():
        if s == 0:
            continue
        direct = 2 * s <= B
        rows = torch.nonzero(counts == s).squeeze(1)
        idx = order[rows, B - s :] if direct else order[rows, : B - s]
        part = torch.zeros(rows.numel(), B)
        if idx.shape[1]:
            A = (G if direct else K)[idx.unsqueeze(2), idx.unsqueeze(1)]
            rhs = torch.gather(u[rows] if direct else v[rows], 1, idx).unsqueeze(2)
            part.scatter_(1, idx, torch.cholesky_solve(rhs, torch.linalg.cholesky(A)).squeeze(2))
        Y[rows] = part if direct else (v[rows] - part @ K) * M[rows]
    W[:, j1:].addmm_(Y, R_blk, alpha=-1.0)
    W[:, j1:j2][M] = 0.0


def reference_thanos(
    W: torch.Tensor, H: torch.Tensor, pattern: str, blocksize: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1 / Alg. 8 with ``reference_block_update`` (fp32, damp 0.01, no dead columns)."""
    U = inverse_cholesky(H).U
    xnorm = masks.input_norms(H)
    W = W.clone()
    c, b = W.shape
    mask = torch.zeros(c, b, dtype=torch.bool)
    r = 0 if ":" in pattern else math.floor(exact(pattern) * c * b)
    for j1 in range(0, b, blocksize):
        j2 = min(j1 + blocksize, b)
        if ":" in pattern:
            n, m = map(int, pattern.split(":"))
            M = masks.n_of_m(W[:, j1:j2].abs() * xnorm[j1:j2], n, m)
        else:
            M = masks.smallest(W[:, j1:].abs() * xnorm[j1:], r)[:, : j2 - j1]
            r -= int(M.sum())
        reference_block_update(W, U, M, j1)
        mask[:, j1:j2] = M
    return W, mask


def outlier_layer(c: int, b: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``layer`` whose inputs have a few features 10-100x larger than the rest, as in LLM activations."""
    W, X, _ = layer(c, b, tokens)
    X[[3, b // 2, b - 5]] *= torch.tensor([[10.0], [40.0], [100.0]], dtype=torch.float64)
    return W, X, hessian_of(X)


@pytest.mark.parametrize("data", ["correlated", "outliers"])
@pytest.mark.parametrize(
    ("pattern", "blocksize"),
    [
        ("0.5", 128),
        ("0.5", 48),
        ("0.3", 32),
        ("0.7", 20),
        ("2:4", 256),
        ("4:8", 128),
        ("3:8", 64),
        ("1:4", 8),
    ],
)
@pytest.mark.parametrize("solver", ["default", "torch", "batched"])
def test_thanos_kernel_matches_the_reference_implementation(
    data: str, pattern: str, blocksize: int, solver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same masks and, to 1e-4, the same objective as the previous implementation of the block update;
    systems of 8 to 128 unknowns, both panel widths, complement systems and padding all occur. ``torch``:
    the CPU's torch solver (no C compiler); ``batched``: the GPU's, on the CPU; ``default``: the compiled
    one where it builds."""
    if solver == "torch":
        monkeypatch.setattr(thanos_kernel, "native_solver", lambda: None)
    if solver == "batched":
        monkeypatch.setenv("THANOS_BATCHED", "1")
    W, _, H = (outlier_layer if data == "outliers" else layer)(96, 256, 600)
    result = prune_layer(W, H, "thanos", pattern, blocksize=blocksize, alpha=0.0)
    expected, mask = reference_thanos(W, H, pattern, blocksize)
    assert torch.equal(result.mask, mask)
    objective = layer_objective(expected - W, H)
    assert result.stats.objective == pytest.approx(objective, rel=1e-4)
    torch.testing.assert_close(result.weight, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("s", [8, 24, 64, 80, 96])
def test_solve_panels_solves_every_system(s: int) -> None:
    """Rows' systems Z[idx][:, idx] x = rhs with Z = blockdiag(G, I); some rows end in identity padding."""
    g = torch.Generator().manual_seed(s)
    X = torch.randn(128, 300, generator=g, dtype=torch.float64)
    Z = torch.block_diag(X @ X.T / 300, torch.eye(s, dtype=torch.float64))
    real = torch.arange(s) < torch.randint(1, s + 1, (30, 1), generator=g)
    chosen = torch.stack([torch.randperm(128, generator=g)[:s] for _ in range(30)])
    idx = torch.where(real, chosen, 128 + torch.arange(s))
    rhs = torch.randn(30, s, generator=g, dtype=torch.float64) * real
    x = thanos_kernel.solve_panels(Z.float(), idx, rhs.float())
    expected = torch.linalg.solve(Z[idx.unsqueeze(2), idx.unsqueeze(1)], rhs.unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(x.double(), expected, rtol=1e-3, atol=1e-4)
    assert bool((x[~real] == 0).all()), "padding solves to exactly zero"


@pytest.mark.parametrize("s", [8, 24, 64, 80, 96])
def test_solve_batched_solves_every_system(s: int) -> None:
    """Rows' systems Z[q][:, q] x = rhs with q = idx[r, :size[r]] (the compiled solver's contract): every
    row's solution, exactly zero beyond its size whatever idx and rhs hold there."""
    g = torch.Generator().manual_seed(s)
    X = torch.randn(128, 300, generator=g, dtype=torch.float64)
    Z = X @ X.T / 300
    size = torch.randint(0, s + 1, (30,), generator=g)
    idx = torch.stack([torch.randperm(128, generator=g)[:s] for _ in range(30)])
    rhs = torch.randn(30, s, generator=g, dtype=torch.float64)
    x = thanos_kernel.solve_batched(Z.float(), idx, size, rhs.float())
    for r in range(30):
        q, n = idx[r, : size[r]], int(size[r])
        expected = torch.linalg.solve(Z[q][:, q], rhs[r, :n])
        torch.testing.assert_close(x[r, :n].double(), expected, rtol=1e-3, atol=1e-4)
        assert bool((x[r, n:] == 0).all()), "beyond a row's size the solution is exactly zero"


def test_torch_solvers_reject_indefinite_systems() -> None:
    Z = torch.eye(16)
    Z[3, 3] = -1.0
    idx = torch.arange(16).expand(4, -1)
    with pytest.raises(ValueError, match="positive definite.*damp"):
        thanos_kernel.solve_panels(Z, idx, torch.ones(4, 16))
    with pytest.raises(ValueError, match="positive definite.*damp"):
        thanos_kernel.solve_batched(Z, idx, torch.full((4,), 16), torch.ones(4, 16))


@pytest.mark.parametrize("shape", [(30, 50), (200, 300), (600, 700)])
@pytest.mark.parametrize("ties", [False, True])
def test_smallest_leading_is_the_leading_block_of_smallest(shape: tuple[int, int], ties: bool) -> None:
    """Small inputs take the exact path, larger ones (> 2^15 entries) the sampled bracket."""
    metric = torch.rand(*shape, generator=torch.Generator().manual_seed(1))
    if ties:
        metric = (metric * 20).floor()
    n = metric.numel()
    for k in [0, 1, n // 3, n // 2, n - 1, n]:
        expected = masks.smallest(metric, k)[:, :16]
        assert torch.equal(masks.smallest_leading(metric, k, 16), expected), k


@pytest.mark.parametrize("shape", [(30, 50), (600, 700)])
def test_a_gpus_selection_is_the_cpus(shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """``smallest_leading`` on a GPU's path (candidates sorted on the device) and on a CPU's (``kthvalue``,
    ties by host reads): equal masks with ties, on the exact path, the bracket and its misses (k = 1)."""
    metric = (torch.rand(*shape, generator=torch.Generator().manual_seed(2)) * 20).floor()
    n = metric.numel()
    for k in [1, 7, n // 3, n // 2, n - 1]:
        cpu = masks.smallest_leading(metric, k, 16)
        monkeypatch.setenv("THANOS_BATCHED", "1")
        assert torch.equal(masks.smallest_leading(metric, k, 16), cpu), k
        monkeypatch.delenv("THANOS_BATCHED")


@pytest.mark.parametrize("pattern", ["0.5", "2:4"])
def test_a_gpus_kernel_raises_on_indefinite_systems_after_the_last_block(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU's path the blocks' failures are checked once, after the last block: still an error."""
    monkeypatch.setenv("THANOS_BATCHED", "1")
    W, U = torch.randn(64, 64), torch.eye(64)
    U[5, 5] = 0.0  # H^-1 = U^T U is singular: R_hat of a row that removes column 5 is not definite
    with pytest.raises(ValueError, match="positive definite.*damp"):
        if pattern == "0.5":
            thanos_kernel.thanos_unstructured(W, U, torch.ones(64), 2048, 16, 1 << 30)
        else:
            thanos_kernel.thanos_nm(W, U, torch.ones(64), 2, 4, 16, 1 << 30)


def native_or_skip() -> thanos_kernel.RowSolver:
    solver = thanos_kernel.native_solver()
    if solver is None:
        pytest.skip("no C compiler: the compiled row solver is not built here")
    return solver


def test_native_solver_solves_every_system() -> None:
    """Rows of different sizes (0 to 70) in one call, G or K per row; zero beyond each row's size."""
    solver = native_or_skip()
    g = torch.Generator().manual_seed(0)
    X = torch.randn(160, 400, generator=g, dtype=torch.float64)
    Z = X @ X.T / 400
    size = torch.randint(0, 71, (40,), generator=g)
    size[:2] = torch.tensor([0, 70])
    idx = torch.stack([torch.randperm(160, generator=g)[:70] for _ in range(40)])
    rhs = torch.randn(40, 70, generator=g, dtype=torch.float64)
    x = solver(Z.float(), idx, size, rhs.float())
    for r in range(40):
        s = int(size[r])
        q = idx[r, :s]
        expected = torch.linalg.solve(Z[q][:, q], rhs[r, :s]) if s else torch.zeros(0, dtype=torch.float64)
        torch.testing.assert_close(x[r, :s].double(), expected, rtol=1e-3, atol=1e-4)
        assert bool((x[r, s:] == 0).all())


def test_native_solver_rejects_indefinite_systems() -> None:
    solver = native_or_skip()
    Z = torch.eye(16)
    Z[3, 3] = -1.0
    idx = torch.arange(16).expand(4, -1)
    with pytest.raises(ValueError, match="positive definite.*damp"):
        solver(Z, idx, torch.full((4,), 16), torch.ones(4, 16))


@pytest.mark.parametrize("data", ["correlated", "outliers"])
@pytest.mark.parametrize(("pattern", "blocksize"), [("0.5", 128), ("0.6", 32), ("2:4", 256), ("4:8", 128)])
def test_native_and_torch_solvers_agree(
    data: str, pattern: str, blocksize: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled, the CPU's torch and the GPU's batched solver: equal masks, objectives within 1e-6."""
    native_or_skip()
    W, _, H = (outlier_layer if data == "outliers" else layer)(200, 512, 1200)
    native = prune_layer(W, H, "thanos", pattern, blocksize=blocksize)
    monkeypatch.setattr(thanos_kernel, "native_solver", lambda: None)
    torch_path = prune_layer(W, H, "thanos", pattern, blocksize=blocksize)
    monkeypatch.setenv("THANOS_BATCHED", "1")
    batched = prune_layer(W, H, "thanos", pattern, blocksize=blocksize)
    for other in (torch_path, batched):
        assert torch.equal(native.mask, other.mask)
        assert native.stats.objective == pytest.approx(other.stats.objective, rel=1e-6)


def test_native_solver_is_built_once_and_falls_back_without_a_compiler(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    native_or_skip()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert thanos_kernel.native_solver.__wrapped__() is not None
    assert len(list((tmp_path / "thanos-prune").glob("solve_rows-*.so"))) == 1
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert thanos_kernel.native_solver.__wrapped__() is None
    monkeypatch.setenv("THANOS_NATIVE", "0")
    monkeypatch.delenv("CC")
    assert thanos_kernel.native_solver.__wrapped__() is None


def test_native_solver_source_compiles_cleanly(tmp_path) -> None:
    """The row solver is a C file shipped in the package; it builds without a warning as C11."""
    native_or_skip()
    source = thanos_kernel.NATIVE_SOURCE
    assert source.is_file(), source
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", *thanos_kernel.NATIVE_FLAGS]
    proc = subprocess.run(
        [compiler, *flags, str(source), "-o", str(tmp_path / "solve_rows.so"), "-lm"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
