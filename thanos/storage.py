"""Zarr stores of the pipeline: calibration tokens, block activations and block Hessians.

Every store is written into a temporary sibling directory and renamed into place after its ``complete``
attribute, written last, is set; readers refuse a store without it. Layouts are in docs/cli.md:

- tokens:      array ``tokens`` int32 (nsamples, seqlen); attrs: provenance.
- activations: array ``hidden`` (nsamples, seqlen, hidden), one sample per chunk, in the model's dtype
  (bfloat16 as its uint16 bits); attrs ``block``, ``nsamples``, ``seqlen``, ``dtype``.
- hessians:    one fp32 (b, b) array per input group; attrs ``nsamples``, ``groups``, ``block``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr

from thanos.atomic import atomic_path

COMPLETE = "complete"
TOKENS = "tokens"
HIDDEN = "hidden"
# torch dtypes stored as themselves; bfloat16 is stored as its bits (zarr has no bfloat16)
_NUMPY = {torch.float32: "float32", torch.float16: "float16", torch.float64: "float64"}
_BITS = {torch.bfloat16: "uint16"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or dtype not in (_NUMPY | _BITS):
        raise ValueError(f"unsupported activation dtype {name!r}")
    return dtype


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """Lossless numpy view of a float tensor (bfloat16 -> its uint16 bits)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def from_numpy(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of ``to_numpy``."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def open_complete(path: str | Path, kind: str) -> zarr.Group:
    """Open a finished store read-only; refuse a missing or incomplete one with the fix."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{kind} store not found: {path}; run the stage that writes it first")
    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception as err:  # noqa: BLE001 - zarr raises several types for a broken store
        raise ValueError(f"{path} is not a readable zarr {kind} store ({err}); delete it and rerun") from err
    if group.attrs.get(COMPLETE) is not True:
        raise ValueError(
            f"{kind} store {path} is incomplete (no '{COMPLETE}: true' attribute, an interrupted write?); "
            f"delete {path} and rerun the stage that writes it"
        )
    return group


@contextlib.contextmanager
def store_writer(path: str | Path, attrs: dict[str, Any]) -> Iterator[zarr.Group]:
    """A zarr group in a temporary sibling of ``path``; on success ``attrs`` then ``complete`` are set and
    the store is renamed into place. On error the temporary store is removed and ``path`` is untouched."""
    with atomic_path(path, is_dir=True) as tmp:
        group = zarr.open_group(str(tmp), mode="w")
        yield group
        group.attrs.update(attrs)
        group.attrs[COMPLETE] = True


# ---- tokens -------------------------------------------------------------------------------------------
def write_tokens(path: str | Path, tokens: np.ndarray, attrs: dict[str, Any]) -> None:
    """Calibration token ids (nsamples, seqlen) as int32, one sample per chunk."""
    tokens = np.asarray(tokens, dtype=np.int32)
    with store_writer(path, attrs) as group:
        arr = group.create_array(TOKENS, shape=tokens.shape, chunks=(1, tokens.shape[1]), dtype="int32")
        arr[:] = tokens


def read_tokens(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """(tokens int32 (nsamples, seqlen), attrs) of a complete tokens store."""
    group = open_complete(path, "tokens")
    if TOKENS not in group:
        raise ValueError(f"{path} has no '{TOKENS}' array: not a tokens store")
    return np.asarray(group[TOKENS][:]), dict(group.attrs)


# ---- activations --------------------------------------------------------------------------------------
class ActivationWriter:
    """Writes samples of one activation store; created by ``write_activations``."""

    def __init__(self, array: zarr.Array, dtype: torch.dtype) -> None:
        self.array = array
        self.dtype = dtype

    def write(self, start: int, hidden: torch.Tensor) -> None:
        """Samples ``start .. start + len(hidden)`` (batch, seqlen, hidden), in the store's dtype."""
        if hidden.dtype != self.dtype:
            raise ValueError(f"activations are {hidden.dtype}, the store holds {self.dtype}")
        self.array[start : start + hidden.shape[0]] = to_numpy(hidden)


@contextlib.contextmanager
def write_activations(
    path: str | Path,
    nsamples: int,
    seqlen: int,
    hidden: int,
    dtype: torch.dtype,
    block: int,
    attrs: dict[str, Any] | None = None,
) -> Iterator[ActivationWriter]:
    """Atomically write the inputs of ``block``: (nsamples, seqlen, hidden), one sample per chunk."""
    if dtype not in (_NUMPY | _BITS):
        raise ValueError(f"unsupported activation dtype {dtype}")
    meta = {"block": block, "nsamples": nsamples, "seqlen": seqlen, "hidden_size": hidden}
    meta |= {"dtype": dtype_name(dtype), **(attrs or {})}
    with store_writer(path, meta) as group:
        array = group.create_array(
            HIDDEN,
            shape=(nsamples, seqlen, hidden),
            chunks=(1, seqlen, hidden),
            dtype=(_NUMPY | _BITS)[dtype],
        )
        yield ActivationWriter(array, dtype)


class Activations:
    """A complete activation store, read a few samples at a time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        group = open_complete(path, "activations")
        if HIDDEN not in group:
            raise ValueError(f"{path} has no '{HIDDEN}' array: not an activation store")
        self.array = group[HIDDEN]
        self.attrs = dict(group.attrs)
        self.dtype = torch_dtype(self.attrs["dtype"])
        self.nsamples, self.seqlen, self.hidden_size = (int(x) for x in self.array.shape)
        self.block = int(self.attrs["block"])

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Samples ``start:stop`` as a (stop - start, seqlen, hidden) tensor in the model's dtype."""
        return from_numpy(self.array[start:stop], self.dtype)

    def check(self, hidden_size: int, block: int | None = None) -> None:
        """Refuse a store that does not fit the model (hidden size) or the block it is used for."""
        if self.hidden_size != hidden_size:
            raise ValueError(
                f"{self.path}: activations have hidden size {self.hidden_size}, the model has {hidden_size}; "
                "the store belongs to another model"
            )
        if block is not None and self.block != block:
            raise ValueError(f"{self.path} holds the inputs of block {self.block}, not block {block}")


# ---- hessians -----------------------------------------------------------------------------------------
def write_hessians(path: str | Path, hessians: dict[str, torch.Tensor], attrs: dict[str, Any]) -> None:
    """One fp32 (b, b) array per input group."""
    with store_writer(path, attrs) as group:
        for name, H in hessians.items():
            data = to_numpy(H.to(torch.float32))
            group.create_array(name, shape=data.shape, chunks=data.shape, dtype="float32")[:] = data


class Hessians:
    """A complete Hessian store; ``get(group)`` reads one group's fp32 H."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.group = open_complete(path, "hessians")
        self.attrs = dict(self.group.attrs)

    def get(self, name: str) -> torch.Tensor:
        if name not in self.group:
            have = sorted(self.group.keys())
            raise ValueError(f"{self.path} has no Hessian for group {name!r} (has {have})")
        return torch.from_numpy(np.asarray(self.group[name][:], dtype=np.float32))
