"""Publish a pruned model directory to a user's output directory, atomically, as a copy it owns.

Every file is copied, never linked: an edit, truncation or deletion of anything under the output cannot
reach the working directory, so it cannot change what a later publish produces. Each file is checked
while it is copied against the digest ``assemble`` recorded (``thanos.files.digests``): a working directory
changed since it was computed is refused, naming the file, instead of being published. Some text files
(the model card) are written in place of the copied ones, and the published ``pruning_report.json``
records their digests instead: the output's record describes the output. It appears complete or not at all
(``thanos.files.atomic.atomic_path``). An existing output is replaced only when it is a previous result (it
holds ``pruning_report.json``); anything else non-empty is refused. An output that already holds exactly
this model is left untouched (its files are read and compared with the record, nothing is written). What
an output holds beside the model's files (``users``: notes, evaluation results; not weights) is the user's:
never a difference, and kept when the model is written again.

Cost: one read of the model and one write (about the time of ``cp -r``), plus sha256 at about 1.7 GB/s
on one core; the output takes as much disk space as the model.

``release`` then makes the output the only full copy (``--keep needed``): the working directory's copy of
the weights is deleted, and a record (``RELEASED``) of the output's weight files (names, sizes,
modification times) is kept beside the assembled model's small files (its report, config, card,
``sparsity.json``): the recipe stays done, and ``intact`` tells a rerun whether the output still holds those
files (else the model is assembled again). A later publish to the same output rewrites the texts alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from thanos.errors import Option, OptionError, PathError
from thanos.files import digests
from thanos.files.atomic import atomic_path
from thanos.files.layout import SEARCH_RECORD, WEIGHT_SUFFIXES
from thanos.files.ledger import Entry, recorded

MARKER = digests.REPORT
RELEASED = ".published.json"  # the working directory's weights were deleted: the output holds them
WEIGHTS = "*.safetensors"


def check_directory(option: str, path: Path) -> None:
    """Refuse a directory option that cannot be one: a file, or a path under a file or under a directory
    this process cannot write to (found before any work instead of when the path is first written)."""
    if path.exists() and not path.is_dir():
        raise OptionError(Option(option, str(path)), " is a file; give a directory")
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent != path and not parent.is_dir():
        raise OptionError(
            Option(option, str(path)), f" is under {parent}, a file; give a path in a directory"
        )
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(
            Option(option, str(path)), f" cannot be created: {parent} is not writable; give another directory"
        )


def check_out(out: Path) -> None:
    """Refuse an output that is a file, or a non-empty directory that is not a previous pruned model."""
    check_replaceable(out, "out", MARKER, "thanos prune-model")


def check_replaceable(out: str | Path, option: str, marker: str | None, command: str) -> None:
    """Refuse a directory ``command`` writes whole (``atomic_path``: whatever was there is deleted) when it
    is a file, or a non-empty directory that is not ``command``'s previous result (the file ``marker`` in
    it; None: it leaves none, only a new or empty directory is taken)."""
    out = Path(out)
    check_directory(option, out)
    if marker == MARKER and (out / "sizes.json").is_file():  # prune-model's several sizes: not one model
        raise OptionError(
            Option(option, str(out)),
            " holds the models of several sizes (sizes.json: params0.15/, ...), and this writes one model; "
            "give another directory, or delete those models first",
        )
    if out.is_dir() and any(out.iterdir()) and not (marker and (out / marker).is_file()):
        previous = f" and is not a previous result (no {marker})" if marker else ""
        again = f"a previous result of {command} is replaced" if marker else f"{command} writes it whole"
        raise OptionError(
            Option(option, str(out)), f" is not empty{previous}; give a new or empty directory ({again})"
        )


def users(out: Path, files: dict[str, dict], texts: dict[str, str]) -> list[str]:
    """What ``out`` holds that is neither the model's (its recorded files, the texts, the report, a size's
    ``search.json``) nor hidden nor weights nor a weights' index: the user's (notes, evaluation results),
    kept by every publish and never a difference. Weights not of the model are not kept: a loader that
    reads every ``*.safetensors`` of a directory (vLLM) would read them with the model's."""
    if not out.is_dir():
        return []
    ours = {*files, *texts, MARKER, SEARCH_RECORD}
    return sorted(
        entry.name
        for entry in out.iterdir()
        if entry.name not in ours and not entry.name.startswith(".")
        and not entry.name.endswith((*WEIGHT_SUFFIXES, ".index.json"))
    )  # fmt: skip


