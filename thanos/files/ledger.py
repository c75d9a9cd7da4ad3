"""The ledger: whether an output is still current for the inputs it would be computed from now, and why not.

Every resuming part of the package asks it, in one vocabulary:

- the engine's steps (``thanos.stages.engine``): a record ``.{name}.inputs.json`` beside each output;
- the chain's per-block outputs (``thanos.stages.chain``): ``PRUNED/.chain.json``, what they were computed
  from (they are deleted when it changed);
- a distillation's checkpoints (``WORK/run.json``) and the ``run_sha256`` its ``distillation.json`` keeps
  (``thanos.stages.distill.distill``);
- a finished combined recipe (``thanos.runner.combined``: ``done.json`` beside its intermediate models);
- what ``--out`` already holds (``thanos.runner.checks``: compared with its pruning report).

**Inputs** are a JSON-able dict of named inputs, each identified one way: a local model by its files'
names, sizes and modification times (``model_identity``, ``thanos.files.fingerprint``); a calibration or
evaluation source, a file or a directory, by its files' (``source_identity``); an output another step
wrote by its modification time (``Upstream``: what Snakemake compares too); an option by its value
(``recipe`` and ``options`` hold a recipe's and a distillation's options). A **record** is those inputs as
JSON (``as_record``), written last, after its output (``Entry.write``).

A file output's record also keeps the file's size, modification time and sha256 when it was recorded
(``OUTPUT_STAMP``): a file edited or truncated since (a damaged ``model_info.json``, a search's
``measurement.json``) is computed again instead of read; one touched alone (Snakemake touches a job's
outputs) is the same file.

An output is current when it is complete and its record equals the inputs now; else ``Entry.reason`` says
why in one line naming the first input that changed (``difference``): ``model file model.safetensors
changed``, ``option damp 0.01 -> 0.02``, ``tokens.zarr was written again``, ``not finished``. That line is
what a run logs, and shows, when it computes an output again. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.files.atomic import sha256_file, write_json
from thanos.files.fingerprint import model_fingerprint

MISSING = "missing"  # the reason of an output never computed (or deleted): nothing to say more
CHANGED = "changed since it was computed"  # a file output edited, truncated or replaced after its record
# a record's entry for its output file's size, modification time and sha256 when recorded (not an input)
OUTPUT_STAMP = "output_file"
NOT_FINISHED = "not finished"  # an output without its record, or incomplete: a run stopped while writing it
# the inputs that hold options: a difference below them is said "option NAME OLD -> NEW"
OPTIONS = ("recipe", "recipes", "options")
# how a difference in a map of files is said: "model file X changed" for a model's fingerprint
FILES_OF = {"files": "model", "model_files": "model"}


@dataclass(frozen=True)
class Upstream:
    """An output another step wrote, as an input: identified by its modification time (a rewritten output
    changes it), named by its file name when it changed. None: no such input."""

    path: Path | None

    @property
    def identity(self) -> int | None:
        return mtime(self.path)


def mtime(path: str | os.PathLike | None) -> int | None:
    """An output's identity for what reads it: its modification time (what Snakemake compares too; a
    rewritten output changes it); None for no path or a missing one."""
    try:
        return os.stat(path).st_mtime_ns if path is not None else None
    except OSError:
        return None


def source_identity(source: str | os.PathLike) -> Any:
    """A calibration or evaluation source: a hub name as is, a local file or directory as its files'
    relative names, sizes and modification times; not the bytecode Python writes beside a directory's
    modules (``__pycache__``: an lm-eval task's ``utils.py``, compiled when the task is first loaded)."""
    path = Path(source)
    if not path.exists():
        return str(source)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if _source_file(p, path))
    return {
        str(f.relative_to(path) if f != path else f.name): [f.stat().st_size, f.stat().st_mtime_ns]
        for f in files
    }


def _source_file(file: Path, root: Path) -> bool:
    return file.is_file() and "__pycache__" not in file.relative_to(root).parts


def model_identity(model: str | os.PathLike) -> Any:
    """A model: a local directory's files (``thanos.files.fingerprint``), a hub id as it is."""
    return model_fingerprint(model) if Path(model).is_dir() else str(model)


def remove(path: Path) -> None:
    """Delete a file, a link or a directory tree; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _encode(value: Any) -> Any:
    return value.identity if isinstance(value, Upstream) else str(value)


def as_record(inputs: Any) -> Any:
    """``inputs`` as their record holds them: JSON (a tuple reads back as a list, a path as its text, an
    ``Upstream`` as its modification time)."""
    return json.loads(json.dumps(inputs, default=_encode))


def digest(inputs: Any) -> str:
    """The sha256 of ``inputs``' record: what an output that cannot hold the record keeps of it."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=_encode).encode()).hexdigest()


def difference(recorded: Any, inputs: Any) -> str | None:
    """None when ``recorded`` is the record of ``inputs``; else one line naming the first input that
    differs (in the inputs' order)."""
    now = as_record(inputs)
    if recorded == now:
        return None
    return _first_change(recorded, now, inputs, ())


_ABSENT = object()


