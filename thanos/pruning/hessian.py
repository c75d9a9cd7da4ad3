"""The layer Hessian H = (2/N) sum_l X_l X_l^T and its damped inverse factor.

``HessianAccumulator`` streams calibration inputs (one or more sequences at a time) into an fp32 H;
``inverse_cholesky`` returns the upper Cholesky factor U of H^-1 (H^-1 = U^T U) that SparseGPT and Thanos use.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch


class HessianAccumulator:
    """Streaming H = (2/N) sum_l X_l X_l^T in fp32, N counting calibration sequences.

    ``add(x)`` takes one sequence's inputs as ``(tokens, b)`` or a batch as ``(batch, tokens, b)`` (each
    batch entry is one sequence). Internally the running sum S = sum X X^T is kept, so merging two
    partial accumulators (``merge``) is exact: the result equals accumulating all inputs in one.
    """

    def __init__(self, columns: int, device: torch.device | str = "cpu") -> None:
        if isinstance(columns, bool) or not isinstance(columns, numbers.Integral) or columns <= 0:
            raise ValueError(
                f"columns must be a positive integer (the layer's input features), got {columns!r}"
            )
        self.columns = columns
        self.sum = torch.zeros(columns, columns, dtype=torch.float32, device=device)
        self.nsamples = 0

    def add(self, x: torch.Tensor) -> None:
        """Add one sequence ``(tokens, b)`` or a batch ``(batch, tokens, b)``: no gradient is kept (an input
        that requires one, such as a forward hook's outside ``torch.no_grad``, is detached)."""
        if self.sum.numel() == 0:
            raise ValueError("this accumulator was taken (take() spends it): start a new HessianAccumulator")
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"inputs must be a torch.Tensor, got {type(x).__name__}")
        if x.is_meta:
            raise ValueError("inputs are on device 'meta' (shapes without data): give the real activations")
        if not x.is_floating_point():
            raise ValueError(f"inputs must be a real floating-point tensor, got {x.dtype}")
        if x.dim() == 2:
            x = x.unsqueeze(0)
        if x.dim() != 3 or x.shape[-1] != self.columns:
            raise ValueError(
                f"inputs must be (tokens, {self.columns}) or (batch, tokens, {self.columns}), "
                f"got {tuple(x.shape)}"
            )
        flat = x.detach().reshape(-1, self.columns).to(device=self.sum.device, dtype=torch.float32)
        self.sum.addmm_(flat.T, flat)
        self.nsamples += x.shape[0]

    def merge(self, other: HessianAccumulator) -> HessianAccumulator:
        if other.columns != self.columns:
            raise ValueError(f"cannot merge accumulators of {self.columns} and {other.columns} columns")
        self.sum += other.sum.to(self.sum.device)
        self.nsamples += other.nsamples
        return self

    @property
    def H(self) -> torch.Tensor:
        """H = (2/N) sum X X^T (fp32). Raises if nothing was added."""
        if self.nsamples == 0:
            raise ValueError("no calibration inputs were added to the Hessian accumulator")
        return self.sum * (2.0 / self.nsamples)

    def take(self) -> torch.Tensor:
        """H, the same values as ``H``, computed in place in the running sum (no second b x b buffer).
        The accumulator is spent: it holds nothing afterwards."""
        H = self.H if self.nsamples == 0 else self.sum.mul_(2.0 / self.nsamples)
        self.sum = torch.empty(0, 0, dtype=torch.float32, device=H.device)
        self.nsamples = 0
        return H


@dataclass
class InverseFactor:
    """Upper Cholesky factor U of the damped inverse Hessian, H^-1 = U^T U."""

    U: torch.Tensor
    damp: float  # the damping actually added to the diagonal
    retries: int  # how many times damping had to be increased
    dead: torch.Tensor  # bool (b,): columns with H_jj = 0


