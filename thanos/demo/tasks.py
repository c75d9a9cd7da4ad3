"""The demo zero-shot task ``demo_wordorder``, built from held-out (test) articles.

Each document is one sentence of a test article in four versions: the true one and three with the same
words in another order (two distant words swapped, and two different shuffles of all the words; the
final punctuation stays at the end). There is no context: each choice is scored from the
beginning-of-text token on (lm-eval's rule for an empty context), so the model must judge the sentence on
its own. Every choice has the same words, so a model that only knows which words are frequent (a unigram
model) is at chance (25 %); what decides is the model's knowledge of word order.

It is written in lm-eval's local task format: a directory with a task YAML, the data as jsonl and a small
``utils.py`` that loads the jsonl from beside itself (so the directory can be moved), loadable with
``lm_eval.tasks.TaskManager(include_path=DIR)``; ``output_type: multiple_choice``, metrics acc, acc_norm.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from thanos.demo.wikidump import Article
from thanos.files.atomic import atomic_path

TASK_NAME = "demo_wordorder"
TASK_VERSION = 1.0
NUM_CHOICES = 4
MIN_WORDS, MAX_WORDS = 6, 24  # short sentences: each document is scored four times

TASK_YAML = f"""\
# Offline zero-shot task of the Thanos demo: pick the sentence whose words are in the true order
# (no context: each choice is scored from the beginning-of-text token on).
# Built by `python -m thanos demo-data` from the held-out (test) articles; text CC BY-SA (Wikipedia).
task: {TASK_NAME}
custom_dataset: !function utils.load_docs
output_type: multiple_choice
test_split: test
doc_to_text: ""
doc_to_choice: choices
doc_to_target: label
target_delimiter: ""
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


def _word_order_variants(gold: str, rng: random.Random) -> list[str] | None:
    """Three distinct versions of ``gold`` with the same words in another order, or None when the
    sentence has too few distinct words: two distant words swapped (the subtle one), and two different
    shuffles of all the words. The sentence's final punctuation stays at the end."""
    words = gold.split()
    end = ""
    while words[-1] and words[-1][-1] in ".!?\"')" and len(end) < 3:
        end = words[-1][-1] + end
        words[-1] = words[-1][:-1]
    if not words[-1]:
        words.pop()
    distant = [(i, j) for i in range(len(words)) for j in range(i + 2, len(words)) if words[i] != words[j]]
    if not distant:
        return None
    i, j = rng.choice(distant)
    order = list(words)
    order[i], order[j] = order[j], order[i]
    variants = [" ".join(order) + end]
    for _ in range(40):
        order = list(words)
        rng.shuffle(order)
        candidate = " ".join(order) + end
        if candidate != gold and candidate not in variants:
            variants.append(candidate)
            if len(variants) == NUM_CHOICES - 1:
                return variants
    return None


def build_docs(
    articles: Sequence[Article], seed: int = 0, max_docs: int = 300, per_article: int = 100
) -> list[dict]:
    """Multiple-choice documents ``{"id", "title", "choices", "label"}`` (deterministic in ``seed``): a
    sentence of MIN_WORDS to MAX_WORDS words (at most ``per_article`` per article) and three versions of it
    with the same words in another order (two distant words swapped, two shuffles), so that only the
    model's knowledge of word order decides."""
    rng = random.Random(seed)
    candidates: list[tuple[int, str]] = []  # (article index, sentence)
    for idx, article in enumerate(articles):
        mine = [
            (idx, sentence)
            for paragraph in article.text.split("\n\n")
            for sentence in split_sentences(paragraph)
            if _usable(sentence)
        ]
        rng.shuffle(mine)
        candidates.extend(mine[:per_article])
    rng.shuffle(candidates)
    docs = []
    for idx, gold in candidates:
        distractors = _word_order_variants(gold, rng)
        if distractors is None:
            continue
        choices = [gold, *distractors]
        rng.shuffle(choices)
        docs.append(
            {"id": len(docs), "title": articles[idx].title, "choices": choices, "label": choices.index(gold)}
        )
        if len(docs) >= max_docs:
            break
    if not docs:
        raise ValueError("no word-order documents could be built from the test articles")
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
