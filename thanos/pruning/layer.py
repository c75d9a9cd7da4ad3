"""``prune_layer``: one entry point for every method and sparsity pattern.

It validates arguments, prepares H (dead columns, damping, Cholesky of the inverse), sets the outlier rows
aside, calls the method's kernel in fp32 and returns the weight in its original dtype with stats. What
each method needs, its defaults and its kernels come from ``thanos.pruning.methods``.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import torch

from thanos.pruning import methods
from thanos.pruning.algorithms import masks
from thanos.pruning.factors import inverse_factor
from thanos.pruning.hessian import all_finite
from thanos.pruning.kernels import Problem
from thanos.pruning.sparsity import (
    COMPACT_KINDS,
    Sparsity,
    check_alpha,
    exact,
    head_count,
    outlier_count,
    parse_sparsity,
    structured_count,
)

METHODS = methods.names()
DEFAULT_ROW_BATCH_BYTES = 1 << 30


@dataclass
class PruneStats:
    method: str
    sparsity: str
    achieved_sparsity: float  # removed weights / all weights of the layer
    objective: float | None  # tr(dW H dW^T) / 2 = mean over samples of ||dW X||^2 (None without H)
    seconds: float  # pruning only (the objective is computed afterwards)
    device: str
    outlier_rows: int
    blocksize: int | None
    alpha: float
    damp: float | None  # damping actually used (after retries)
    damp_retries: int
    dead_columns: int
    shape: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PruneResult:
    weight: torch.Tensor  # pruned weight, same dtype and device as the input
    mask: torch.Tensor  # bool, True where a weight was removed
    stats: PruneStats
    options: dict[str, Any] = field(default_factory=dict)
    # neurons, heads, kv_heads: the removed columns (sorted indices) the kernel chose
    columns: torch.Tensor | None = None


def layer_objective(dW: torch.Tensor, H: torch.Tensor, row_batch: int = 4096) -> float:
    """tr(dW H dW^T) / 2 = (1/N) sum_l ||dW X_l||^2 for H = (2/N) sum_l X_l X_l^T (eq. (1))."""
    if dW.dim() != 2 or H.shape != (dW.shape[1], dW.shape[1]):
        raise ValueError(
            f"layer_objective: dW {tuple(dW.shape)} and H {tuple(H.shape)} are not (c, b) and (b, b)"
        )
    H = H.to(device=dW.device, dtype=torch.float32)  # fp32 whatever the weight's dtype
    total = 0.0
    for start in range(0, dW.shape[0], row_batch):
        rows = dW[start : start + row_batch].to(torch.float32)
        total += float(((rows @ H) * rows).sum(dtype=torch.float64))
    return total / 2


def _objective(pruned: torch.Tensor, weight: torch.Tensor, H: torch.Tensor, row_batch: int = 4096) -> float:
    """``layer_objective`` of dW = pruned - weight, dW formed ``row_batch`` rows at a time in fp32 (the
    same row batches, hence the same value, as ``layer_objective`` of the whole dW)."""
    return sum(
        layer_objective(
            pruned[i : i + row_batch].to(torch.float32) - weight[i : i + row_batch].to(torch.float32), H
        )
        for i in range(0, weight.shape[0], row_batch)
    )


def _check_finite(what: str, t: torch.Tensor, name: str | None) -> None:
    """Refuse NaN/Inf in ``what`` (the weight or the Hessian) of layer ``name``, naming both."""
    if all_finite(t):  # chunked: no mask of the Hessian's size unless there is something to report
        return
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        first = tuple(int(i) for i in torch.nonzero(~finite)[0])
        layer = f"layer {name}: " if name else ""
        raise ValueError(
            f"{layer}{what} contains {bad} NaN or Inf values (first at {first}); fix the inputs that "
            "produced it (the model's weights, or the calibration activations behind the Hessian)"
        )


# the most |H v - H^T v| a Hessian may give for a random v, relative to max |H v| (at least 64 roundings of
# its dtype): X X^T summed in float32 gives ~1e-6; an H transposed in halves, or a product of two different
# matrices, gives differences of the order of H v itself. Two products with v: two reads of H, no b x b
# temporary (a 70B model's 28,672-wide H is 3.3 GB).
SYMMETRY_TOLERANCE = 1e-3


def _check_gram(H: torch.Tensor, name: str | None) -> None:
    """``H`` is a Gram matrix (2/N) sum X X^T: symmetric (``SYMMETRY_TOLERANCE``, probed with a fixed
    random vector) with a diagonal >= 0; anything else is not a layer's Hessian and its inverse would prune
    by noise."""
    layer = f"layer {name}: " if name else ""
    H = H.detach()
    generator = torch.Generator().manual_seed(0)
    v = torch.randn(H.shape[0], generator=generator, dtype=torch.float32).to(H.device, H.dtype)
    Hv, HTv = H @ v, v @ H
    scale = float(Hv.abs().max())
    asymmetry = float((Hv - HTv).abs().max())
    if asymmetry > max(SYMMETRY_TOLERANCE, 64 * torch.finfo(H.dtype).eps) * scale:
        raise ValueError(
            f"{layer}hessian: not symmetric (max |H v - H^T v| {asymmetry:.3g} for a random v, max |H v| "
            f"{scale:.3g}); give the layer's Hessian (2/N) sum X X^T of its inputs "
            "(thanos.HessianAccumulator), not a product of two different matrices"
        )
    if bool((torch.diagonal(H) < 0).any()):
        raise ValueError(
            f"{layer}hessian: a negative diagonal entry (min {float(torch.diagonal(H).min()):.3g}); a "
            "layer's Hessian (2/N) sum X X^T has a diagonal >= 0 (thanos.HessianAccumulator computes it)"
        )


def _check_heads(pattern: Sparsity, heads: tuple[int, int] | None, b: int) -> None:
    """``heads`` = (query heads, key/value groups) of a layer of ``b`` inputs: the heads divide b, the
    groups divide the heads, and the pattern leaves a head in every group (``head_count``)."""
    if heads is None:
        raise ValueError(f"heads: {pattern} needs the layer's (query heads, key/value groups)")
    n, kv = heads
    if not (isinstance(n, int) and isinstance(kv, int) and 0 < kv <= n and n % kv == 0 and b % n == 0):
        raise ValueError(
            f"heads: ({n}, {kv}) is not (query heads, key/value groups) of a layer of {b} inputs: the "
            "heads must divide the inputs and the groups the heads"
        )
    head_count(pattern, n, kv)


def _real(name: str, value: Any) -> float:
    """``value`` as a float: a real number (not a bool, a string, NaN), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    return float(value)


