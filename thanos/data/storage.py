"""Zarr stores of the pipeline: calibration tokens, block activations and block Hessians.

Every store is written into a temporary sibling directory and renamed into place. Every chunk ends with
its crc32c (zarr's ``crc32c`` codec; chunks are not compressed), and at completion the store's attributes
get a ``manifest`` (per array: chunk count and a digest of its metadata and of every chunk file's name,
size and crc32c) and then ``complete: true``. Readers (``open_complete``) refuse a store whose manifest is
missing or does not match the files (a deleted, truncated or replaced chunk: a few bytes read per chunk),
and a chunk whose crc32c does not match its bytes fails when it is read; both errors name the store and
say to delete it and rerun. Layouts are in docs/cli.md:

- tokens:      array ``tokens`` int32 (nsamples, seqlen); attrs: provenance.
- activations: array ``hidden`` (nsamples, seqlen, hidden), one sample per chunk, in the model's dtype
  (bfloat16 as its uint16 bits); attrs ``block``, ``nsamples``, ``seqlen``, ``dtype``.
- hessians:    one fp32 (b, b) array per input group; attrs ``nsamples``, ``groups``, ``block``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr
from zarr.codecs import Crc32cCodec

from thanos.errors import PathError
from thanos.files.atomic import atomic_path

COMPLETE = "complete"
MANIFEST = "manifest"
MANIFEST_VERSION = 1
TOKENS = "tokens"
HIDDEN = "hidden"
# a crc32c of each chunk's bytes, no compression: zstd saved 22 % of bf16 and 8 % of fp32 random data but
# made reading 2.8-3x slower (docs/benchmarks.md, "Store read throughput")
COMPRESSORS = (Crc32cCodec(),)
# torch dtypes stored as themselves; bfloat16 is stored as its bits (zarr has no bfloat16)
_NUMPY = {torch.float32: "float32", torch.float16: "float16", torch.float64: "float64"}
_BITS = {torch.bfloat16: "uint16"}


class StoreError(PathError):
    """A store that must not be used (incomplete, damaged, or written without checksums)."""

    def __init__(self, what: str, path: str | os.PathLike) -> None:
        super().__init__(what, path, f"delete {path} and rerun the stage that writes it")


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


def _chunk_files(folder: Path) -> list[tuple[str, Path]]:
    """(key, file) of every chunk of the array in ``folder``, sorted by key."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            file = Path(root, name)
            key = file.relative_to(folder).as_posix()
            if key != "zarr.json":
                found.append((key, file))
    return sorted(found)


def _array_manifest(folder: Path) -> dict[str, Any]:
    """Chunk count and digest of one array: sha256 of its metadata and of each chunk's key, size and
    stored crc32c (its last 4 bytes), so verifying reads 4 bytes per chunk, not the data."""
    digest = hashlib.sha256((folder / "zarr.json").read_bytes())
    chunks = _chunk_files(folder)
    for key, file in chunks:
        with open(file, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - 4, 0))
            digest.update(f"{key}\0{size}\0{handle.read().hex()}\n".encode())
    return {"chunks": len(chunks), "digest": digest.hexdigest()}


def _attrs_digest(attrs: dict[str, Any]) -> str:
    mine = {k: v for k, v in attrs.items() if k not in (MANIFEST, COMPLETE)}
    return hashlib.sha256(json.dumps(mine, sort_keys=True, default=str).encode()).hexdigest()


def _manifest(tmp: Path, group: zarr.Group, path: Path) -> dict[str, Any]:
    """The manifest of the store being written in ``tmp``; refuses an array with unwritten chunks."""
    arrays = {}
    for name, array in sorted(group.arrays()):
        entry = _array_manifest(tmp / name)
        if entry["chunks"] != array.nchunks:
            raise ValueError(
                f"{path}: only {entry['chunks']} of the {array.nchunks} chunks of array {name!r} were "
                "written (a bug in the stage that writes it: every sample must be written)"
            )
        arrays[name] = entry
    attrs = zarr.open_group(str(tmp), mode="r").attrs.asdict()  # as a reader will see them
    return {"version": MANIFEST_VERSION, "attrs": _attrs_digest(attrs), "arrays": arrays}