def _first_change(old: Any, new: Any, live: Any, path: tuple[Any, ...]) -> str:
    """The first difference between ``old`` and ``new`` (``live``: the inputs ``new`` was made of, for the
    names of ``Upstream`` outputs) under the key ``path``, in words."""
    if isinstance(live, Upstream):
        name = live.path.name if live.path is not None else _label(path)
        return f"{name} was written again" if old is not None and new is not None else f"{name} changed"
    if _is_file_map(old) and _is_file_map(new):
        names = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        what = FILES_OF.get(str(path[-1]), _label(path)) if path else "a"
        return f"{what} file {names[0]} changed{more}"
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*new, *(key for key in old if key not in new)]:
            before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
            if before == after:
                continue
            if before is _ABSENT:
                return f"{_label((*path, key))} was not recorded"
            if after is _ABSENT:
                return f"{_label((*path, key))} is no longer an input"
            inner = live.get(key) if isinstance(live, dict) else None
            return _first_change(before, after, inner, (*path, key))
    if _same_length_lists(old, new) and not all(_scalar(value) for value in [*new, *(live or ())]):
        for i, (before, after) in enumerate(zip(old, new, strict=True)):
            if before != after:
                inner = live[i] if isinstance(live, list | tuple) and i < len(live) else None
                return _first_change(before, after, inner, (*path, i))
    return f"{_label(path)} {_short(old)} -> {_short(new)}"


def _label(path: tuple[Any, ...]) -> str:
    """``option damp`` for ``("recipe", "damp")``, ``calibration`` for ``("calibration",)``."""
    names = [str(part) for part in path if not isinstance(part, int)]
    if len(names) > 1 and names[0] in OPTIONS:
        return "option " + ".".join(names[1:])
    return ".".join(names) or "the record"


def _scalar(value: Any) -> bool:
    """A value said whole when it changed (not a dict or a list, nor an ``Upstream`` named on its own)."""
    return not isinstance(value, dict | list | Upstream)


def _same_length_lists(old: Any, new: Any) -> bool:
    return isinstance(old, list) and isinstance(new, list) and len(old) == len(new)


def _is_file_map(value: Any) -> bool:
    """A map of files to their size and modification time (a fingerprint, a source's identity)."""
    if not isinstance(value, dict) or not value:
        return False
    return all(
        isinstance(v, dict) and "size" in v or isinstance(v, list) and len(v) == 2 for v in value.values()
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def recorded(record: Path) -> Any:
    """The inputs the record ``record`` holds (None: none, or unreadable)."""
    try:
        inputs = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(inputs, dict):  # records of earlier versions held the retention, which changes nothing
        inputs.pop("drop", None)
        inputs.pop(OUTPUT_STAMP, None)
    return inputs


def file_stamp(path: Path) -> list[int | str] | None:
    """A file's size, modification time and sha256 (None: not a file); a directory's outputs are not
    stamped."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns, sha256_file(path)] if path.is_file() else None


def file_changed(path: Path, stamp: list[Any]) -> bool:
    """Whether the file ``path`` is not the one ``stamp`` recorded: missing, another size, or another
    modification time and other bytes (touched, as Snakemake touches a job's outputs, it is the same)."""
    try:
        stat = path.stat()
    except OSError:
        return True
    if stat.st_size != stamp[0]:
        return True
    return stat.st_mtime_ns != stamp[1] and (len(stamp) < 3 or sha256_file(path) != stamp[2])


def _recorded_stamp(record: Path) -> list[Any] | None:
    """The output's stamp (``file_stamp``) a record keeps; None for none (a directory's, an earlier
    version's)."""
    try:
        raw = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return raw.get(OUTPUT_STAMP) if isinstance(raw, dict) else None


@dataclass(frozen=True)
class Entry:
    """One output and its record (``record``: where it is kept; ``Entry.beside``: the engine's place)."""

    output: Path
    record: Path

    @classmethod
    def beside(cls, output: Path) -> Entry:
        """``output`` with its record ``.{name}.inputs.json`` beside it."""
        return cls(output, output.parent / f".{output.name}.inputs.json")

    def recorded(self) -> Any:
        """The record (None: none, or unreadable)."""
        return recorded(self.record)

    def reason(self, inputs: Any, complete: Callable[[Path], bool] = Path.exists) -> str | None:
        """None when the output is complete and was computed from ``inputs``; else why it is not:
        ``MISSING``, the input that changed (``difference``), or ``NOT_FINISHED`` (no record, or the output
        incomplete)."""
        if not (self.output.exists() or self.output.is_symlink()):
            return MISSING
        recorded = self.recorded()
        why = NOT_FINISHED if recorded is None else difference(recorded, inputs)
        stamp = _recorded_stamp(self.record) if why is None else None
        if stamp is not None and file_changed(self.output, stamp):
            return f"{self.output.name} {CHANGED}"
        return NOT_FINISHED if why is None and not complete(self.output) else why

    def current(self, inputs: Any, complete: Callable[[Path], bool] = Path.exists) -> bool:
        """Whether the output is complete and was computed from ``inputs``."""
        return self.reason(inputs, complete) is None

    def write(self, inputs: Any) -> None:
        """Record that the output was computed from ``inputs`` (once it is complete: the record is last),
        with a file output's size, modification time and sha256 (``OUTPUT_STAMP``): an output edited or
        truncated since is computed again, not read."""
        record = as_record(inputs)
        if isinstance(record, dict) and (stamp := file_stamp(self.output)) is not None:
            record[OUTPUT_STAMP] = stamp
        write_json(self.record, record)

    def discard(self) -> None:
        """Delete the output and its record."""
        remove(self.output)
        remove(self.record)

    def discard_if_changed(self, inputs: Any, partial: Iterable[Path]) -> str | None:
        """Keep what a stopped run left (``partial``) while it is of ``inputs``: else delete it and record
        ``inputs``, returning why (``difference``; ``NOT_FINISHED`` without a record)."""
        recorded = self.recorded()
        why = NOT_FINISHED if recorded is None else difference(recorded, inputs)
        if why is not None:
            for path in partial:
                remove(path)
            self.write(inputs)
        return why
