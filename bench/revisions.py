"""A module of the package as it was at a git revision, imported on its own beside today's package.

Modules moved when the package was grouped into layers, and some were renamed since (docs/changelog.md):
at an older revision a file lies at an old path and imports its neighbours by their old names.
``module_at`` finds it there and points those imports at today's modules; files that a module reads
beside itself (the Thanos row solver's C source) come along from the same revision and folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
# old module -> today's, for what the modules the benches load imported at any older revision
MOVED = {
    "thanos.algorithms": "thanos.pruning.algorithms",
    "thanos.atomic": "thanos.files.atomic",
}
# today's path -> its earlier paths, newest first, for the files the benches load
OLD_PATHS = {
    "thanos/pruning/algorithms/thanos_blockwise.py": (
        "thanos/pruning/algorithms/thanos.py",
        "thanos/algorithms/thanos.py",
    ),
    "thanos/data/storage.py": ("thanos/storage.py",),
}
BESIDE = {"thanos/pruning/algorithms/thanos_blockwise.py": ("solve_rows.c",)}


def _show(rev: str, path: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def module_at(rev: str, path: str) -> ModuleType:
    """``path`` (today's path of a module, e.g. ``thanos/data/storage.py``) as it was at ``rev``."""
    paths = (path, *OLD_PATHS.get(path, ()))
    found = next(((p, text) for p in paths if (text := _show(rev, p)) is not None), None)
    if found is None:
        earlier = f" (nor {', '.join(paths[1:])})" if len(paths) > 1 else ""
        raise SystemExit(f"{path}{earlier} does not exist at git revision {rev}")
    there, source = found
    for name in sorted(MOVED, key=len, reverse=True):
        source = re.sub(rf"\b{re.escape(name)}\b", MOVED[name], source)
    work = Path(tempfile.mkdtemp())
    for name in BESIDE.get(path, ()):
        text = _show(rev, str(Path(there).with_name(name)))
        if text is not None:
            (work / name).write_text(text)
    file = work / Path(path).name
    file.write_text(source)
    tag = re.sub(r"\W", "_", rev)
    spec = importlib.util.spec_from_file_location(f"{file.stem}_at_{tag}", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass's fields are resolved through its module there
    spec.loader.exec_module(module)
    return module


def add_revision_arguments(parser: argparse.ArgumentParser, repeats: int) -> None:
    """--before/--after (git revisions, alternating), --after-first, --repeats and the demo's corpus and
    trained model (--data, --model): the options of the benches that time two revisions."""
    parser.add_argument("--before", required=True, help="git revision run first in each repeat")
    parser.add_argument("--after", required=True, help="git revision run second in each repeat")
    parser.add_argument("--after-first", action="store_true", help="run --after first in each repeat")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--data", type=Path, default=REPO / "results/demo/data", help="demo corpus")
    parser.add_argument("--model", type=Path, default=REPO / "results/demo/model", help="the trained model")


def check_demo_inputs(args: argparse.Namespace) -> None:
    """Exit naming the fix when the demo's corpus or trained model is missing."""
    for path in (args.data, args.model):
        if not path.is_dir():
            raise SystemExit(
                f"{path} is not a directory: run `snakemake --cores 2` once, or pass --data/--model"
            )
