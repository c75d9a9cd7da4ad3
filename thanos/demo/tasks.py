"""The demo zero-shot task ``demo_nextsentence``, built from held-out (test) articles.

Each document gives two consecutive sentences of a test article as context and four candidate next
sentences: the true one and three distractors drawn from other test articles (of similar length). It is
written in lm-eval's local task format: a directory with a task YAML, the data as jsonl and a small
``utils.py`` that loads the jsonl from beside itself (so the directory can be moved), loadable with
``lm_eval.tasks.TaskManager(include_path=DIR)``; ``output_type: multiple_choice``, metrics acc, acc_norm.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from thanos.atomic import atomic_path
from thanos.demo.wikidump import Article

TASK_NAME = "demo_nextsentence"
TASK_VERSION = 1.0
NUM_CHOICES = 4
MIN_WORDS, MAX_WORDS = 6, 40

TASK_YAML = f"""\
# Offline zero-shot task of the Thanos demo: pick the true next sentence of a Wikipedia passage.
# Built by `python -m thanos demo-data` from the held-out (test) articles; text CC BY-SA (Wikipedia).
task: {TASK_NAME}
custom_dataset: !function utils.load_docs
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{context}}}}"
doc_to_choice: choices
doc_to_target: label
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: {TASK_VERSION}
"""

TASK_UTILS = f'''\
"""Loads {TASK_NAME}.jsonl from beside this file (lm-eval custom_dataset)."""

import json
from pathlib import Path

import datasets


def load_docs(**kwargs):
    path = Path(__file__).with_name("{TASK_NAME}.jsonl")
    with open(path, encoding="utf-8") as handle:
        docs = [json.loads(line) for line in handle if line.strip()]
    return datasets.DatasetDict({{"test": datasets.Dataset.from_list(docs)}})
'''

# Sentence boundary: end punctuation (optionally closing quote/bracket), space, then an upper-case start.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(]?[A-Z0-9])")
_ABBREVIATIONS = {
    *("mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "rev", "vs", "etc", "no"),
    *("c", "ca", "e.g", "i.e", "approx", "est", "fig", "vol", "ed", "u.s", "u.k", "jan", "feb", "aug"),
    *("sept", "oct", "nov", "dec", "inc", "ltd", "co", "corp", "mt", "ft", "ave"),
}


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of a paragraph (a rule-based splitter that keeps abbreviations and initials together)."""
    pieces = []
    start = 0
    for match in _BOUNDARY.finditer(paragraph):
        candidate = paragraph[start : match.start()].rstrip("\"')]")
        last = (candidate.rsplit(None, 1)[-1] if candidate.split() else "").lstrip("\"'([").rstrip(".")
        if last.lower() in _ABBREVIATIONS or re.fullmatch(r"[A-Z]|[A-Z]\.[A-Z]", last):
            continue
        pieces.append(paragraph[start : match.end()].strip())
        start = match.end()
    pieces.append(paragraph[start:].strip())
    return [p for p in pieces if p]


def _usable(sentence: str) -> bool:
    n = len(sentence.split())
    return MIN_WORDS <= n <= MAX_WORDS and sentence[-1] in ".!?\"')"


def build_docs(
    articles: Sequence[Article], seed: int = 0, max_docs: int = 500, per_article: int = 40
) -> list[dict]:
    """Multiple-choice documents ``{"id", "title", "context", "choices", "label"}`` (deterministic in
    ``seed``). Context: two consecutive sentences of one paragraph; gold: the sentence that follows;
    distractors: usable sentences of other articles whose length is within a factor 1.5 of the gold's."""
    if len(articles) < 2:
        raise ValueError("the next-sentence task needs at least two test articles (for distractors)")
    rng = random.Random(seed)
    pool: list[tuple[int, str]] = []  # (article index, sentence)
    candidates: list[tuple[int, str, str]] = []  # (article index, context, gold)
    for idx, article in enumerate(articles):
        mine = []
        for paragraph in article.text.split("\n\n"):
            sentences = split_sentences(paragraph)
            pool.extend((idx, s) for s in sentences if _usable(s))
            for i in range(2, len(sentences)):
                if _usable(sentences[i]) and all(len(s.split()) >= 4 for s in sentences[i - 2 : i]):
                    mine.append((idx, f"{sentences[i - 2]} {sentences[i - 1]}", sentences[i]))
        rng.shuffle(mine)
        candidates.extend(mine[:per_article])
    rng.shuffle(candidates)
    docs = []
    for idx, context, gold in candidates:
        n = len(gold.split())
        similar = [s for j, s in pool if j != idx and n / 1.5 <= len(s.split()) <= n * 1.5 and s != gold]
        if len(similar) < NUM_CHOICES - 1:
            similar = [s for j, s in pool if j != idx and s != gold]
        distractors = rng.sample(sorted(set(similar)), NUM_CHOICES - 1)
        choices = [gold, *distractors]
        rng.shuffle(choices)
        docs.append(
            {
                "id": len(docs),
                "title": articles[idx].title,
                "context": context,
                "choices": choices,
                "label": choices.index(gold),
            }
        )
        if len(docs) >= max_docs:
            break
    if not docs:
        raise ValueError("no next-sentence documents could be built from the test articles")
    return docs


def write_task(out_dir: str | Path, docs: Sequence[dict]) -> Path:
    """Write the task directory ``out_dir/{TASK_NAME}/`` atomically; returns it."""
    target = Path(out_dir) / TASK_NAME
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / f"{TASK_NAME}.yaml").write_text(TASK_YAML, encoding="utf-8")
        (tmp / "utils.py").write_text(TASK_UTILS, encoding="utf-8")
        with open(tmp / f"{TASK_NAME}.jsonl", "w", encoding="utf-8") as handle:
            for doc in docs:
                handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return target
