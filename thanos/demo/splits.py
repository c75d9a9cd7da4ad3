"""Deterministic article-level splits of the demo corpus: train, calibration (C4's role) and test
(WikiText-2's role), written as jsonl files of ``{"title", "text"}`` records."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from thanos.demo.wikidump import Article
from thanos.files.atomic import atomic_path, sha256_file

SPLITS = ("train", "calib", "test")
# 8 of the 97 articles (~25k words) for test: enough for perplexity and the task, small enough that the
# demo evaluates its 28 models in minutes on 2 cores
TEST_FRACTION, CALIB_FRACTION = 0.08, 0.1


def split_key(title: str, seed: int) -> str:
    """Sort key of an article: sha256 of ``"{seed}:{title}"`` (independent of dump order and platform)."""
    return hashlib.sha256(f"{seed}:{title}".encode()).hexdigest()


def split_articles(
    articles: Sequence[Article],
    seed: int = 0,
    test_fraction: float = TEST_FRACTION,
    calib_fraction: float = CALIB_FRACTION,
) -> dict[str, list[Article]]:
    """Articles ordered by ``split_key``: the first ``round(test_fraction * n)`` go to test, the next
    ``round(calib_fraction * n)`` to calib, the rest to train. Each split keeps dump order."""
    if not 0 < test_fraction < 1 or not 0 < calib_fraction < 1 or test_fraction + calib_fraction >= 1:
        raise ValueError(
            "split fractions must be in (0, 1) and sum below 1, "
            f"got test {test_fraction}, calib {calib_fraction}"
        )
    n = len(articles)
    n_test = max(1, round(test_fraction * n))
    n_calib = max(1, round(calib_fraction * n))
    if n_test + n_calib >= n:
        raise ValueError(f"{n} articles are too few for test {n_test} + calib {n_calib} + train >= 1")
    order = sorted(range(n), key=lambda i: split_key(articles[i].title, seed))
    assign = {}
    for rank, i in enumerate(order):
        assign[i] = "test" if rank < n_test else "calib" if rank < n_test + n_calib else "train"
    return {name: [a for i, a in enumerate(articles) if assign[i] == name] for name in SPLITS}


def write_jsonl(path: str | Path, articles: Sequence[Article]) -> None:
    """One ``{"title", "text"}`` object per line, atomically (``thanos.data.textdata.read_documents``
    reads it)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for article in articles:
            handle.write(
                json.dumps({"title": article.title, "text": article.text}, ensure_ascii=False) + "\n"
            )


def read_jsonl(path: str | Path) -> list[Article]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run `python -m thanos demo-data` first")
    with open(path, encoding="utf-8") as handle:
        return [Article(**json.loads(line)) for line in handle if line.strip()]


def split_stats(path: str | Path, articles: Sequence[Article]) -> dict:
    return {
        "file": Path(path).name,
        "articles": len(articles),
        "paragraphs": sum(len(a.text.split("\n\n")) for a in articles),
        "words": sum(len(a.text.split()) for a in articles),
        "chars": sum(len(a.text) for a in articles),
        "sha256": sha256_file(path),
        "titles": [a.title for a in articles],
    }
