"""Magnitude pruning (paper Section 3.1, appendix Alg. 4): remove the smallest |W_ij|, no update."""

from __future__ import annotations

import torch

from thanos.pruning.algorithms import masks


def magnitude_unstructured(W: torch.Tensor, k: int) -> torch.Tensor:
    """Mask of the ``k`` = floor(p c b) weights with the smallest |W_ij| over the whole layer."""
    return masks.smallest(W.abs(), k)


def magnitude_nm(W: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Mask of the ``n`` smallest |W_ij| in every group of ``m`` consecutive inputs."""
    return masks.n_of_m(W.abs(), n, m)


def magnitude_structured(W: torch.Tensor, s: int) -> torch.Tensor:
    """Mask of the ``s`` columns with the smallest mean |W_ij|."""
    return masks.columns(W.abs().mean(dim=0), s, W.shape[0])
