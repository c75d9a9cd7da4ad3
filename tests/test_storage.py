"""Zarr stores: lossless round trips, and every kind of damage is refused with the store's name and the fix
(deleted, truncated or changed chunks, an edited manifest, stores without one). Real zarr stores, damaged
on disk the way a failing disk, a killed job or a person would."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from thanos.data.safetensors_io import SafetensorsFileError, load_safetensors, open_safetensors
from thanos.data.storage import (
    Activations,
    Hessians,
    StoreError,
    open_complete,
    read_tokens,
    write_activations,
    write_hessians,
    write_tokens,
)
from thanos.errors import PathError

FIX = "and rerun the stage that writes it"


def activations(path: Path, dtype: torch.dtype = torch.bfloat16, nsamples: int = 4) -> torch.Tensor:
    data = torch.randn(nsamples, 8, 16, generator=torch.Generator().manual_seed(0)).to(dtype)
    with write_activations(path, nsamples, 8, 16, dtype, block=0) as writer:
        writer.write(0, data[:2])
        writer.write(2, data[2:])
    return data


def hessians(path: Path) -> dict[str, torch.Tensor]:
    X = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))
    H = {"attn_in": X.T @ X, "mlp_out": torch.eye(16)}
    write_hessians(path, H, {"block": 0, "nsamples": 4})
    return H


def tokens(path: Path) -> np.ndarray:
    ids = np.random.default_rng(0).integers(0, 128, size=(4, 32)).astype(np.int32)
    write_tokens(path, ids, {"source": "test"})
    return ids


def chunks(store: Path, array: str) -> list[Path]:
    return sorted(p for p in (store / array).rglob("*") if p.is_file() and p.name != "zarr.json")


def read_all(store: Path) -> None:
    """Open ``store`` and read every array through the public API."""
    kind = zarr.open_group(str(store), mode="r").attrs.get("kind")
    if kind == "tokens":
        read_tokens(store)
    elif kind == "activations":
        acts = Activations(store)
        acts.read(0, acts.nsamples)
    else:
        store_h = Hessians(store)
        for name in store_h.group.array_keys():
            store_h.get(name)


def refused(store: Path, *words: str) -> str:
    with pytest.raises(StoreError) as info:
        read_all(store)
    message = str(info.value)
    assert str(store) in message and f"delete {store} {FIX}" in message, message
    for word in words:
        assert word in message, message
    return message


@pytest.fixture(params=["tokens", "activations", "hessians"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """One complete store of each kind (its kind also in attribute ``kind``, for ``read_all``)."""
    path = tmp_path / f"{request.param}.zarr"
    if request.param == "tokens":
        write_tokens(path, np.arange(64, dtype=np.int32).reshape(2, 32), {"kind": "tokens"})
    elif request.param == "activations":
        with write_activations(path, 3, 8, 16, torch.float32, block=0, attrs={"kind": "activations"}) as w:
            w.write(0, torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(2)))
    else:
        write_hessians(path, {"attn_in": torch.eye(16) * 3.0}, {"block": 0, "kind": "hessians"})
    return path


def test_round_trips_are_lossless(tmp_path: Path) -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        path = tmp_path / f"inputs_{dtype}.zarr"
        data = activations(path, dtype)
        acts = Activations(path)
        assert acts.dtype == dtype and acts.read(0, 4).dtype == dtype
        assert torch.equal(acts.read(1, 3), data[1:3])
        assert "manifest" not in acts.attrs and acts.attrs["complete"] is True
    H = hessians(tmp_path / "hessians_0.zarr")
    store = Hessians(tmp_path / "hessians_0.zarr")
    assert all(torch.equal(store.get(name), H[name]) for name in H)
    ids = tokens(tmp_path / "tokens.zarr")
    got, attrs = read_tokens(tmp_path / "tokens.zarr")
    assert np.array_equal(got, ids) and attrs["source"] == "test"
    manifest = zarr.open_group(str(tmp_path / "tokens.zarr"), mode="r").attrs["manifest"]
    assert manifest["arrays"]["tokens"]["chunks"] == 4  # one sample per chunk, all written


def test_a_snakemake_directory_output_reads_without_a_warning(tmp_path: Path) -> None:
    """Snakemake marks a directory output with a ``.snakemake_timestamp`` file: the store reads as it was
    written and zarr's warning about the file ("not recognized as a component of a Zarr hierarchy") is not
    printed in the job's log; any other stray file still is."""
    import warnings

    ids = tokens(tmp_path / "tokens.zarr")
    (tmp_path / "tokens.zarr" / ".snakemake_timestamp").touch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, _ = read_tokens(tmp_path / "tokens.zarr")
    assert np.array_equal(got, ids) and not caught, [str(w.message) for w in caught]
    (tmp_path / "tokens.zarr" / "stray").touch()
    with pytest.warns(UserWarning, match="Object at stray is not recognized"):
        read_tokens(tmp_path / "tokens.zarr")


