"""Helpers shared by the stages: device and compute-dtype resolution, finiteness checks, batching with
progress bars."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from thanos.errors import Option, OptionError
from thanos.stages.cpu_dtypes import faster_than_float32

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
COMPUTE_DTYPES = ("auto", "float32", "bfloat16", "float16")


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
            shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
            raise OptionError(
                Option("device", spec),
                f"{count} CUDA device(s) visible{shown}; use ",
                Option("device", "cpu"),
                " or auto",
            )
        return device
    raise ValueError(f"--device: unknown {spec!r}; use {DEVICE_CHOICES}")


def compute_dtype(
    spec: str, device: torch.device, checkpoint: torch.dtype, native: bool | None = None
) -> torch.dtype:
    """The dtype a model runs in on ``device`` (its weights and activations; Hessians are fp32 anyway).

    ``auto``: the dtype the device is fast at. On a GPU, the checkpoint's dtype. On a CPU, the checkpoint's
    dtype where the CPU multiplies it faster than float32 (``native``; None: measured once per machine,
    ``thanos.stages.cpu_dtypes``), else float32: a CPU without bf16 instructions (AVX2) multiplies bf16
    matrices at a quarter of its fp32 rate, some with them are slower in bf16 too, and float32 is the
    closer to the exact computation. An explicit dtype is refused where the device cannot
    compute in it (bfloat16 on a GPU older than compute capability 8.0).
    """
    spec = (spec or "auto").strip().lower()
    if spec not in COMPUTE_DTYPES:
        raise ValueError(f"compute dtype {spec!r}: use one of {', '.join(COMPUTE_DTYPES)}")
    if spec == "auto":
        if device.type != "cpu" or checkpoint not in (torch.bfloat16, torch.float16):
            return checkpoint
        if native is None:
            native = faster_than_float32(checkpoint)
        return checkpoint if native else torch.float32
    dtype = getattr(torch, spec)
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"compute dtype bfloat16: {torch.cuda.get_device_name(device)} has no bfloat16 support; "
            "use float16, float32 or auto"
        )
    return dtype


@dataclass(frozen=True)
class Compute:
    """Where and in which dtype a stage runs the model's modules: ``device``, ``dtype`` (``compute_dtype``)
    and the checkpoint's own dtype. Modules and activations are converted only when the two dtypes differ,
    so a model computed in its own dtype runs exactly as loaded."""

    device: torch.device
    dtype: torch.dtype
    checkpoint: torch.dtype

    @classmethod
    def of(cls, device: str, dtype: str, checkpoint: torch.dtype) -> Compute:
        """``device`` and ``dtype`` as the commands take them (``auto`` or a name), resolved."""
        dev = resolve_device(device)
        return cls(dev, compute_dtype(dtype, dev, checkpoint), checkpoint)

    @property
    def converts(self) -> bool:
        return self.dtype != self.checkpoint

    def module(self, module: nn.Module) -> nn.Module:
        """``module`` on the device, its floating parameters and buffers in the compute dtype."""
        return module.to(self.device, self.dtype) if self.converts else module.to(self.device)

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        """Activations on the device in the compute dtype."""
        return x.to(self.device, self.dtype) if self.converts else x.to(self.device)


def random_state(device: torch.device) -> dict[str, Any]:
    """torch's random state on the CPU and, for a CUDA ``device``, on it: what a training's checkpoint
    keeps (distillation's, the demo's)."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_random_state(state: dict[str, Any], device: torch.device) -> None:
    """torch's random state set back to ``state`` (``random_state``'s)."""
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


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