def _validate(
    weight: torch.Tensor,
    hessian: torch.Tensor | None,
    method: methods.Method,
    pattern: Sparsity,
    blocksize: int | None,
    alpha: Fraction,
    damp: float,
    name: str | None,
    heads: tuple[int, int] | None = None,
) -> None:
    methods.kernel(method.name, pattern.kind)  # a method without a kernel for this pattern fails first
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError("weight: expected a 2-D floating-point tensor (out_features, in_features)")
    for what, t in (("weight", weight), ("hessian", hessian)):
        if isinstance(t, torch.Tensor) and t.is_meta:
            raise ValueError(f"{what}: on device 'meta' (a shape without data): give the layer's real values")
    c, b = weight.shape
    if c == 0 or b == 0:
        raise ValueError(f"weight: empty shape {tuple(weight.shape)}")
    _check_finite("weight", weight, name)
    if hessian is None:
        if method.needs_hessian:
            raise ValueError(
                f"hessian: method {method.name!r} needs the layer Hessian; "
                f"only {methods.without_hessian()} run without one"
            )
    else:
        if not isinstance(hessian, torch.Tensor) or tuple(hessian.shape) != (b, b):
            shape = tuple(hessian.shape) if isinstance(hessian, torch.Tensor) else type(hessian).__name__
            raise ValueError(f"hessian: expected shape ({b}, {b}) for a weight with {b} inputs, got {shape}")
        _check_finite("hessian", hessian, name)
        _check_gram(hessian, name)
    try:
        check_alpha(pattern, alpha)
    except ValueError as err:
        raise ValueError(f"alpha: {err}") from None
    if alpha > 0 and hessian is None:
        raise ValueError("alpha: outlier rows are ranked with the Hessian; without one use alpha=0")
    if blocksize is not None and (
        isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 1
    ):
        raise ValueError(f"blocksize: must be a positive integer, got {blocksize!r}")
    if pattern.kind == "nm":
        if b % pattern.m:
            raise ValueError(f"sparsity: m={pattern.m} must divide the layer's {b} inputs")
        if blocksize is not None and min(blocksize, b) % pattern.m:
            raise ValueError(f"blocksize: {blocksize} must be a multiple of m={pattern.m} for {pattern}")
    if pattern.kind in ("heads", "kv_heads"):
        _check_heads(pattern, heads, b)
    elif heads is not None:
        raise ValueError(f"heads: only heads:p and kv_heads:p recipes take the heads, not {pattern}")
    if pattern.kind == "structured":  # neurons: neuron_count never exceeds b
        s = structured_count(pattern.p, alpha, b)
        if s > b:
            raise ValueError(
                f"sparsity/alpha: structured {float(pattern.p)} with alpha {float(alpha)} needs "
                f"ceil(p b / (1 - alpha)) = {s} columns but the layer has {b}; lower p or alpha"
            )