def _verify(path: Path, group: zarr.Group, kind: str) -> None:
    """Refuse a store whose files do not match its manifest, or whose chunks carry no checksum."""
    manifest = group.attrs.get(MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise StoreError(
            f"{kind} store has no '{MANIFEST}' (written by an older thanos without chunk checksums)", path
        )
    listed = manifest.get("arrays", {})
    with warnings.catch_warnings():  # Snakemake's mark in a directory output it made: not the store's
        warnings.filterwarnings("ignore", message=r"Object at \.snakemake_timestamp is not recognized")
        arrays = dict(group.arrays())
    if sorted(arrays) != sorted(listed):
        raise StoreError(
            f"{kind} store holds arrays {sorted(arrays)}, its manifest lists {sorted(listed)}", path
        )
    for name, array in arrays.items():
        if not isinstance(array.metadata.codecs[-1], Crc32cCodec):
            raise StoreError(f"{kind} store: the chunks of array {name!r} carry no crc32c checksum", path)
        found = _array_manifest(path / name)
        want = listed[name]
        if found["chunks"] != want.get("chunks") or found["chunks"] != array.nchunks:
            raise StoreError(
                f"{kind} store: array {name!r} has {found['chunks']} chunk files, its manifest lists "
                f"{want.get('chunks')} and its shape needs {array.nchunks} (a deleted or stray chunk)",
                path,
            )
        if found["digest"] != want.get("digest"):
            raise StoreError(
                f"{kind} store: the chunks or metadata of array {name!r} do not match the manifest "
                "(a truncated, replaced or edited file)",
                path,
            )
    if _attrs_digest(group.attrs.asdict()) != manifest.get("attrs"):
        raise StoreError(f"{kind} store: its attributes do not match the manifest (edited)", path)


def open_complete(path: str | Path, kind: str) -> zarr.Group:
    """Open a finished store read-only, verified against its manifest; refuse a missing, incomplete or
    damaged one (``FileNotFoundError``, ``StoreError``) with the fix."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{kind} store not found: {path}; run the stage that writes it first")
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = group.attrs.asdict()
    except Exception as err:  # noqa: BLE001 - zarr raises several types for a broken store
        raise StoreError(f"not a readable zarr {kind} store ({type(err).__name__}: {err})", path) from err
    if attrs.get(COMPLETE) is not True:
        raise StoreError(
            f"{kind} store is incomplete (no '{COMPLETE}: true' attribute, an interrupted write?)", path
        )
    try:
        _verify(path, group, kind)
    except StoreError:
        raise
    except Exception as err:  # noqa: BLE001 - unreadable array metadata or chunk files
        raise StoreError(f"{kind} store is damaged ({type(err).__name__}: {err})", path) from err
    return group


def store_attrs(group: zarr.Group) -> dict[str, Any]:
    """The attributes a stage wrote (and ``complete``), without the manifest."""
    return {k: v for k, v in group.attrs.asdict().items() if k != MANIFEST}


def read_array(
    path: Path, kind: str, array: zarr.Array, selection: Any = slice(None), what: str = "data"
) -> np.ndarray:
    """``array[selection]``; a chunk that fails its checksum or cannot be decoded raises ``StoreError``
    (``what``: the part read, for the message)."""
    try:
        return np.asarray(array[selection])
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - codecs raise ValueError (crc32c), RuntimeError (zstd), ...
        detail = (
            "a chunk fails its crc32c checksum" if "checksum" in str(err) else f"{type(err).__name__}: {err}"
        )
        name = array.name.lstrip("/")
        raise StoreError(
            f"{kind} store is damaged: {what} of array {name!r} cannot be read ({detail})", path
        ) from err


def create_array(
    group: zarr.Group, name: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str
) -> zarr.Array:
    """An array whose chunks carry a crc32c; every chunk is written, even one of zeros (for the manifest)."""
    return group.create_array(
        name,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressors=COMPRESSORS,
        config={"write_empty_chunks": True},
    )


# the file at the root of a zarr group (format 3; format 2 kept .zgroup)
ZARR_ROOTS = ("zarr.json", ".zgroup")


def store_kind(path: str | Path) -> str | None:
    """What the zarr store at ``path`` holds, by its arrays: "tokens", "activations" or "Hessian" (None: no
    readable store with arrays there)."""
    try:
        arrays = set(zarr.open_group(str(path), mode="r").array_keys())
    except Exception:  # noqa: BLE001 - not a store, or not a readable one: nothing of a kind to keep
        return None
    if not arrays:
        return None
    return "tokens" if TOKENS in arrays else "activations" if HIDDEN in arrays else "Hessian"


@contextlib.contextmanager
def store_writer(path: str | Path, attrs: dict[str, Any], kind: str) -> Iterator[zarr.Group]:
    """A zarr group in a temporary sibling of ``path``; on success ``attrs``, the manifest, then
    ``complete`` are set and the store is renamed into place. On error the temporary store is removed and
    ``path`` is untouched. Create arrays with ``create_array`` (chunk checksums). A directory at ``path`` that
    is not a zarr store (nor empty), or a store of another ``kind`` (``store_kind``: a command's ``--out``
    given the path of another stage's store), is refused: the store would take its place, deleting it."""
    found = Path(path)
    if found.is_dir() and any(found.iterdir()) and not any((found / name).is_file() for name in ZARR_ROOTS):
        raise PathError(
            "a directory that is not a zarr store is there, and the store would replace it", found,
            "give the store a path of its own",
        )  # fmt: skip
    if found.is_dir() and (held := store_kind(found)) not in (None, kind):
        raise PathError(
            f"a {held} store is there, and this {kind} store would replace it", found,
            f"give the {kind} store a path of its own (delete the {held} store first to replace it)",
        )  # fmt: skip
    with atomic_path(path, is_dir=True) as tmp:
        group = zarr.open_group(str(tmp), mode="w")
        yield group
        group.attrs.update(attrs)
        group.attrs[MANIFEST] = _manifest(tmp, group, Path(path))
        group.attrs[COMPLETE] = True


# ---- tokens -------------------------------------------------------------------------------------------
def write_tokens(path: str | Path, tokens: np.ndarray, attrs: dict[str, Any]) -> None:
    """Calibration token ids (nsamples, seqlen) as int32, one sample per chunk."""
    tokens = np.asarray(tokens, dtype=np.int32)
    with store_writer(path, attrs, "tokens") as group:
        create_array(group, TOKENS, tokens.shape, (1, tokens.shape[1]), "int32")[:] = tokens


def read_tokens(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """(tokens int32 (nsamples, seqlen), attrs) of a complete tokens store."""
    group = open_complete(path, "tokens")
    if TOKENS not in group:
        raise StoreError(f"no '{TOKENS}' array: not a tokens store", path)
    return read_array(Path(path), "tokens", group[TOKENS]), store_attrs(group)


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
    with store_writer(path, meta, "activations") as group:
        array = create_array(
            group, HIDDEN, (nsamples, seqlen, hidden), (1, seqlen, hidden), (_NUMPY | _BITS)[dtype]
        )
        yield ActivationWriter(array, dtype)


class Activations:
    """A complete activation store, read a few samples at a time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        group = open_complete(path, "activations")
        if HIDDEN not in group:
            raise StoreError(f"no '{HIDDEN}' array: not an activation store", path)
        self.array = group[HIDDEN]
        self.attrs = store_attrs(group)
        self.dtype = torch_dtype(self.attrs["dtype"])
        self.nsamples, self.seqlen, self.hidden_size = (int(x) for x in self.array.shape)
        self.block = int(self.attrs["block"])

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Samples ``start:stop`` as a (stop - start, seqlen, hidden) tensor in the model's dtype."""
        what = f"samples {start}..{stop - 1}"
        return from_numpy(
            read_array(self.path, "activations", self.array, slice(start, stop), what), self.dtype
        )

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
HESSIAN_CHUNK_BYTES = 1 << 26


def hessian_chunks(b: int) -> tuple[int, int]:
    """Chunks of whole rows, at most about ``HESSIAN_CHUNK_BYTES`` each and of near-equal sizes (zarr
    stores the last chunk at full size): writing or reading H then needs one chunk of memory besides H
    itself (a single b x b chunk needs a second H-sized buffer: 3.3 GB at b = 28672)."""
    count = -(-4 * b * b // HESSIAN_CHUNK_BYTES)  # ceil
    return -(-b // count), b


def write_hessians(path: str | Path, hessians: dict[str, torch.Tensor], attrs: dict[str, Any]) -> None:
    """One fp32 (b, b) array per input group, in chunks of rows (``hessian_chunks``)."""
    with store_writer(path, attrs, "Hessian") as group:
        for name, H in hessians.items():
            data = to_numpy(H.to(torch.float32))
            chunks = hessian_chunks(data.shape[0])
            array = create_array(group, name, data.shape, chunks, "float32")
            for start in range(0, data.shape[0], chunks[0]):  # one chunk at a time: zarr copies what it gets
                array[start : start + chunks[0]] = data[start : start + chunks[0]]


class Hessians:
    """A complete Hessian store; ``get(group)`` reads one group's fp32 H."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.group = open_complete(path, "hessians")
        self.attrs = store_attrs(self.group)

    def get(self, name: str) -> torch.Tensor:
        if name not in self.group:
            have = sorted(self.group.keys())
            raise ValueError(f"{self.path} has no Hessian for group {name!r} (has {have})")
        return torch.from_numpy(
            read_array(self.path, "hessians", self.group[name]).astype(np.float32, copy=False)
        )