def test_a_store_never_replaces_a_directory_that_is_not_one(tmp_path: Path) -> None:
    """A store is written whole in place of what is at its path: a directory of other files there is
    refused, named, and kept (``thanos capture --out proj`` deleted ``proj``); a store is replaced."""
    mine = tmp_path / "proj"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(PathError, match=r"not a zarr store is there, .*\(.*proj\); give the store a path"):
        tokens(mine)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]
    tokens(tmp_path / "tokens.zarr")
    ids = tokens(tmp_path / "tokens.zarr")  # written again over itself
    assert np.array_equal(read_tokens(tmp_path / "tokens.zarr")[0], ids)


def test_all_zero_chunks_are_written_and_verified(tmp_path: Path) -> None:
    """A chunk of zeros (the fill value) is stored too: a missing chunk file always means damage."""
    write_hessians(tmp_path / "h.zarr", {"attn_in": torch.zeros(8, 8)}, {"block": 0})
    assert len(chunks(tmp_path / "h.zarr", "attn_in")) == 1
    assert torch.equal(Hessians(tmp_path / "h.zarr").get("attn_in"), torch.zeros(8, 8))


def test_deleted_chunk_is_refused(store: Path) -> None:
    chunks(store, next(zarr.open_group(str(store), mode="r").array_keys()))[-1].unlink()
    refused(store, "chunk files", "manifest lists")


def test_deleted_hessian_chunk_never_reads_as_zeros(tmp_path: Path) -> None:
    """The reported failure: block 0's attn_in Hessian chunk deleted -> q/k/v were pruned to all zeros."""
    path = tmp_path / "hessians_0.zarr"
    hessians(path)
    chunks(path, "attn_in")[0].unlink()
    with pytest.raises(StoreError, match="'attn_in' has 0 chunk files"):
        Hessians(path)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_flipped_byte_is_refused(store: Path, where: str) -> None:
    chunk = chunks(store, next(zarr.open_group(str(store), mode="r").array_keys()))[0]
    data = bytearray(chunk.read_bytes())
    data[{"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[where]] ^= 0x01
    chunk.write_bytes(bytes(data))
    refused(store)


def test_every_single_byte_flip_of_a_chunk_is_refused(tmp_path: Path) -> None:
    """Without checksums most flips in a tokens chunk decoded silently to other token ids."""
    path = tmp_path / "tokens.zarr"
    tokens(path)
    chunk = chunks(path, "tokens")[1]
    original = chunk.read_bytes()
    for i in range(len(original)):
        for bit in (0x01, 0x80):
            data = bytearray(original)
            data[i] ^= bit
            chunk.write_bytes(bytes(data))
            with pytest.raises(StoreError, match="tokens store"):
                read_tokens(path)
    chunk.write_bytes(original)
    read_tokens(path)


def test_truncated_chunk_is_refused_on_open(store: Path) -> None:
    chunk = chunks(store, next(zarr.open_group(str(store), mode="r").array_keys()))[0]
    chunk.write_bytes(chunk.read_bytes()[:-10])
    with pytest.raises(StoreError, match="do not match the manifest") as info:
        open_complete(store, "test")
    assert str(store) in str(info.value)


def test_chunk_swapped_between_samples_is_refused(tmp_path: Path) -> None:
    """Two valid chunks (each with a correct crc32c) in each other's place: the manifest catches it."""
    path = tmp_path / "inputs_0.zarr"
    activations(path)
    first, second = chunks(path, "hidden")[:2]
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    with pytest.raises(StoreError, match="do not match the manifest"):
        Activations(path)


def edit_attrs(store: Path, edit) -> None:
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    edit(doc["attributes"])
    meta.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda a: a.pop("manifest"), ["no 'manifest'"]),
        (lambda a: a["manifest"].update(version=0), ["no 'manifest'"]),
        (lambda a: a["manifest"]["arrays"].popitem(), ["its manifest lists"]),
        (lambda a: next(iter(a["manifest"]["arrays"].values())).update(chunks=99), ["manifest lists 99"]),
        (lambda a: next(iter(a["manifest"]["arrays"].values())).update(digest="0" * 64), ["manifest"]),
        (lambda a: a.update(block=7), ["attributes do not match"]),
        (lambda a: a.pop("complete"), ["incomplete"]),
    ],
    ids=["no-manifest", "old-version", "array-unlisted", "chunk-count", "digest", "attribute", "incomplete"],
)
def test_manifest_tampering_is_refused(store: Path, edit, words: list[str]) -> None:
    edit_attrs(store, edit)
    refused(store, *words)


