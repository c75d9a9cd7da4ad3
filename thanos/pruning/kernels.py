"""The one call signature of every pruning kernel, and the built-in methods' kernels in that form.

``prune_layer`` hands each kernel a ``Problem`` (the rows of W to prune, the outlier rows already set
aside) and gets ``(W, mask)`` back; ``thanos.pruning.methods`` says which kernel serves which (method, pattern
kind). The functions below adapt the algorithm modules (``thanos.pruning.algorithms.*``), whose own signatures
stay those of the paper's algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch

from thanos.pruning.algorithms import magnitude, masks, sparsegpt, thanos_blockwise, wanda
from thanos.pruning.sparsity import Sparsity, head_count, neuron_count, structured_count, unstructured_count


@dataclass(frozen=True)
class Problem:
    """One layer's pruning problem as a kernel receives it, in fp32.

    ``W`` (c, b): the rows to prune (the kernel may change it in place); ``H`` (b, b) or None;
    ``U``: the upper Cholesky factor of the damped H^-1 (H^-1 = U^T U) for methods that update weights,
    else None; ``blocksize``: B, at most b, or None; ``alpha``: the outlier-row fraction (those rows are
    already removed from ``W``, but structured sparsity counts its columns with it).
    """

    W: torch.Tensor
    H: torch.Tensor | None
    U: torch.Tensor | None
    pattern: Sparsity
    blocksize: int | None
    alpha: Fraction
    row_batch_bytes: int
    heads: tuple[int, int] | None = None  # heads and kv_heads: (query heads, key/value groups) of the layer

    def head_columns(self, score: torch.Tensor) -> torch.Tensor:
        """Bool (b,): the columns of the heads ``heads:p``/``kv_heads:p`` removes, by ``score`` (b,)
        summed per head (``head_count``: how many, per key/value group or whole groups)."""
        if self.heads is None:
            raise ValueError(f"{self.pattern} needs the layer's (query heads, key/value groups)")
        heads, kv_heads = self.heads
        r, whole = head_count(self.pattern, heads, kv_heads)
        return masks.head_columns(score, heads, kv_heads, r, whole)

    @property
    def k(self) -> int:
        """Unstructured: floor(p c b) weights to remove from these rows (Alg. 1, line 2)."""
        c, b = self.W.shape
        return unstructured_count(self.pattern.p, c, b)

    @property
    def k_per_row(self) -> int:
        """Unstructured, compared per row (Wanda): floor(p b) weights of each row."""
        return unstructured_count(self.pattern.p, 1, self.W.shape[1])

    @property
    def s(self) -> int:
        """Structured: s = ceil(p b / (1 - alpha)) columns to remove (Alg. 2, line 2); neurons: the columns
        that leave the kept width nearest b (1 - p) that is a multiple of the pattern's (``neuron_count``)."""
        if self.pattern.kind == "neurons":
            return neuron_count(self.pattern.p, self.W.shape[1], self.pattern.multiple)
        return structured_count(self.pattern.p, self.alpha, self.W.shape[1])


Result = tuple[torch.Tensor, torch.Tensor]


def magnitude_unstructured(problem: Problem) -> Result:
    return problem.W, magnitude.magnitude_unstructured(problem.W, problem.k)


def magnitude_nm(problem: Problem) -> Result:
    return problem.W, magnitude.magnitude_nm(problem.W, problem.pattern.n, problem.pattern.m)


def magnitude_structured(problem: Problem) -> Result:
    return problem.W, magnitude.magnitude_structured(problem.W, problem.s)


def wanda_unstructured(problem: Problem) -> Result:
    return problem.W, wanda.wanda_unstructured(problem.W, problem.H, problem.k_per_row)


def wanda_nm(problem: Problem) -> Result:
    return problem.W, wanda.wanda_nm(problem.W, problem.H, problem.pattern.n, problem.pattern.m)


def wanda_structured(problem: Problem) -> Result:
    return problem.W, wanda.wanda_structured(problem.W, problem.H, problem.s)


def sparsegpt_unstructured(problem: Problem) -> Result:
    return sparsegpt.sparsegpt(problem.W, problem.U, problem.blocksize, p=problem.pattern.p)


def sparsegpt_nm(problem: Problem) -> Result:
    n, m = problem.pattern.n, problem.pattern.m
    return sparsegpt.sparsegpt(problem.W, problem.U, problem.blocksize, n=n, m=m)


def sparsegpt_structured(problem: Problem) -> Result:
    columns = sparsegpt.structured_columns(problem.W, problem.U, problem.s)
    return sparsegpt.sparsegpt(problem.W, problem.U, problem.blocksize, column_mask=columns)


def thanos_unstructured(problem: Problem) -> Result:
    xnorm = masks.input_norms(problem.H)
    return thanos_blockwise.thanos_unstructured(
        problem.W, problem.U, xnorm, problem.k, problem.blocksize, problem.row_batch_bytes
    )


def thanos_nm(problem: Problem) -> Result:
    xnorm = masks.input_norms(problem.H)
    n, m = problem.pattern.n, problem.pattern.m
    return thanos_blockwise.thanos_nm(
        problem.W, problem.U, xnorm, n, m, problem.blocksize, problem.row_batch_bytes
    )


def thanos_structured(problem: Problem) -> Result:
    xnorm = masks.input_norms(problem.H)
    return thanos_blockwise.thanos_structured(problem.W, problem.U, xnorm, problem.s)


# heads and kv_heads: whole heads, a head's columns ranked by its summed column metric; the methods that
# update weights apply their structured update to all of the chosen columns


def magnitude_heads(problem: Problem) -> Result:
    return problem.W, _columns_mask(problem, problem.head_columns(problem.W.abs().mean(dim=0)))


def wanda_heads(problem: Problem) -> Result:
    score = wanda.wanda_metric(problem.W, problem.H).mean(dim=0)
    return problem.W, _columns_mask(problem, problem.head_columns(score))


def sparsegpt_heads(problem: Problem) -> Result:
    score = (problem.W**2).sum(dim=0) / torch.diagonal(problem.U) ** 2  # OBS error of each column
    columns = problem.head_columns(score)
    return sparsegpt.sparsegpt(problem.W, problem.U, problem.blocksize, column_mask=columns)


def thanos_heads(problem: Problem) -> Result:
    metric = thanos_blockwise.structured_metric(problem.W, masks.input_norms(problem.H))
    return thanos_blockwise.remove_columns(problem.W, problem.U, problem.head_columns(metric))


def _columns_mask(problem: Problem, columns: torch.Tensor) -> torch.Tensor:
    return columns.unsqueeze(0).expand(problem.W.shape[0], -1).clone()
