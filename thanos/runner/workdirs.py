"""The working directories ``prune_model`` leaves, listed and deleted (``thanos workdirs``), as
``huggingface-cli scan-cache`` and ``delete-cache`` do for the hub's cache.

Each run records in ``WORKDIR/workdir.json`` what the directory is for (the model, the calibration) and
which recipes it ran, with the time of the last run. A directory without that record (made by an earlier
version) is listed by what its ``results/`` holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.files.atomic import write_json
from thanos.files.layout import DISTILL_ABOUT as ABOUT
from thanos.files.layout import DISTILL_RUN as RUN
from thanos.files.locks import LOCK_NAME, deleting, holder
from thanos.runner.disk import size_text
from thanos.stages.describe.provenance import path_bytes

if TYPE_CHECKING:
    from thanos.stages.engine import Calibration

RECORD = "workdir.json"
COMBINED = (
    "-combined"  # ``<model>-combined``: the intermediate models of combined recipes (``runner.combined``)
)
DISTILL = "distill"  # thanos distill's checkpoints, one directory per run (``thanos.commands.distill``)


def default_root() -> Path:
    """``$THANOS_WORKDIR``, else ``$XDG_CACHE_HOME/thanos`` (``~/.cache/thanos``)."""
    root = (
        os.environ.get("THANOS_WORKDIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thanos"
    )
    return Path(root).expanduser().resolve()


def slug(text: str) -> str:
    """A name usable as a workflow model name and a directory name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return name if name and name[0].isalnum() else f"m{name}"


def model_slug(reference: str) -> str:
    """A model's name in the working directory: a local directory's name, a hub id with ``--`` for ``/``."""
    return slug(Path(reference).name if reference.startswith("/") else reference.replace("/", "--"))


def default_workdir(model: str, calibration: Calibration, name: str | None = None) -> Path:
    """``$THANOS_WORKDIR/<model>-<key>`` (``~/.cache/thanos`` by default): the key (``workdir_key``) of the
    model and the calibration (the value the door checked); ``name`` instead of the model's (a combined
    recipe's later part: named after the input model and the parts so far, keyed by the model it reads)."""
    key = workdir_key(model, dataclasses.asdict(calibration))
    return default_root() / f"{name or model_slug(model)}-{key}"


def workdir_key(model: str, calibration: dict[str, Any]) -> str:
    """The hash of a model and a calibration that names their default working directory."""
    return hashlib.sha256(json.dumps([model, calibration], sort_keys=True).encode()).hexdigest()[:10]


