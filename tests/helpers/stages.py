"""Stages through the CLI in this process: a tiny model and its calibration tokens."""

from __future__ import annotations

from pathlib import Path

from conftest import make_tiny_model, write_corpus

from thanos.cli import main

NSAMPLES, SEQLEN = 6, 24


def cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def calibrated(root: Path, family: str, **kwargs) -> tuple[Path, Path]:
    """A tiny model and its calibration tokens."""
    model = make_tiny_model(root, family, **kwargs)
    tokens = root / f"{model.name}-tokens.zarr"
    corpus = write_corpus(root / "corpus.jsonl")
    assert cli("calibrate", "--model", model, "--source", corpus, "--nsamples", NSAMPLES, "--seqlen", SEQLEN,
               "--out", tokens) == 0  # fmt: skip
    return model, tokens
