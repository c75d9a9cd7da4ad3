"""Publish a pruned model directory to a user's output directory, atomically.

The files are hard-linked where the file system allows it (a 140 GB model costs no copy), copied
otherwise; some text files (the model card) are written in place of the linked ones. The output appears
complete or not at all (``thanos.atomic.atomic_path``). An existing output is replaced only when it is a
previous result (it holds ``pruning_report.json``); anything else non-empty is refused.
"""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from thanos.atomic import atomic_path

MARKER = "pruning_report.json"


def check_out(out: Path) -> None:
    """Refuse an output that is a file, or a non-empty directory that is not a previous pruned model."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(
            f"--out {out} is not empty and is not a previous result (no {MARKER}); give a new or empty "
            "directory (a previous result of thanos prune-model is replaced)"
        )


def _files(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.is_file() and not p.name.startswith("."))


def _unchanged(model_dir: Path, out: Path, names: list[str], texts: dict[str, str]) -> bool:
    if not out.is_dir() or set(_files(out)) != set(names) | set(texts):
        return False
    for name in names:
        if name in texts:
            continue
        source, target = model_dir / name, out / name
        if not (os.path.samefile(source, target) or filecmp.cmp(source, target, shallow=False)):
            return False
    return all((out / name).read_bytes() == text.encode() for name, text in texts.items())


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copyfile(source, target)


def publish(model_dir: str | Path, out: str | Path, texts: dict[str, str] | None = None) -> bool:
    """Make ``out`` hold ``model_dir``'s files, with ``texts`` ({name: content}) written instead of (or
    besides) them. Returns False when ``out`` already held exactly that (then it is left untouched)."""
    model_dir, out, texts = Path(model_dir), Path(out), dict(texts or {})
    check_out(out)
    names = _files(model_dir)
    if _unchanged(model_dir, out, names, texts):
        return False
    with atomic_path(out, is_dir=True) as tmp:
        for name in names:
            if name not in texts:
                _link_or_copy(model_dir / name, tmp / name)
        for name, text in texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
    return True