def _differences(
    out: Path, published: dict[str, dict], report: str, skip: set[str] | None = None
) -> list[str]:
    """How ``out`` differs from what a publish would write (its files read and compared with the record
    ``published``, its report with ``report``; names in ``skip`` not read); empty when it holds exactly
    that."""
    if not out.is_dir() or not any(out.iterdir()):
        return ["new"]
    if not (out / MARKER).is_file():
        return [f"{MARKER} is missing"]
    text = (out / MARKER).read_text(encoding="utf-8")
    if text != report:
        return _report_differs(out, text, report)
    return digests.differences(out, published, skip=skip or ())


def _report_differs(out: Path, text: str, report: str) -> list[str]:
    """Why ``out``'s report is not ``report``: another model or recipe, or for the same ones, what was
    edited in ``out`` since it was published (found by ``stat``, as ``digests.edited`` does), or else a
    model computed again."""
    try:
        before, now = json.loads(text), json.loads(report)
    except ValueError:
        return [f"{MARKER} differs (not the report of a result)"]
    if (before.get("model"), before.get("recipe")) != (now.get("model"), now.get("recipe")):
        return [f"{MARKER} differs (another model or recipe)"]
    return digests.edited(out) or [f"{MARKER} differs (the same model and recipe, computed again)"]


