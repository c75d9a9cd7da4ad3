"""The layer Hessian H = (2/N) sum_l X_l X_l^T and its damped inverse factor.

``HessianAccumulator`` streams calibration inputs (one or more sequences at a time) into an fp32 H;
``inverse_cholesky`` returns the upper Cholesky factor U of H^-1 (H^-1 = U^T U) that SparseGPT and Thanos use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class HessianAccumulator:
    """Streaming H = (2/N) sum_l X_l X_l^T in fp32, N counting calibration sequences.

    ``add(x)`` takes one sequence's inputs as ``(tokens, b)`` or a batch as ``(batch, tokens, b)`` (each
    batch entry is one sequence). Internally the running sum S = sum X X^T is kept, so merging two
    partial accumulators (``merge``) is exact: the result equals accumulating all inputs in one.
    """

    def __init__(self, columns: int, device: torch.device | str = "cpu") -> None:
        if columns <= 0:
            raise ValueError(f"columns must be positive, got {columns}")
        self.columns = columns
        self.sum = torch.zeros(columns, columns, dtype=torch.float32, device=device)
        self.nsamples = 0

    def add(self, x: torch.Tensor) -> None:
        if x.dim() == 2:
            x = x.unsqueeze(0)
        if x.dim() != 3 or x.shape[-1] != self.columns:
            raise ValueError(
                f"inputs must be (tokens, {self.columns}) or (batch, tokens, {self.columns}), "
                f"got {tuple(x.shape)}"
            )
        flat = x.reshape(-1, self.columns).to(device=self.sum.device, dtype=torch.float32)
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

    Note: for U upper triangular, inv(H[i:, i:]) = U[i:, i:]^T U[i:, i:], so one factorisation serves
    every block of SparseGPT and Thanos (no inverse of H[i:, i:] recomputed for every block).
    """
    H = H.to(torch.float32).clone()
    diag = torch.diagonal(H)
    dead = diag == 0
    diag[dead] = 1.0
    lam = damp * float(diag.mean())
    added = 0.0  # damping currently on the diagonal; added in place (no b x b identity at 70B scale)
    for attempt in range(max_retries + 1):
        diag += lam - added
        added = lam
        L, info = torch.linalg.cholesky_ex(H)
        if int(info) == 0:
            Hinv = torch.cholesky_inverse(L)
            del L
            U, info = torch.linalg.cholesky_ex(Hinv, upper=True)
            if int(info) == 0 and bool(torch.isfinite(U).all()):
                return InverseFactor(U=U, damp=lam, retries=attempt, dead=dead)
        lam = max(lam * 10.0, 1e-6 * float(diag.abs().mean()), 1e-8)
    where = f" for layer {name}" if name else ""
    raise ValueError(
        f"Cholesky factorisation of the Hessian failed{where} even with damping {added:.3g} "
        f"({max_retries} retries): the Hessian is not positive definite. Check the calibration inputs "
        "for NaN/Inf or increase `damp`."
    )
