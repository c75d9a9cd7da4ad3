"""Mask builders shared by the methods. A mask is True where a weight is removed.

All selections are exact in count and deterministic: ties are broken by position (lowest index first).
"""

from __future__ import annotations

import os

import torch


def gpu_path(tensor: torch.Tensor) -> bool:
    """Whether work on ``tensor`` takes a GPU's path: on any device but the CPU, or with
    ``THANOS_BATCHED=1`` (read at every call) on a CPU too, for counting a GPU's launches and host waits
    there (``bench/kernel_calls.py``). The paths give equal results."""
    return tensor.device.type != "cpu" or os.environ.get("THANOS_BATCHED") == "1"


def bracket(flat: torch.Tensor, k: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Values lo <= hi that bracket the k-th smallest of ``flat`` with high probability: the entries
    4 standard deviations either side of its rank in a sorted, seeded random sample of ``size`` entries."""
    n = flat.numel()
    generator = torch.Generator(device=flat.device).manual_seed(0)
    idx = torch.randint(n, (size,), generator=generator, device=flat.device)
    sample = torch.sort(flat.take(idx)).values
    pos, margin = k * size // n, 4 * int(size**0.5)
    return sample[max(0, pos - margin - 1)], sample[min(size, pos + margin) - 1]


def smallest(metric: torch.Tensor, k: int) -> torch.Tensor:
    """Mask of exactly the ``k`` smallest entries of ``metric`` (any shape), ties by flat index.

    This is psi_X(W, r) of eq. (11) when ``metric`` is the Wanda score |W_ij| ||X_j||.
    """
    return smallest_leading(metric.reshape(1, -1), k, metric.numel()).view_as(metric)


def smallest_per_row(metric: torch.Tensor, k: int) -> torch.Tensor:
    """Mask of the ``k`` smallest entries of every row (Wanda's per-output comparison group)."""
    mask = torch.zeros_like(metric, dtype=torch.bool)
    if k > 0:
        idx = torch.sort(metric, dim=1, stable=True).indices[:, :k]
        mask.scatter_(1, idx, True)
    return mask


def n_of_m(metric: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Mask with the ``n`` smallest of every group of ``m`` consecutive columns of every row."""
    rows, cols = metric.shape
    groups = metric.reshape(rows, cols // m, m)
    idx = torch.sort(groups, dim=2, stable=True).indices[:, :, :n]
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, idx, True)
    return mask.reshape(rows, cols)


def columns(score: torch.Tensor, s: int, rows: int) -> torch.Tensor:
    """Mask removing the ``s`` columns with the smallest ``score`` (shape (b,)) from ``rows`` rows."""
    chosen = smallest(score, s)
    return chosen.unsqueeze(0).expand(rows, -1).clone()


def input_norms(H: torch.Tensor) -> torch.Tensor:
    """||X_j|| up to a common factor: ||X_j||^2 = N H_jj / 2 for H = (2/N) sum X X^T."""
    return torch.sqrt(torch.clamp(torch.diagonal(H), min=0))


def outlier_rows(W: torch.Tensor, H: torch.Tensor, count: int) -> torch.Tensor:
    """Bool (c,): the ``count`` rows with the largest h_i = ||W_i X||^2 = (W H W^T)_ii / 2.

    h_i is eq. (14), computed exactly from H.

    These rows are kept dense: neither pruned nor updated.
    """
    keep_dense = torch.zeros(W.shape[0], dtype=torch.bool, device=W.device)
    if count > 0:
        h = ((W @ H) * W).sum(dim=1) / 2
        keep_dense[smallest(-h, count)] = True
    return keep_dense


def smallest_leading(metric: torch.Tensor, k: int, width: int) -> torch.Tensor:
    """``smallest(metric, k)[:, :width]`` for a 2-D ``metric``, without building the whole mask.

    Thanos' global residual mask (eq. 11) is needed only on its first B columns. Beyond 2^15 entries the
    k-th smallest value is bracketed by a seeded sample of n/16 entries (at most 2^16; ``bracket``): the
    selection then runs on a few percent of the entries, the candidates; the counts below and inside the
    bracket locate it exactly. On a GPU's path the selection is ``leading_on_device``; on a CPU, where host
    reads cost nothing, ``kthvalue`` (linear time) selects the k-th value and ties at it are resolved by
    flat index.
    """
    flat = metric.reshape(-1)
    n = flat.numel()
    lead = metric[:, :width]
    if k <= 0 or k >= n:
        return torch.full_like(lead, k > 0, dtype=torch.bool)
    if gpu_path(metric):
        return leading_on_device(metric, k, width)
    below, candidates = 0, flat
    if n > 1 << 15:
        lo, hi = bracket(flat, k, min(1 << 16, n >> 4))
        below_lo = flat < lo
        inside = flat[(flat <= hi).logical_xor_(below_lo)]  # lo <= hi: below lo implies at most hi
        if (count := int(torch.count_nonzero(below_lo))) < k <= count + inside.numel():
            below, candidates = count, inside
    threshold = torch.kthvalue(candidates, k - below).values
    below += int(torch.count_nonzero(candidates < threshold))
    equal = int(torch.count_nonzero(candidates == threshold))
    mask = lead < threshold
    need = k - below  # entries equal to the threshold that are removed: the first ones in flat order
    if need == equal:
        return mask | (lead == threshold)
    ties = torch.nonzero(flat == threshold).squeeze(1)[:need]
    ties = ties[ties % metric.shape[1] < width]
    mask[ties // metric.shape[1], ties % metric.shape[1]] = True
    return mask


def leading_on_device(metric: torch.Tensor, k: int, width: int) -> torch.Tensor:
    """``smallest_leading`` (0 < k < n) with one host wait at most, for a GPU: the two counts of the
    bracket, read together. The candidates are extracted on the device at their known count
    (``nonzero_static``), in flat order; a stable sort of them puts the k - below removed ones first,
    ties in flat order (a sort, not ``kthvalue``: on a GPU that selects within one thread block). The mask
    is (metric < lo) on the leading columns, True at those candidates' positions; returned as a view of
    the leading columns of a (c, b) buffer whose other entries are not set.
    """
    flat = metric.reshape(-1)
    n = flat.numel()
    removed = torch.empty(metric.shape, dtype=torch.bool, device=metric.device)
    below, positions, values = 0, None, flat
    if n > 1 << 15:
        lo, hi = bracket(flat, k, min(1 << 16, n >> 4))
        below_lo = torch.lt(flat, lo, out=removed.view(-1))  # its leading columns: the mask but candidates
        inside = (flat <= hi).logical_xor_(below_lo)  # lo <= hi: below lo implies at most hi
        count_below, count = torch.stack(
            [torch.count_nonzero(below_lo), torch.count_nonzero(inside)]
        ).tolist()
        if count_below < k <= count_below + count:
            below, positions = count_below, torch.nonzero_static(inside, size=count).squeeze(1)
            values = flat.take(positions)
    if positions is None:  # every entry is a candidate
        removed[:, :width] = False
    first = torch.sort(values, stable=True).indices[: k - below]
    removed.view(-1).index_fill_(0, first if positions is None else positions.take(first), True)
    return removed[:, :width]


def head_columns(score: torch.Tensor, heads: int, kv_heads: int, r: int, whole_groups: bool) -> torch.Tensor:
    """Bool (b,): the columns of the heads to remove, ranked by ``score`` (b,) summed over each head's
    ``b / heads`` columns: the ``r`` lowest query heads of every key/value group (query head h reads group
    h // (heads / kv_heads)), or with ``whole_groups`` the ``r`` lowest groups, each its heads' sum."""
    head_dim, g = score.numel() // heads, heads // kv_heads
    per_head = score.reshape(heads, head_dim).sum(dim=1).reshape(kv_heads, g)
    if whole_groups:
        chosen = smallest(per_head.sum(dim=1), r).unsqueeze(1).expand(-1, g)
    else:
        chosen = smallest_per_row(per_head, r)
    return chosen.reshape(heads).repeat_interleave(head_dim)