def record_run(workdir: Path, model: str, calibration: dict[str, Any] | None, recipe: str) -> None:
    """Add this run to ``workdir``'s record (the model, the calibration: None for a recipe that reads
    none, which leaves an earlier recipe's, its recipes, the time)."""
    path = workdir / RECORD
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        previous = {}
    previous = previous if isinstance(previous, dict) else {}
    recipes = list(dict.fromkeys([*previous.get("recipes", []), recipe]))
    write_json(
        path,
        previous
        | {
            "model": model,
            "calibration": calibration if calibration is not None else previous.get("calibration"),
            "recipes": recipes,
            "last_run": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
    )


def record_finished(workdir: Path, recipe: str) -> None:
    """Record in ``workdir``'s record that ``recipe`` finished there (a size's search: its directory holds
    no assembled model to tell it by)."""
    record = json.loads((workdir / RECORD).read_text())
    done = list(dict.fromkeys([*record.get("finished", []), recipe]))
    write_json(workdir / RECORD, record | {"finished": done})


def record_search_key(workdir: Path, key: dict[str, Any]) -> None:
    """Record in a size's search directory what its name's hash was computed from (the calibration and the
    options), so that a search of other options names the one that changed."""
    record = json.loads((workdir / RECORD).read_text())
    write_json(workdir / RECORD, record | {"search_key": key})


def recorded_recipes(workdir: Path) -> list[str]:
    """The recipes ``workdir``'s record says were run there (finished or not)."""
    try:
        return list(json.loads((workdir / RECORD).read_text()).get("recipes", []))
    except (OSError, ValueError, AttributeError):
        return []


def finished(workdir: Path, recipe: str) -> bool:
    """Whether ``recipe`` finished in ``workdir``: recorded so (``record_finished``), or its model was
    assembled (``pruning_report.json``; kept when the model went to ``--out``)."""
    try:
        recorded = recipe in json.loads((workdir / RECORD).read_text()).get("finished", [])
    except (OSError, ValueError, AttributeError):
        recorded = False
    return recorded or any((workdir / "results").glob(f"*/{recipe}/model/pruning_report.json"))


def unfinished(workdir: Path) -> list[str]:
    """The recipes run in ``workdir`` that did not finish (interrupted, or left for a recipe with other
    options): their stores stay until they are resumed or deleted (``delete_recipe``)."""
    if workdir.name.endswith(COMBINED):  # the intermediate models of combined recipes: no recipe of theirs
        return []
    return [recipe for recipe in recorded_recipes(workdir) if not finished(workdir, recipe)]


def recipe_paths(workdir: Path, recipe: str) -> list[Path]:
    """What ``recipe``'s runs wrote in ``workdir`` and no other recipe reads: its directory and its chain's
    stores under each model, and its log."""
    results = workdir / "results"
    found = [
        *results.glob(f"*/{recipe}"),
        *results.glob(f"*/chains/{recipe}"),
        workdir / "logs" / f"{recipe}.log",
    ]
    return [path for path in found if path.exists()]


def unfinished_note(workdir: Path, recipe: str) -> str:
    """One line on an unfinished recipe left in ``workdir``: its size, how to resume or delete it."""
    size = sum(path_bytes(path) for path in recipe_paths(workdir, recipe))
    return (
        f"{workdir.name} holds the unfinished recipe {recipe} ({size_text(size)}): its command again resumes "
        f"it; `thanos workdirs --delete {workdir.name}/{recipe}` deletes it"
    )


def is_search(workdir: Path) -> bool:
    """Whether ``workdir`` is a size's search (its cost table, which every size of its model and calibration
    reads: a size's part of it is not its own)."""
    return any(recipe.startswith("params:") for recipe in recorded_recipes(workdir))


def delete_recipe(workdir: Path, recipe: str) -> int:
    """Delete what ``recipe`` wrote in the working directory ``workdir`` (``recipe_paths``) and its entry in
    the record; refused while a run uses the directory, and in a size's search (``is_search``: the whole
    directory is the unit). Returns the bytes freed."""
    check_deletable(workdir)
    if is_search(workdir):
        raise ValueError(
            f"{workdir} is a size's search: its cost table serves every size of its model and calibration, "
            f"and {recipe} wrote nothing of its own there; delete the whole search (`thanos workdirs "
            f"--delete {workdir}`) or run the size's command again to finish it (nothing deleted)"
        )
    if recipe not in recorded_recipes(workdir):
        raise ValueError(
            f"{workdir}: no recipe {recipe!r} was run there (its recipes: "
            f"{', '.join(recorded_recipes(workdir)) or 'none'}); nothing deleted"
        )
    size = 0
    with deleting(workdir):  # a run that starts meanwhile is refused
        for path in recipe_paths(workdir, recipe):
            size += path_bytes(path)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        record = json.loads((workdir / RECORD).read_text())
        write_json(workdir / RECORD, record | {"recipes": [r for r in record["recipes"] if r != recipe]})
    return size


@dataclass(frozen=True)
class Workdir:
    """One working directory: where, its size, what it was for, when it was last used; ``unfinished``: its
    recipes that did not finish; ``holder``: the run using it now (``pid N (its command)``). For a
    distillation's checkpoints (``distill``), ``model`` is the student and ``calibration`` says what they
    are."""

    path: Path
    bytes: int
    model: str
    calibration: str
    recipes: list[str] = field(default_factory=list)
    last_run: str = "?"
    holder: str | None = None
    unfinished: list[str] = field(default_factory=list)
    distill: bool = False

    @property
    def in_use(self) -> bool:
        return self.holder is not None


def is_workdir(path: Path) -> bool:
    return (path / RECORD).is_file() or ((path / "results").is_dir() and (path / LOCK_NAME).exists())


def _modified(path: Path) -> str:
    """When ``path`` was last modified, as the records write times (for a directory without one)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))


def is_distill_work(path: Path) -> bool:
    """A distillation's checkpoints (``thanos distill``'s ``--work``: ``DISTILL/<out>-<hash>`` by default)."""
    return (path / RUN).is_file()


def describe_distill(path: Path) -> Workdir:
    """A distillation's checkpoints: for which student, teacher and output (``about.json``)."""
    try:
        about = json.loads((path / ABOUT).read_text())
    except (OSError, ValueError):
        about = {}
    student, teacher, out = (about.get(key, "?") for key in ("student", "teacher", "out"))
    last_run = about.get("last_run") or _modified(path)
    what = f"distillation checkpoints of {out} (student {student}, teacher {teacher}), kept to resume it"
    return Workdir(path, path_bytes(path), student, what, [], last_run, holder(path), distill=True)


