"""Helpers shared by the stages: device resolution, finiteness checks, batching with progress bars."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm import tqdm

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto``: CUDA if available (the first visible device; a slot pool may set CUDA_VISIBLE_DEVICES),
    else CPU. ``cuda``/``cuda:N`` fail clearly when no such GPU is visible."""
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        try:
            device = torch.device(spec)
        except RuntimeError as err:
            raise ValueError(f"--device: cannot parse {spec!r}; use {DEVICE_CHOICES}") from err
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise ValueError(
                f"--device {spec}: {count} CUDA device(s) visible"
                + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
                + "; use --device cpu or auto"
            )
        return device
    raise ValueError(f"--device: unknown {spec!r}; use {DEVICE_CHOICES}")


def check_finite(hidden: torch.Tensor, what: str, block: int, start: int, path: str | Path) -> None:
    """Raise naming the block and the first sample whose activations hold NaN or Inf."""
    bad = ~torch.isfinite(hidden.reshape(hidden.shape[0], -1)).all(dim=1)
    if bool(bad.any()):
        sample = start + int(torch.nonzero(bad)[0])
        raise ValueError(
            f"NaN or Inf in the {what} of block {block}, sample {sample} ({path}); the model or its inputs "
            "overflow in this dtype: check the upstream stores, or run the model in float32"
        )


def batches(total: int, batch_size: int, desc: str) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges over ``total`` samples with a progress bar on stderr."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    starts = range(0, total, batch_size)
    for start in tqdm(starts, desc=desc, unit="batch", leave=False, dynamic_ncols=True):
        yield start, min(start + batch_size, total)