def test_array_metadata_edit_is_refused(tmp_path: Path) -> None:
    """A changed dtype in an array's zarr.json would reinterpret every chunk."""
    path = tmp_path / "hessians_0.zarr"
    hessians(path)
    meta = path / "attn_in" / "zarr.json"
    meta.write_text(meta.read_text().replace('"float32"', '"int32"'))
    with pytest.raises(StoreError, match="'attn_in' do not match the manifest"):
        Hessians(path)


def test_store_without_manifest_is_refused(tmp_path: Path) -> None:
    """A store written before chunk checksums (complete, no manifest): refused, rebuilt on rerun."""
    path = tmp_path / "inputs_0.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("hidden", shape=(2, 8, 16), chunks=(1, 8, 16), dtype="float32")[:] = 1.0
    group.attrs.update({"block": 0, "nsamples": 2, "seqlen": 8, "hidden_size": 16, "dtype": "float32"})
    group.attrs["complete"] = True
    with pytest.raises(StoreError) as info:
        Activations(path)
    assert "no 'manifest'" in str(info.value) and f"delete {path} {FIX}" in str(info.value)


def test_missing_and_incomplete_stores(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run the stage that writes it first"):
        Activations(tmp_path / "nothing.zarr")
    path = tmp_path / "inputs_0.zarr"
    with (
        pytest.raises(ValueError, match="only 2 of the 4 chunks"),
        write_activations(path, 4, 8, 16, torch.float32, block=0) as writer,
    ):
        writer.write(0, torch.ones(2, 8, 16))
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_unreadable_metadata_is_refused(store: Path) -> None:
    (store / "zarr.json").write_text("{not json")
    with pytest.raises(StoreError, match="not a readable zarr") as info:
        open_complete(store, "test")
    assert f"delete {store} {FIX}" in str(info.value)


def test_safetensors_errors_name_the_file(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    good = tmp_path / "model.safetensors"
    save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2)}, str(good))
    assert torch.equal(load_safetensors(good)["w"], torch.arange(6.0).reshape(2, 3))
    with open_safetensors(good) as handle:
        assert sorted(handle.keys()) == ["b", "w"]
        assert handle.get_slice("w")[1:].tolist() == [[3.0, 4.0, 5.0]]
    data = good.read_bytes()
    for cut, words in ((len(data) - 8, "incomplete metadata"), (4, "header too small")):
        bad = tmp_path / f"cut{cut}.safetensors"
        bad.write_bytes(data[:cut])
        with pytest.raises(SafetensorsFileError) as info:
            load_safetensors(bad)
        assert str(bad) in str(info.value) and words in str(info.value) and "truncated" in str(info.value)
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        load_safetensors(tmp_path / "missing.safetensors")