def prune_layer(
    weight: torch.Tensor,
    hessian: torch.Tensor | None,
    method: str,
    sparsity: Sparsity | float | str,
    *,
    blocksize: int | None = None,
    alpha: float | None = None,
    damp: float = 0.01,
    row_batch_bytes: int = DEFAULT_ROW_BATCH_BYTES,
    name: str | None = None,
    heads: tuple[int, int] | None = None,
) -> PruneResult:
    """Prune one linear layer.

    Args:
        weight: (c, b) = (out_features, in_features), any float dtype; the result keeps dtype and device.
        hessian: H = (2/N) sum X X^T, (b, b); converted to fp32. None only for magnitude.
        method: a name in ``thanos.METHODS`` (``thanos/pruning/methods.py``).
        sparsity: 0.5, "0.5", "unstructured:0.5", "2:4", "n:m", "structured:0.3", "neurons:0.3" (whole
            columns, alpha 0, the kept count the multiple of 32 nearest to (1 - p) b; ``neuron_count``) or a
            ``Sparsity``.
        blocksize: B; default: the method's (``thanos.pruning.methods``; Thanos 128 unstructured, 512 n:m).
        alpha: fraction of outlier rows kept dense (ceil(alpha c) rows by h_i); default: the method's
            (Thanos 0.1 for structured), else 0: n:m is exact n:m unless alpha is given (the paper's
            n:m variant is alpha 0.1).
        damp: lambda = damp * mean(diag H) is added to diag H before inversion (retried x10 on failure).
        row_batch_bytes: memory bound for the batched per-row solves of Thanos.
        name: layer name used in error messages.
        heads: ``heads:p`` and ``kv_heads:p`` only: (query heads, key/value groups) of the attention whose
            output projection ``weight`` is; its ``b / heads`` columns per head are removed together.
    """
    pattern = parse_sparsity(sparsity)
    spec = methods.get(method.lower() if isinstance(method, str) else method)
    blocksize = spec.default_blocksize(pattern.kind) if blocksize is None else blocksize
    alpha = spec.default_alpha(pattern.kind) if alpha is None else _real("alpha", alpha)
    alpha_q = exact(alpha or 0)
    if not 0 <= _real("damp", damp) < math.inf:
        raise ValueError(f"damp: must be a finite number >= 0 (fraction of mean(diag H)), got {damp!r}")
    _validate(weight, hessian, spec, pattern, blocksize, alpha_q, damp, name, heads)
    started = time.perf_counter()

    c, b = weight.shape
    weight = weight.detach()
    H = None if hessian is None else hessian.detach().to(device=weight.device, dtype=torch.float32)
    B = None if blocksize is None else min(blocksize, b)
    n_outliers = outlier_count(alpha_q, c)
    kernel_options = {
        "pattern": pattern,
        "blocksize": B,
        "alpha": alpha_q,
        "row_batch_bytes": row_batch_bytes,
        "heads": heads,
    }
    pruned = _prune_rows(spec, weight, H, n_outliers, damp, name, kernel_options)
    if weight.is_cuda:
        torch.cuda.synchronize(weight.device)
    seconds = time.perf_counter() - started
    objective = None if H is None else _objective(pruned.weight, weight, H)
    stats = PruneStats(
        method=spec.name,
        sparsity=str(pattern),
        achieved_sparsity=float(pruned.mask.sum()) / (c * b),
        objective=objective,
        seconds=seconds,
        device=str(weight.device),
        outlier_rows=n_outliers,
        blocksize=B,
        alpha=float(alpha_q),
        damp=pruned.damp,
        damp_retries=pruned.damp_retries,
        dead_columns=0 if pruned.dead is None else int(pruned.dead.sum()),
        shape=(c, b),
    )
    options = {"blocksize": blocksize, "alpha": float(alpha_q), "damp": damp}
    return PruneResult(
        weight=pruned.weight, mask=pruned.mask, stats=stats, options=options, columns=pruned.columns
    )


