"""A toy multiple-choice task in the demo task's format, for lm-eval offline."""

from __future__ import annotations

import random
from pathlib import Path

from conftest import WORDS

from thanos.demo import tasks


def toy_task(root: Path, n: int = 16) -> tuple[Path, list[dict]]:
    """A toy multiple-choice task in the demo task's format (``thanos.demo.tasks``), over ``WORDS``."""
    rng = random.Random(0)
    docs = []
    for i in range(n):
        choices = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for _ in range(3)]
        docs.append({"id": i, "title": "toy", "choices": choices, "label": i % 3})
    tasks.write_task(root, docs)
    return root, docs
