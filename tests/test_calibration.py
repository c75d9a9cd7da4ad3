"""Calibration: the SparseGPT/Wanda sampling procedure, provenance, determinism and bad sources."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import corpus_sentences, make_tiny_model, write_corpus
from transformers import AutoTokenizer

from thanos.cli import main
from thanos.data.calibration import sample_windows
from thanos.data.storage import read_tokens
from thanos.data.textdata import corpus_checksum
from thanos.stages.calibrate import calibrate


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("calib-model"), "llama")


def reference_windows(docs: list[str], tokenizer, nsamples: int, seqlen: int, seed: int) -> np.ndarray:
    """The loop of SparseGPT's datautils.get_c4, verbatim apart from the data source."""
    random.seed(seed)
    out = []
    for _ in range(nsamples):
        while True:
            i = random.randint(0, len(docs) - 1)
            trainenc = tokenizer(docs[i], return_tensors="pt")
            if trainenc.input_ids.shape[1] > seqlen:
                break
        i = random.randint(0, trainenc.input_ids.shape[1] - seqlen - 1)
        out.append(trainenc.input_ids[:, i : i + seqlen].numpy()[0])
    return np.stack(out)


def test_matches_reference_procedure(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # short documents mixed in: the retry loop must consume the same random draws
    docs = [" ".join(corpus_sentences(n % 4 + 1, seed=n)) for n in range(30)]
    got = sample_windows(docs, tokenizer, nsamples=6, seqlen=20, seed=3)
    np.testing.assert_array_equal(got, reference_windows(docs, tokenizer, 6, 20, 3))


def test_tokens_store_provenance_and_determinism(model_dir: Path, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "data" / "calib.jsonl")
    first = tmp_path / "a" / "tokens.zarr"
    second = tmp_path / "b" / "tokens.zarr"
    for out in (first, second):
        assert main(["calibrate", "--model", str(model_dir), "--source", str(corpus), "--nsamples", "6",
                     "--seqlen", "24", "--seed", "0", "--out", str(out)]) == 0  # fmt: skip
    tokens, attrs = read_tokens(first)
    assert tokens.dtype == np.int32 and tokens.shape == (6, 24)
    assert attrs["complete"] is True
    assert attrs["source"] == str(corpus) and attrs["checksum"] == corpus_checksum(corpus)
    assert attrs["seed"] == 0 and attrs["nsamples"] == 6 and attrs["seqlen"] == 24
    assert attrs["vocab_size"] == len(AutoTokenizer.from_pretrained(model_dir))
    assert attrs["tokenizer"] == str(model_dir)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for rel in files:  # byte-identical stores, metadata included
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    other = calibrate(model_dir, corpus, tmp_path / "c.zarr", nsamples=6, seqlen=24, seed=1)
    assert other["seed"] == 1
    assert not np.array_equal(read_tokens(tmp_path / "c.zarr")[0], tokens)


def test_text_parquet_and_directory_sources(model_dir: Path, tmp_path: Path) -> None:
    text = write_corpus(tmp_path / "dir" / "a.txt", kind="text")
    lines = write_corpus(tmp_path / "j.jsonl").read_text().splitlines()
    docs = [{"body": json.loads(line)["text"]} for line in lines]
    pq.write_table(pa.Table.from_pylist(docs), tmp_path / "dir" / "b.parquet")
    calibrate(model_dir, text, tmp_path / "t.zarr", nsamples=4, seqlen=16)
    with pytest.raises(ValueError, match="no 'text' column"):
        calibrate(model_dir, tmp_path / "dir", tmp_path / "d.zarr", nsamples=4, seqlen=16)
    parquet = tmp_path / "dir" / "b.parquet"
    attrs = calibrate(model_dir, parquet, tmp_path / "p.zarr", 4, 16, text_field="body")
    assert attrs["documents"] == 24


def test_default_seqlen_is_capped_at_max_positions(model_dir: Path, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "long.jsonl", docs=4, words=100)
    attrs = calibrate(model_dir, corpus, tmp_path / "t.zarr", nsamples=2)
    assert attrs["seqlen"] == 64  # the tiny model's max_position_embeddings
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        calibrate(model_dir, corpus, tmp_path / "u.zarr", nsamples=2, seqlen=65)


def test_bad_sources(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "tokens.zarr"
    with pytest.raises(FileNotFoundError, match="not found"):
        calibrate(model_dir, tmp_path / "missing.jsonl", out, nsamples=2, seqlen=8)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="empty"):
        calibrate(model_dir, tmp_path / "empty.txt", out, nsamples=2, seqlen=8)
    short = write_corpus(tmp_path / "short.jsonl", docs=3, words=10)
    with pytest.raises(ValueError, match="no calibration document is longer than seqlen=32"):
        calibrate(model_dir, short, out, nsamples=2, seqlen=32)
    assert not out.exists() and not list(tmp_path.glob(".tokens.zarr*"))
    assert main(["calibrate", "--model", str(model_dir), "--source", str(short), "--seqlen", "32",
                 "--nsamples", "2", "--out", str(out)]) == 2  # fmt: skip


def test_failed_run_keeps_the_existing_store(model_dir: Path, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl")
    out = tmp_path / "tokens.zarr"
    calibrate(model_dir, corpus, out, nsamples=2, seqlen=8)
    before = read_tokens(out)[0]
    with pytest.raises(ValueError):
        calibrate(model_dir, corpus, out, nsamples=2, seqlen=60)  # documents have 53 tokens
    np.testing.assert_array_equal(read_tokens(out)[0], before)


def test_incomplete_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("tokens", shape=(2, 4), dtype="int32")
    with pytest.raises(ValueError, match=f"delete {path}"):
        read_tokens(path)