@dataclass
class _PrunedRows:
    """What ``_prune_rows`` hands back: the pruned weight and its mask, and how H's inverse was formed."""

    weight: torch.Tensor  # the whole layer, pruned, in the input's dtype
    mask: torch.Tensor  # bool, True where a weight was removed
    columns: torch.Tensor | None  # the removed columns of a compact pattern (neurons, heads, kv_heads)
    dead: torch.Tensor | None  # H's dead columns (zero diagonal), zeroed; None without the inverse
    damp: float | None  # damping used for the inverse (after retries)
    damp_retries: int


def _rows_to_prune(
    weight: torch.Tensor, H: torch.Tensor | None, n_outliers: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices of the rows to prune, those rows in fp32): every row but the ``n_outliers`` outlier rows
    kept dense (ranked by h_i). The fp32 rows are a copy: the only fp32 copy of the weight made."""
    dense_rows = (
        masks.outlier_rows(weight.to(torch.float32), H, n_outliers)
        if n_outliers
        else torch.zeros(weight.shape[0], dtype=torch.bool, device=weight.device)
    )
    rows = torch.nonzero(~dense_rows).squeeze(1)
    sub = weight[rows].to(torch.float32) if n_outliers else weight.to(torch.float32, copy=True)
    return rows, sub


def _prune_rows(
    spec: methods.Method,
    weight: torch.Tensor,
    H: torch.Tensor | None,
    n_outliers: int,
    damp: float,
    name: str | None,
    kernel_options: dict[str, Any],
) -> _PrunedRows:
    """The method's kernel on every row but the outlier rows, merged back into the layer.

    ``kernel_options``: the ``Problem``'s pattern, blocksize, alpha, row_batch_bytes and heads. Memory:
    besides ``weight`` and H, one fp32 copy of the rows to prune, the inverse factor (one b x b buffer; on
    the CPU, within a block, kept for its next layer that reads the same H: ``thanos.pruning.factors``) and
    the masks; no second fp32 copy of the weight."""
    rows, sub = _rows_to_prune(weight, H, n_outliers)
    factor = None
    if spec.updates_weights and rows.numel():
        factor = inverse_factor(H, damp=damp, name=name)  # kept for the layers that share H
        sub[:, factor.dead] = 0.0

    U = None if factor is None else factor.U
    sub, sub_mask = _run(spec, Problem(sub, H, U, **kernel_options))
    del U
    compact = kernel_options["pattern"].kind in COMPACT_KINDS
    columns = torch.nonzero(sub_mask.all(dim=0)).squeeze(1) if compact else None
    dead = None if factor is None else factor.dead
    damp_used, retries = (None, 0) if factor is None else (factor.damp, factor.retries)
    del factor  # the b x b inverse factor (kept for the next layer with this H: ``factors``)
    if dead is not None:
        sub_mask[:, dead] = True  # zeroed above: removed weights, whatever the kernel chose

    if n_outliers:
        mask = torch.zeros(weight.shape, dtype=torch.bool, device=weight.device)
        mask[rows] = sub_mask
        out = weight.clone()
        out[rows] = sub.to(weight.dtype)
    else:
        mask = sub_mask
        out = sub.to(weight.dtype)
    del sub, sub_mask
    out[mask] = 0
    return _PrunedRows(out, mask, columns, dead, damp_used, retries)


def _run(method: methods.Method, problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """The method's kernel for this pattern on the rows to prune. Returns (W, mask) for those rows."""
    if problem.W.shape[0] == 0:
        return problem.W, torch.zeros_like(problem.W, dtype=torch.bool)
    return methods.kernel(method.name, problem.pattern.kind)(problem)
