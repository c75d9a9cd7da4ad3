"""``calibrate`` stage: sample calibration windows with the model's tokenizer and store them in zarr."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from thanos.data.calibration import load_source, sample_windows
from thanos.data.storage import write_tokens
from thanos.models import ModelHandle, as_handle, load_tokenizer

log = logging.getLogger(__name__)

DEFAULT_NSAMPLES = 128
DEFAULT_SEQLEN = 2048


def distinct_windows(tokens: np.ndarray) -> int:
    """How many of the sampled windows differ (a short corpus yields the same window several times)."""
    return len(np.unique(tokens, axis=0))


def calibrate(
    model: str | Path | ModelHandle,
    source: str | Path,
    out: str | Path,
    nsamples: int = DEFAULT_NSAMPLES,
    seqlen: int | None = None,
    seed: int = 0,
    text_field: str = "text",
) -> dict:
    """Write ``out`` (tokens.zarr): int32 (nsamples, seqlen) plus provenance attrs (with the count of
    distinct windows, warned about when below ``nsamples``); returns the attrs.

    ``seqlen`` defaults to min(2048, the model's max positions); a larger explicit value is refused.
    """
    handle = as_handle(model)
    adapter = handle.adapter
    if seqlen is None:
        seqlen = min(DEFAULT_SEQLEN, adapter.max_positions)
    elif seqlen > adapter.max_positions:
        limit = adapter.max_positions
        raise ValueError(f"--seqlen {seqlen} exceeds the model's max_position_embeddings {limit}")
    tokenizer = load_tokenizer(handle.path)
    documents, provenance = load_source(source, text_field)
    log.info("calibrate: %d x %d tokens from %s (seed %d)", nsamples, seqlen, provenance["source"], seed)
    tokens = sample_windows(documents, tokenizer, nsamples, seqlen, seed, source=provenance["source"])
    distinct = distinct_windows(tokens)
    if distinct < nsamples:
        log.warning(
            "calibrate: only %d distinct windows among nsamples=%d: the source has too few documents "
            "longer than seqlen=%d tokens, and the Hessians weigh the repeated windows several times; "
            "use a larger source (or lower nsamples/seqlen)",
            distinct,
            nsamples,
            seqlen,
        )
    attrs = provenance | {
        "text_field": text_field,
        "tokenizer": str(tokenizer.name_or_path),
        "tokenizer_class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "seed": seed,
        "nsamples": nsamples,
        "seqlen": seqlen,
        "distinct_windows": distinct,
    }
    write_tokens(out, tokens, attrs)
    return attrs