def _copy_verified(source: Path, target: Path, expected: dict) -> None:
    """Copy ``source`` to ``target`` and check, in the same pass, that it holds the recorded bytes."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        size, sha256 = digests.sha256_stream(reader, writer)
    if (size, sha256) != (expected["bytes"], expected["sha256"]):
        raise PathError(
            "the pruned model's file differs from what was computed (size or sha256 differs from the record "
            "in pruning_report.json); nothing was published",
            source,
            f"delete {source.parent} and run the same command again: it is reassembled from the cached "
            "pruned layers (pruned again where --keep needed deleted them)",
        )


def _published_report(model_dir: Path, files: dict[str, dict], texts: dict[str, str]) -> tuple[dict, str]:
    """The published files' record and the published report's text: the texts' digests replace the ones of
    the files they replace (the output's record describes the output)."""
    published = files | {
        name: {"bytes": len(text.encode()), "sha256": hashlib.sha256(text.encode()).hexdigest()}
        for name, text in texts.items()
    }
    report = json.loads((model_dir / MARKER).read_text(encoding="utf-8")) | {"files": published}
    return published, json.dumps(report, indent=2, default=str) + "\n"


def update_texts(model_dir: str | Path, out: str | Path, texts: dict[str, str]) -> None:
    """Rewrite ``texts`` (the model card) and the report of ``out``, a model ``publish`` wrote from
    ``model_dir``, each file atomically; the weights are not copied again. A run stopped between two files
    leaves a report whose record of the card differs, and the next publish writes ``out`` again."""
    model_dir, out = Path(model_dir), Path(out)
    _, report_text = _published_report(model_dir, digests.recorded(model_dir), texts)
    for name, text in (texts | {MARKER: report_text}).items():
        with atomic_path(out / name) as tmp:
            tmp.write_text(text, encoding="utf-8")


def weight_files(out: str | Path) -> dict[str, list[int]]:
    """``out``'s weight files as published: {name: [size, modification time (ns)]} (an edit, a truncation
    or a deletion changes it)."""
    stats = {path.name: path.stat() for path in sorted(Path(out).glob(WEIGHTS))}
    return {name: [stat.st_size, stat.st_mtime_ns] for name, stat in stats.items()}


def _release(model_dir: Path, out: Path) -> tuple[Entry, dict[str, Any]]:
    """``out`` holding ``model_dir``'s weights, and what identifies it now: the ledger's entry (its record
    ``RELEASED``, ``thanos.files.ledger``) and its inputs (``out``'s path and weight files)."""
    return Entry(out, model_dir / RELEASED), {"out": str(out.resolve()), "weights": weight_files(out)}


def release(model_dir: str | Path, out: str | Path) -> None:
    """Delete ``model_dir``'s weights now that ``out`` (published from it) holds them, recording ``out``'s
    weight files first (a run stopped in between leaves a released directory, weights partly deleted)."""
    model_dir = Path(model_dir)
    entry, inputs = _release(model_dir, Path(out))
    entry.write(inputs)
    for path in model_dir.glob(WEIGHTS):
        path.unlink()


def released(model_dir: str | Path) -> bool:
    """Whether ``model_dir``'s weights were deleted for the output that holds them (``release``)."""
    return (Path(model_dir) / RELEASED).is_file()


def released_to(model_dir: str | Path) -> str:
    """The output a released ``model_dir``'s weights were published to (as recorded)."""
    record = recorded(Path(model_dir) / RELEASED)
    return str(record["out"]) if isinstance(record, dict) and "out" in record else "the output"


def intact(model_dir: str | Path, out: str | Path) -> bool:
    """Whether ``out`` is the output ``model_dir`` was released to and still holds its weight files as
    published (names, sizes, modification times: an edit, a truncation or a deletion changes one)."""
    entry, inputs = _release(Path(model_dir), Path(out))
    return entry.current(inputs)


def publish(model_dir: str | Path, out: str | Path, texts: dict[str, str] | None = None) -> list[str]:
    """Make ``out`` hold a verified copy of ``model_dir`` (an assembled model with its file digests), with
    ``texts`` ({name: content}) written instead of (or besides) its files. Returns how ``out`` differed
    before (``["new"]`` for a new output), empty when it already held exactly that (then it is left
    untouched). A released ``model_dir`` (``release``; its output ``intact``) has its texts rewritten in
    ``out`` when they differ."""
    model_dir, out, texts = Path(model_dir), Path(out), dict(texts or {})
    check_out(out)
    files = digests.recorded(model_dir)
    if released(model_dir):
        if not intact(model_dir, out):
            raise PathError(
                "the published model was changed or removed since its working copy was deleted",
                out,
                f"delete {model_dir} and run the same command again: it is assembled again",
            )
        weights = {name for name in files if Path(name).match(WEIGHTS)}  # ``intact``: as published
        kept = set(users(out, files, texts))
        before = _differences(out, *_published_report(model_dir, files, texts), skip=weights | kept)
        if before:  # the small files again, from the working directory's copies, and the texts
            added, _ = digests.added_and_missing(out, files, skip={*texts, *weights, *kept})
            for name in added:
                (out / name).unlink()
            for name, expected in sorted(files.items()):
                if name not in weights and name not in texts:
                    with atomic_path(out / name) as tmp:
                        _copy_verified(model_dir / name, tmp, expected)
            update_texts(model_dir, out, texts)
        return before
    added, missing = digests.added_and_missing(model_dir, files, skip=texts)
    problems = [f"{n} was added" for n in added] + [f"{n} is missing" for n in missing]
    if problems:
        raise PathError(
            f"the pruned model differs from what was computed: {'; '.join(problems)}; nothing was published",
            model_dir,
            "delete that directory and run the same command again: it is reassembled from the cached "
            "pruned layers (pruned again where --keep needed deleted them)",
        )
    published, report_text = _published_report(model_dir, files, texts)
    kept = users(out, files, texts)
    before = _differences(out, published, report_text, skip=set(kept))
    if not before:
        return before
    with atomic_path(out, is_dir=True) as tmp:
        for name, expected in sorted(files.items()):
            if name not in texts:
                _copy_verified(model_dir / name, tmp / name, expected)
        for name, text in (texts | {MARKER: report_text}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        # the user's, copied into the new output (the old one is deleted once the new one is in its place)
        for name in kept:
            if (out / name).is_dir():
                shutil.copytree(out / name, tmp / name, symlinks=True)
            else:
                shutil.copy2(out / name, tmp / name, follow_symlinks=False)
    return before
