"""OWL: per-block sparsities from the blocks' outlier ratios (pure functions of tensors and numbers).

Outlier Weighed Layerwise sparsity (Yin et al., "Outlier Weighed Layerwise Sparsity (OWL): A Missing
Secret Sauce for Pruning LLMs to High Sparsity", ICML 2024, arXiv:2310.05175) gives a block with more
activation outliers a lower sparsity and the others a higher one, at the same overall sparsity.

- The outlier score of a weight is Wanda's metric A_ij = |W_ij| * ||X_j||_2 (the paper's score, from
  Wanda), X the dense model's inputs of the layer over all calibration tokens.
- The block's Layerwise Outlier Distribution (LOD) value is D_l = #{A_ij > M * mean(A)} / #A, the score
  and its mean taken over all linear layers of block l together (the authors' code, and
  llm-compressor's ``_infer_owl_layer_sparsity``, concatenate the block's scores before thresholding).
- The paper's rule S_l = 1 - D_l, restricted to a span of lambda around the target S: the authors' code
  (which llm-compressor copies) maps D linearly onto [0, 2 lambda] (min -> 0, max -> 2 lambda) and sets
  S_l = S - (r_l - mean(r)); the mean is over blocks. We take the parameter-weighted mean, so that
  sum_l S_l n_l = S sum_l n_l exactly; for blocks of equal size (every uniform decoder) it is the plain
  mean, the same numbers.
- ``block_counts`` turns the S_l into integer weight counts per block whose sum is exactly floor(S N):
  the pipeline prunes block l at the rational sparsity k_l / n_l, so each layer removes
  floor(k_l / n_l * c * b) weights (Alg. 1, line 2 of the Thanos paper) and the model's parameter-weighted
  sparsity is S within one weight per layer (the methods that count per row or per column block, Wanda
  and SparseGPT, round as they do at uniform sparsity: within one weight per row or per column block).

||X_j||_2 is read from the Hessian H = (2/N) sum X X^T that capture stores: ||X_j||_2^2 = N H_jj / 2.
The factor N/2 is one number for every layer of a block (the same calibration sequences), so it cancels
in "above M times the mean": the dense chain's Hessians give D_l without another pass over the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: the defaults are read where the config is parsed
DEFAULT_M = 5.0
DEFAULT_LAMBDA = 0.08


@dataclass(frozen=True)
class BlockOutliers:
    """One block's LOD: ``outliers`` of ``entries`` Wanda scores above ``threshold`` = M * mean."""

    outliers: int
    entries: int
    threshold: float

    @property
    def ratio(self) -> float:
        return self.outliers / self.entries


def wanda_scores(weight: torch.Tensor, xnorm: torch.Tensor) -> torch.Tensor:
    """A_ij = |W_ij| * ||X_j|| in fp32 (any common factor of ``xnorm`` is harmless, see above)."""
    import torch

    return weight.detach().to(torch.float32).abs() * xnorm.to(torch.float32).reshape(1, -1)


def block_outliers(layers: Iterable[tuple[torch.Tensor, torch.Tensor]] | Sequence, m: float) -> BlockOutliers:
    """D_l of one block from its layers' ``(weight, xnorm)`` pairs: the mean of all the block's scores,
    then the count of scores above ``m`` times it. ``layers`` is iterated twice when it is a sequence of
    callables returning the pair (``lambda: (W, xnorm)``), so that one layer's scores are in memory at a
    time; with pairs, they are all kept."""
    import torch

    items = list(layers)

    def pair(item):
        return item() if callable(item) else item

    total = 0.0
    entries = 0
    for item in items:
        scores = wanda_scores(*pair(item))
        total += float(scores.sum(dtype=torch.float64))
        entries += scores.numel()
        del scores
    if entries == 0:
        raise ValueError("owl: a block without linear layers has no outlier ratio")
    threshold = m * total / entries
    outliers = 0
    for item in items:
        outliers += int((wanda_scores(*pair(item)) > threshold).sum())
    return BlockOutliers(outliers, entries, threshold)


def block_sparsities(
    ratios: Sequence[float], target: float | Fraction, lam: float, sizes: Sequence[int] | None = None
) -> list[float]:
    """S_l for the blocks' outlier ratios D_l: r = (D - min D) / (max D - min D) * 2 lambda, then
    S_l = S - (r_l - mean(r)), the mean weighted by the blocks' sizes ``sizes`` (None: equal). All blocks
    get S when the ratios are all equal. Raises when an S_l leaves [0, 1)."""
    if not ratios:
        raise ValueError("owl: no blocks")
    if not lam > 0:
        raise ValueError(f"owl_lambda: must be > 0, got {lam}")
    sizes = [1] * len(ratios) if sizes is None else list(sizes)
    if len(sizes) != len(ratios):
        raise ValueError(f"owl: {len(ratios)} ratios but {len(sizes)} block sizes")
    lo, hi = min(ratios), max(ratios)
    s = float(target)
    if hi == lo:
        return [s] * len(ratios)
    r = [(d - lo) * (1 / (hi - lo) * lam * 2) for d in ratios]
    mean = sum(x * n for x, n in zip(r, sizes, strict=True)) / sum(sizes)
    sparsities = [s - (x - mean) for x in r]
    bad = [(i, v) for i, v in enumerate(sparsities) if not 0 <= v < 1]
    if bad:
        block, value = bad[0]
        raise ValueError(
            f"owl: block {block} would get sparsity {value:.4f}, outside [0, 1), for target {s} and "
            f"owl_lambda {lam}; lower owl_lambda or the target sparsity"
        )
    return sparsities


def block_counts(sparsities: Sequence[float], sizes: Sequence[int], target: Fraction) -> list[int]:
    """Integer weights k_l to remove per block, sum exactly floor(target * sum(sizes)): floor(S_l n_l),
    then one more weight for the blocks with the largest remainders (largest-remainder rounding)."""
    total = math.floor(Fraction(target) * sum(sizes))
    exact = [Fraction(s) * n for s, n in zip(sparsities, sizes, strict=True)]
    counts = [math.floor(x) for x in exact]
    missing = total - sum(counts)
    order = sorted(range(len(counts)), key=lambda i: (-(exact[i] - counts[i]), i))
    step = 1 if missing >= 0 else -1
    for i in order[: abs(missing)] if missing >= 0 else order[::-1][: abs(missing)]:
        counts[i] += step
    for k, n in zip(counts, sizes, strict=True):
        if not 0 <= k < n:
            raise ValueError(f"owl: a block of {n} weights cannot lose {k}")
    return counts
