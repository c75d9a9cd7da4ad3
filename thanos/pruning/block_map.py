"""A run of removed blocks replaced by one linear map (pure functions of tensors).

ReplaceMe (Shopkhoev et al., "ReplaceMe: Network Simplification via Depth Pruning and Transformer Block
Linearization", NeurIPS 2025, arXiv:2505.02819) removes the blocks p+1 .. e and replaces them by a
linear map T (d x d, d the hidden size) applied to the MLP output of the kept block p, fitted on
calibration activations. With row vectors per token:

- M: the MLP output of block p (what its output projection adds to the residual stream),
- Y: the rest of block p's output (its input plus the attention output), so that block p writes Y + M,
- X_e: the output of block e (the input of block e + 1, or of the final norm), the target,

T minimises the least-squares objective (ReplaceMe's Eq. 3, its L2 variant)

    T* = argmin_T || M T + Y - X_e ||_F^2 = (M^T M)^-1 M^T (X_e - Y),

so that the shortened model's block p writes Y + M T where the dense model had X_e. The map adds no
parameter: with the output projection M = A W^T + b (W: d x width, A: the neurons' activations),
M T = A (T^T W)^T + b T, so W <- T^T W and b <- T^T b (``fold``).

The map only mixes the d outputs of the projection. The projection itself is then refitted from the
neurons' activations A (tokens x width; a column of ones appended where it has a bias), by the same
least squares with a ridge toward the map's weight W_T = T^T W (ridge regression, as Thanos and SparseGPT
dampen their Hessians):

    W'* = argmin_W' || A W'^T + Y - X_e ||_F^2 + lambda || W' - W_T ||_F^2,
    W'*^T = (A^T A + lambda I)^-1 (A^T (X_e - Y) + lambda W_T^T),   lambda = damp * mean(diag A^T A),

the same shape as W, so the written model is still the same architecture with no parameter added; with
damp -> infinity it is the map's weight, and the map's weights are among the candidates the fit chooses
from. It is fitted on the same tokens as the map, in the same pass.

The normal equations are accumulated over the calibration tokens in float64 (``MapFit``, for the map's
d features M and for the projection's width features A), one batch at a time, and solved once; a fit's
relative error ||F S + Y - X_e||^2 / ||X_e||^2 (F the features, S the solution) comes from the same sums
(``MapFit.error``), which is how candidate runs are compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class MapFit:
    """The sums of a fit's normal equations over the tokens seen, for features F (tokens x ``features``:
    the MLP output M for the map, default ``hidden`` wide; the neurons' activations A for the projection):
    A = F^T F, B = F^T R (R = X_e - Y), ||R||^2 and ||X_e||^2, in float64 on ``device`` (where the
    activations are)."""

    hidden: int
    device: torch.device | str = "cpu"
    features: int = 0  # 0: hidden
    A: torch.Tensor = field(init=False)
    B: torch.Tensor = field(init=False)
    rr: float = 0.0
    xx: float = 0.0
    tokens: int = 0

    def __post_init__(self) -> None:
        self.features = self.features or self.hidden
        self.A = torch.zeros(self.features, self.features, dtype=torch.float64, device=self.device)
        self.B = torch.zeros(self.features, self.hidden, dtype=torch.float64, device=self.device)

    def add(self, F: torch.Tensor, Y: torch.Tensor, X: torch.Tensor, gram: bool = True) -> None:
        """Add tokens (the leading dimensions flattened): the features ``F`` (block p's MLP output M, or
        the neurons' activations), the rest of block p's output ``Y`` and the run's output ``X``; ``gram``
        false: F^T F not added (the caller adds the sum it kept from the same features)."""
        F, R = F.reshape(-1, self.features).double(), (X - Y).reshape(-1, self.hidden).double()
        if gram:
            self.A += F.T @ F
        self.B += F.T @ R
        self.rr += float(R.square().sum())
        self.xx += float(X.double().square().sum())
        self.tokens += F.shape[0]

    def solve(self) -> torch.Tensor:
        """T* (float32, features x d): the least-squares optimum; with F^T F singular (fewer tokens than
        features, or dead channels), the minimum-norm one."""
        self._check()
        try:
            L = torch.linalg.cholesky(self.A)
            return torch.cholesky_solve(self.B, L).float()
        except torch.linalg.LinAlgError:
            return torch.linalg.lstsq(self.A, self.B, driver="gelsd").solution.float()

    def solve_where_determined(self, S0: torch.Tensor, damp: float) -> torch.Tensor:
        """``solve`` where the tokens seen determine the solution (at least as many as the features), else
        ``solve_toward(S0, damp)``: with fewer tokens than features, F^T F is singular, and its least-squares
        solutions (the minimum-norm one, or a Cholesky factor that rounding let through) map the features
        the tokens never spanned anywhere; the ridge keeps them at ``S0`` (for a map: the identity, the
        blocks left out) and fits the rest. SmolLM2-135M, ``depth:2`` on 4 windows of 128 tokens (512 tokens,
        576 features): perplexity 5,132 with the least-squares map, 30.3 without a map."""
        return self.solve() if self.tokens >= self.features else self.solve_toward(S0, damp)

    def solve_toward(self, S0: torch.Tensor, damp: float) -> torch.Tensor:
        """The ridge optimum (float32, features x d) pulled toward ``S0``:
        (A + lambda I)^-1 (B + lambda S0), lambda = ``damp`` * mean(diag A)."""
        self._check()
        diagonal = self.A.diagonal()
        lam = damp * float(diagonal.mean())
        if lam <= 0:
            return self.solve()
        # A + lambda I factored in A's own memory, then A's diagonal restored bit for bit: at 70B's MLP
        # width (28,672) a features-square float64 matrix is 6.6 GB, and the factor is the only other one
        kept = diagonal.clone()
        diagonal.add_(lam)
        try:
            L = torch.linalg.cholesky(self.A)
        finally:
            diagonal.copy_(kept)
        rhs = S0.to(self.A.device, torch.float64, copy=True).mul_(lam).add_(self.B)  # B + lambda S0
        return torch.cholesky_solve(rhs, L).float()

    def _check(self) -> None:
        if self.tokens == 0:
            raise ValueError("no token was added: the map cannot be fitted")

    def error(self, T: torch.Tensor) -> float:
        """||F T + Y - X_e||^2 / ||X_e||^2 over the tokens seen:
        (||R||^2 - 2 tr(T^T B) + tr(T^T A T)) / ||X_e||^2."""
        T = T.to(self.A.device, torch.float64)
        squared = self.rr - 2 * float((T * self.B).sum()) + float((T * (self.A @ T)).sum())
        return max(squared, 0.0) / self.xx if self.xx > 0 else 0.0

    def identity_error(self) -> float:
        """The relative error with no map (T = I: the blocks simply left out)."""
        return self.error(torch.eye(self.hidden, device=self.A.device))


def fold(
    W: torch.Tensor, T: torch.Tensor, b: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The output projection's weight ``W`` (d x width) and bias ``b`` (d) with the map ``T`` folded in:
    T^T W and T^T b, in float32 (the caller casts to the checkpoint's dtype)."""
    T = T.float()
    return T.T @ W.float(), None if b is None else T.T @ b.float()
