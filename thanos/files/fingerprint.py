"""Input fingerprints: the name, size and modification time (ns) of every file of a model directory that
the pipeline reads (weights, config, tokenizer).

A stat per file and no reading, so seconds even for a 140 GB checkpoint; a file rewritten in place (new
weights under the same name) changes its mtime_ns, and usually its size. ``model-info`` records the
fingerprint in ``model_info.json``; ``assemble`` refuses to publish a model whose input changed since. The
workflow keeps one fingerprint file per local model (``Layout.fingerprint``) and rewrites it, when it parses
its config, only if the fingerprint changed (``record``): every job that reads the model has that file as an
input, so the model's results rerun. Torch-free: the workflow imports it when it parses its config.
"""

from __future__ import annotations

import json
import os
import time
from fnmatch import fnmatch
from pathlib import Path

from thanos.files.atomic import write_json

# the files a model directory is read through (and what is downloaded of a hub model)
MODEL_FILES = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken")

Fingerprint = dict[str, dict[str, int]]


def model_fingerprint(model_dir: str | os.PathLike) -> Fingerprint:
    """{file name: {size, mtime_ns}} of the model files directly in ``model_dir`` (symlinks followed, as a
    hub snapshot's are), sorted by name."""
    found: Fingerprint = {}
    for entry in sorted(os.scandir(model_dir), key=lambda e: e.name):
        if entry.name.startswith(".") or not any(fnmatch(entry.name, p) for p in MODEL_FILES):
            continue
        try:
            st = entry.stat()  # follows symlinks
        except FileNotFoundError:
            continue  # a dangling link: the model cannot be read through it either
        if entry.is_file():
            found[entry.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return found


def file_key(path: str | os.PathLike) -> tuple[int, int, int] | None:
    """A file as a key of what was read from it: its size, modification time and inode (one written again
    is another key); None where it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def changed_files(old: Fingerprint, new: Fingerprint) -> list[str]:
    """The names added, removed or changed between two fingerprints."""
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def record(path: str | os.PathLike, fingerprint: Fingerprint) -> list[str]:
    """Write ``fingerprint`` to ``path`` unless it already holds it; return the changed file names.

    A first record gets the modification time of the newest model file (results computed after the model
    stay valid, as Snakemake's own mtime rule has it); a changed one gets the current time, so that
    everything depending on it is older and reruns, even when the new files carry old mtimes (``cp -p``).
    """
    path = Path(path)
    previous = json.loads(path.read_text()) if path.is_file() else None
    if previous == fingerprint:
        return []
    write_json(path, fingerprint)
    if previous is None:
        newest = max((f["mtime_ns"] for f in fingerprint.values()), default=time.time_ns())
        os.utime(path, ns=(newest, newest))
        return []
    return changed_files(previous, fingerprint)


def check_unchanged(model_dir: str | os.PathLike, recorded: Fingerprint | None, what: str) -> None:
    """Refuse a model whose files changed since ``recorded`` was taken (``what`` says where it was)."""
    if recorded is None:
        return
    changed = changed_files(recorded, model_fingerprint(model_dir))
    if changed:
        raise ValueError(
            f"model {model_dir} changed since {what} was written ({', '.join(changed[:5])}: size or "
            "modification time differ); run the workflow again: the model's results are recomputed"
        )
