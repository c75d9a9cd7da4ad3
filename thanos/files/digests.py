"""What an assembled model directory held when it was computed: each file's size and sha256.

``assemble`` records ``{"files": {name: {"bytes": n, "sha256": hex}}}`` in ``pruning_report.json`` (every
file of the directory but the report itself). Whoever reads the model later checks it against that record
first: ``thanos prune-model`` before it publishes (``thanos.stages.publish``), the evaluation stages before
they load it. An edit, truncation or deletion made since (by a user, a script, a disk) is named, file by file,
instead of being published or evaluated as the pruned model. Torch-free.

sha256 runs at about 1.7 GB/s on one core with the SHA extensions (x86 since 2017, ARMv8): a 70B model
(140 GB) is checked in about 80 s of CPU, beside the minutes its disk takes to read it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from thanos.errors import PathError
from thanos.files.atomic import write_json

REPORT = "pruning_report.json"
CHUNK = 8 << 20


def sha256_stream(source: BinaryIO, sink: BinaryIO | None = None) -> tuple[int, str]:
    """(bytes, sha256 hex) of what ``source`` holds, written on to ``sink`` as it is read (one pass)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return size, digest.hexdigest()


def file_digest(path: str | os.PathLike) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of one file."""
    with open(path, "rb") as handle:
        size, sha256 = sha256_stream(handle)
    return {"bytes": size, "sha256": sha256}


def model_files(model_dir: str | os.PathLike) -> list[str]:
    """The files of a model directory that make the model: every visible file but the report."""
    return sorted(
        p.name
        for p in Path(model_dir).iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name != REPORT
    )


def record(model_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The digest of every file of ``model_dir`` (``model_files``), by name."""
    return {name: file_digest(Path(model_dir) / name) for name in model_files(model_dir)}


def record_again(model_dir: str | os.PathLike) -> None:
    """Record again, in ``model_dir``'s ``pruning_report.json`` (where it has one), what its files are now:
    for a step that rewrites files of a model it did not assemble (the vocabulary's, after a combined
    recipe's earlier parts), so that what it wrote is what the record says."""
    path = Path(model_dir) / REPORT
    if path.is_file():
        write_json(path, json.loads(path.read_text()) | {"files": record(model_dir)})


def recorded(model_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The digests ``assemble`` recorded in ``model_dir``'s report; a PathError when there are none."""
    report = Path(model_dir) / REPORT
    try:
        files = json.loads(report.read_text()).get("files")
    except (OSError, ValueError) as err:
        raise PathError(
            f"cannot read the pruning report ({err})",
            report,
            f"delete {model_dir} and run again: it is reassembled from the pruned layers",
        ) from None
    if not isinstance(files, dict) or not files:
        raise PathError(
            "the model was assembled without file digests (by an older version), so it cannot be verified",
            model_dir,
            "delete it and run again: it is reassembled from the pruned layers",
        )
    return files


def added_and_missing(
    model_dir: str | os.PathLike, files: dict[str, dict[str, Any]], skip: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """The names of the files ``model_dir`` holds beyond the record ``files``, and of the recorded files
    it lacks, sorted (names in ``skip`` are neither)."""
    skip = set(skip)
    found = set(model_files(model_dir)) - skip
    expected = set(files) - skip
    return sorted(found - expected), sorted(expected - found)


def differences(
    model_dir: str | os.PathLike, files: dict[str, dict[str, Any]], skip: Iterable[str] = ()
) -> list[str]:
    """What differs between ``model_dir`` and the record ``files`` (names in ``skip`` are not compared):
    one phrase per file, empty when every file holds exactly the recorded bytes and no file was added."""
    model_dir, skip = Path(model_dir), set(skip)
    added, missing = added_and_missing(model_dir, files, skip)
    problems = [f"{name} was added" for name in added]
    for name, expected in sorted(files.items()):
        if name in skip:
            continue
        path = model_dir / name
        if name in missing:
            problems.append(f"{name} is missing")
            continue
        if path.stat().st_size != expected["bytes"]:
            problems.append(f"{name} has {path.stat().st_size} bytes, {expected['bytes']} were written")
        elif file_digest(path)["sha256"] != expected["sha256"]:
            problems.append(f"{name} was changed (sha256 differs from the one recorded when it was written)")
    return problems


def edited(model_dir: str | os.PathLike) -> list[str]:
    """What was changed in an assembled model directory since its report was written, found by ``stat``
    (a file missing, of another size, or written after the report) and confirmed by its sha256: cheap
    enough to run over every result at the start of each workflow run."""
    model_dir = Path(model_dir)
    try:
        written = (model_dir / REPORT).stat().st_mtime_ns
        files = recorded(model_dir)
    except (OSError, PathError):
        return []  # no report yet (being assembled) or an older one: the readers refuse it
    suspects = {}
    for name, expected in files.items():
        path = model_dir / name
        stat = path.stat() if path.is_file() else None
        if stat is None or stat.st_size != expected["bytes"] or stat.st_mtime_ns > written:
            suspects[name] = expected
    return differences(model_dir, files, skip=set(files) - set(suspects)) if suspects else []


def verify(model_dir: str | os.PathLike, skip: Iterable[str] = ()) -> None:
    """Refuse a pruned model directory whose files are not those its ``pruning_report.json`` records
    (PathError naming them and the fix). A directory without a record (a dense model, or one assembled
    by an older version) is not checked."""
    model_dir = Path(model_dir)
    try:
        files = recorded(model_dir)
    except PathError:
        return
    problems = differences(model_dir, files, skip)
    if problems:
        raise PathError(
            f"the pruned model differs from what was computed: {'; '.join(problems)}",
            model_dir.resolve(),
            "a workflow result: delete that directory and run again, it is reassembled from the cached "
            "pruned layers; a copy you changed on purpose: remove its pruning_report.json (the record of "
            "what was computed) to use it as it is",
        )
