"""Wanda (Sun et al. 2023; paper Section 3.4): metric |W_ij| ||X_j||, compared per output row, no update."""

from __future__ import annotations

import torch

from thanos.pruning.algorithms import masks


def wanda_metric(W: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """S_ij = |W_ij| ||X_j|| (eq. (11)), with ||X_j|| taken from diag(H)."""
    return W.abs() * masks.input_norms(H).unsqueeze(0)


def wanda_unstructured(W: torch.Tensor, H: torch.Tensor, per_row: int) -> torch.Tensor:
    """Mask of the ``per_row`` = floor(p b) smallest scores in every row."""
    return masks.smallest_per_row(wanda_metric(W, H), per_row)


def wanda_nm(W: torch.Tensor, H: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Mask of the ``n`` smallest scores in every group of ``m`` consecutive inputs."""
    return masks.n_of_m(wanda_metric(W, H), n, m)


def wanda_structured(W: torch.Tensor, H: torch.Tensor, s: int) -> torch.Tensor:
    """Mask of the ``s`` columns with the smallest mean score."""
    return masks.columns(wanda_metric(W, H).mean(dim=0), s, W.shape[0])