def describe(path: Path) -> Workdir:
    """``path``'s record, or what its ``results/`` holds."""
    try:
        record = json.loads((path / RECORD).read_text())
    except (OSError, ValueError):
        record = None
    if record is not None:
        calib = record.get("calibration") or {}
        source = calib.get("source") or calib.get("calibration")  # a size's search records the request's
        calibration = f"{calib.get('nsamples')} x {calib.get('seqlen') or 'the model length'} of {source}"
        if not calib:  # its recipes read no text (magnitude)
            calibration = "none (its recipes read no calibration text)"
        model, recipes, last_run = record.get("model", "?"), record.get("recipes", []), record.get("last_run")
    else:
        models = sorted(p.name for p in (path / "results").glob("*") if p.is_dir())
        model, calibration = ", ".join(models) or "?", "?"
        recipes = sorted(p.name for m in models for p in (path / "results" / m).glob("*") if p.is_dir())
        recipes = [r for r in recipes if r not in ("calib", "chains", "dense")]
        last_run = _modified(path)
    left = unfinished(path)
    done = [recipe for recipe in recipes if recipe not in left]
    return Workdir(path, path_bytes(path), model, calibration, done, last_run or "?", holder(path), left)


def scan(root: Path) -> list[Workdir]:
    """The working directories directly under ``root``, and the distillations' checkpoints under
    ``root/distill``, largest first."""
    if not root.is_dir():
        return []
    found = [describe(p) for p in sorted(root.iterdir()) if p.is_dir() and is_workdir(p)]
    if (root / DISTILL).is_dir():
        found += [describe_distill(p) for p in sorted((root / DISTILL).iterdir()) if is_distill_work(p)]
    return sorted(found, key=lambda w: -w.bytes)


def check_deletable(path: Path) -> None:
    """Refuse a directory that is not a working directory, or one a run is using."""
    if not path.exists():
        raise ValueError(f"{path}: no such directory; `thanos workdirs` lists the working directories")
    if not path.is_dir() or not (is_workdir(path) or is_distill_work(path)):
        inside = sorted(child.name for child in path.iterdir() if child.is_dir() and is_workdir(child))
        holds = (
            f"; it holds working directories ({', '.join(inside)}: a --workdir given to prune-model): "
            f"`thanos workdirs --root {path}` lists them and deletes them (--delete-all)"
            if path.is_dir() and inside
            else ""
        )
        raise ValueError(
            f"{path}: not a working directory of thanos prune-model (no {RECORD}) nor a distillation's "
            f"checkpoints (no {RUN}){holds}; nothing deleted"
        )
    if (owner := holder(path)) is not None:
        raise ValueError(f"{path}: a run is using it now ({owner}); wait for it to finish (nothing deleted)")


def delete(path: Path) -> int:
    """Delete the working directory ``path`` (``check_deletable``), holding its lock meanwhile (a run that
    starts then is refused); returns the bytes freed."""
    check_deletable(path)
    size = path_bytes(path)
    with deleting(path):
        shutil.rmtree(path)
    return size
