"""Calibration data: ``nsamples`` windows of ``seqlen`` tokens, sampled as SparseGPT and Wanda do.

``random.seed(seed)``; for each sample: pick a random document, tokenize it alone, retry while it has
<= seqlen tokens, then take a random window of seqlen tokens. Documents come from C4 (the first training
shard of allenai/c4 through ``datasets``) or from local text/jsonl/parquet files (``thanos.data.textdata``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from thanos.data.textdata import corpus_checksum, read_documents
from thanos.errors import PathError

log = logging.getLogger(__name__)

C4_DATASET = "allenai/c4"
C4_TRAIN_FILE = "en/c4-train.00000-of-01024.json.gz"
C4_DOCUMENTS = 2000  # C4's documents that choose a vocabulary (about 1 M words)


class _DatasetTexts(Sequence[str]):
    """The ``field`` of each row of a ``datasets.Dataset``, read on demand."""

    def __init__(self, dataset: Any, field: str) -> None:
        self.dataset = dataset
        self.field = field

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self.dataset[index][self.field]


def load_c4(text_field: str = "text") -> tuple[Sequence[str], dict[str, Any]]:
    """C4's first English training shard (as in SparseGPT/Wanda) and its provenance."""
    from datasets import load_dataset

    try:
        dataset = load_dataset(C4_DATASET, data_files={"train": C4_TRAIN_FILE}, split="train")
    except Exception as err:  # noqa: BLE001 - offline, missing file, hub errors: same advice
        raise ValueError(
            f"could not load C4 ({C4_DATASET}, {C4_TRAIN_FILE}) from the hub: {err}. Offline, download that "
            "file elsewhere and pass it (or a directory of text/jsonl/parquet files) as the source"
        ) from err
    provenance = {
        "source": "c4",
        "dataset": C4_DATASET,
        "data_files": C4_TRAIN_FILE,
        "checksum": dataset._fingerprint,
    }
    return _DatasetTexts(dataset, text_field), provenance


def load_source(source: str | Path, text_field: str = "text") -> tuple[Sequence[str], dict[str, Any]]:
    """Documents of ``source`` (``c4`` or a local file/directory) and their provenance."""
    if str(source).lower() == "c4":
        return load_c4(text_field)
    docs = read_documents(source, field=text_field)
    return docs, {"source": str(source), "checksum": corpus_checksum(source), "documents": len(docs)}


def text_documents(text: str, text_field: str = "text") -> list[str]:
    """The documents of a text that chooses a vocabulary's tokens (``c4``: its first ``C4_DOCUMENTS``)."""
    documents, _ = load_source(text, text_field)
    count = min(C4_DOCUMENTS, len(documents)) if text.lower() == "c4" else len(documents)
    return [documents[i] for i in range(count)]


def too_short(documents: Sequence[str], tokenizer: Any, seqlen: int) -> tuple[str, str]:
    """(what, fix) when no document is longer than ``seqlen`` tokens: the tokens found, and a seqlen and
    nsamples that would work."""
    lengths = [len(tokenizer(doc)["input_ids"]) for doc in documents]
    longest = max(lengths, default=0)
    what = (
        f"no calibration document is longer than seqlen={seqlen} tokens: {len(lengths)} document(s), "
        f"{sum(lengths)} tokens in all, the longest {longest}"
    )
    if longest < 3:
        return what, "give more text (documents are separated by blank lines in .txt files)"
    fit = longest - 1
    windows = sum(n // fit for n in lengths if n > fit)
    fix = (
        f"set seqlen to {fit} or less (prune-model --seqlen, config calibration.seqlen), with nsamples up "
        f"to about {windows} for distinct windows, or give longer documents (the paper: 128 x 2048 tokens)"
    )
    return what, fix


def sample_windows(
    documents: Sequence[str],
    tokenizer: Any,
    nsamples: int,
    seqlen: int,
    seed: int = 0,
    source: str | Path | None = None,
) -> np.ndarray:
    """int32 (nsamples, seqlen) token windows by the SparseGPT/Wanda procedure (bit-for-bit their draws).

    Raises ValueError when no document is longer than one window (instead of looping forever): a
    PathError naming ``source`` when given, with the tokens found and a seqlen that would work.
    """
    if nsamples < 1 or seqlen < 1:
        raise ValueError(f"nsamples and seqlen must be >= 1, got {nsamples} and {seqlen}")
    if not len(documents):
        raise ValueError("the calibration source has no documents")
    random.seed(seed)
    short: set[int] = set()
    tokens: dict[int, list[int]] = {}  # a document drawn again is not tokenized again (small corpora)
    windows = np.empty((nsamples, seqlen), dtype=np.int32)
    for sample in range(nsamples):
        while True:
            index = random.randint(0, len(documents) - 1)
            if index in short:
                continue
            if index not in tokens:
                tokens[index] = tokenizer(documents[index])["input_ids"]
            ids = tokens[index]
            if len(ids) > seqlen:
                break
            short.add(index)
            if len(short) == len(documents):
                what, fix = too_short(documents, tokenizer, seqlen)
                raise PathError(what, source, fix) if source is not None else ValueError(f"{what}; {fix}")
        start = random.randint(0, len(ids) - seqlen - 1)
        windows[sample] = ids[start : start + seqlen]
    return windows