def inverse_cholesky(
    H: torch.Tensor, damp: float = 0.01, max_retries: int = 6, name: str | None = None
) -> InverseFactor:
    """U with (H + lambda I)^-1 = U^T U, lambda = damp * mean(diag H) (SparseGPT's percdamp).

    Dead columns (H_jj = 0) get H_jj = 1 first, as SparseGPT does; the caller zeroes W[:, dead].
    If the Cholesky factorisation fails, lambda is multiplied by 10 (at least 1e-6 mean |diag H|), up to
    ``max_retries`` times.

    Memory: one b x b fp32 buffer besides ``H`` (left unchanged). The three factorisation steps (Cholesky
    of H + lambda I, its inverse, the Cholesky of that inverse) run in place in that buffer, through its
    column-major view so that LAPACK needs no copy of its own, and a tiled in-place transpose makes U
    row-major: the values are those of the out-of-place calls (``torch.linalg.cholesky_ex``,
    ``torch.cholesky_inverse``, ``torch.linalg.cholesky_ex(upper=True)``), bit for bit.

    Note: for U upper triangular, inv(H[i:, i:]) = U[i:, i:]^T U[i:, i:], so one factorisation serves
    every block of SparseGPT and Thanos (Alg. 1 as printed re-inverts the remaining columns' Hessian for
    every block instead).
    """
    work = torch.empty(H.shape, dtype=torch.float32, device=H.device)
    col = work.mT  # column-major view of the buffer: LAPACK's layout, factorised without a copy
    col.copy_(H)  # col = H exactly (a computed H need not be symmetric to the last bit)
    info = torch.empty((), dtype=torch.int32, device=work.device)
    diag = torch.diagonal(work)
    dead = diag == 0
    diag[dead] = 1.0
    lam = damp * float(diag.mean())
    added = 0.0  # damping currently on the diagonal; added in place (no b x b identity at 70B scale)
    for attempt in range(max_retries + 1):
        diag += lam - added
        added = lam
        damped = diag.clone()  # to restore the buffer if a factorisation fails
        torch.linalg.cholesky_ex(col, out=(col, info))  # lower L of H + lambda I
        if int(info) == 0:
            torch.cholesky_inverse(col, out=col)  # (H + lambda I)^-1 = (L L^T)^-1
            torch.linalg.cholesky_ex(col, upper=True, out=(col, info))  # col = U, work = U^T
            if int(info) == 0 and all_finite(work):
                _transpose_(work)
                return InverseFactor(U=work, damp=lam, retries=attempt, dead=dead)
        col.copy_(H)
        diag.copy_(damped)
        lam = max(lam * 10.0, 1e-6 * float(diag.abs().mean()), 1e-8)
    where = f" for layer {name}" if name else ""
    raise ValueError(
        f"Cholesky factorisation of the Hessian failed{where} even with damping {added:.3g} "
        f"({max_retries} retries): the Hessian is not positive definite. Check the calibration inputs "
        "for NaN/Inf or increase `damp`."
    )


def all_finite(A: torch.Tensor, chunk: int = 1 << 20) -> bool:
    """No NaN/Inf in the matrix ``A``, checked about ``chunk`` values at a time (no mask of A's size)."""
    rows = max(1, chunk // max(1, A.shape[1]))
    return all(bool(torch.isfinite(A[i : i + rows]).all()) for i in range(0, A.shape[0], rows))


def _transpose_(A: torch.Tensor, tile: int = 1024) -> None:
    """Transpose the square matrix ``A`` in place, one pair of ``tile`` x ``tile`` blocks at a time."""
    n = A.shape[0]
    for i in range(0, n, tile):
        rows = slice(i, i + tile)
        A[rows, rows] = A[rows, rows].T.clone()
        for j in range(i + tile, n, tile):
            cols = slice(j, j + tile)
            upper = A[rows, cols].clone()
            A[rows, cols] = A[cols, rows].T
            A[cols, rows] = upper.T
