"""List the working directories that thanos prune-model left (their size, model, calibration, recipes and
last run), and the checkpoints of thanos distill's runs (`distill/...`), and delete them: `thanos workdirs`
lists, `--delete NAME ...` or `--delete-all` deletes. A published model (--out) does not need its working
directory; a rerun or another recipe on the same model and calibration computes again what was deleted (a
distillation whose checkpoints were deleted starts over)."""

from __future__ import annotations

import argparse
from pathlib import Path

TRACEBACK = False  # its errors name the directory and what to do
HELP = "list the working directories of prune-model (size, model, recipes) and delete them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        default=None,
        help="where the working directories are (default $THANOS_WORKDIR, else ~/.cache/thanos)",
    )
    parser.add_argument(
        "--delete",
        nargs="+",
        default=None,
        metavar="NAME",
        help="delete these (names as listed, under --root, or paths); NAME/RECIPE deletes what one recipe "
        "wrote in a working directory (an unfinished one's steps, or a finished one's stages: its model is "
        "in its --out)",
    )
    parser.add_argument("--delete-all", action="store_true", help="delete every one not in use")


def run(args: argparse.Namespace) -> None:
    from thanos.runner.workdirs import default_root

    root = Path(args.root).expanduser().resolve() if args.root else default_root()
    if args.root and not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        raise ValueError(f"--root {args.root}: {what}; give the directory that holds the working directories")
    if args.delete or args.delete_all:
        if args.delete and args.delete_all:
            raise ValueError("--delete and --delete-all: give one of them")
        _delete(root, args)
        return
    _list(root, "" if args.root is None or root == default_root() else f" --root {root}")


def _target(root: Path, name: str) -> tuple[Path, str | None]:
    """(the directory, None) that ``name`` names, or (a working directory, one of its recipes) for
    ``NAME/RECIPE`` where ``NAME`` is a working directory and ``RECIPE`` no directory of it."""
    from thanos.runner.workdirs import is_workdir

    for path in (root / name, Path(name).expanduser()):  # under --root first, then as a path
        if path.exists():
            return path.resolve(), None
        if is_workdir(path.parent):
            return path.parent.resolve(), path.name
    return (root / name if "/" not in name else Path(name)).resolve(), None


def _delete(root: Path, args: argparse.Namespace) -> None:
    """Delete what ``--delete`` names (every one checked before any is deleted), or ``--delete-all``."""
    from thanos.runner.disk import size_text
    from thanos.runner.workdirs import check_deletable, delete, delete_recipe, scan

    if args.delete_all:
        found = scan(root)
        for workdir in found:
            if workdir.in_use:
                print(f"kept {workdir.path} (in use by {workdir.holder}; delete it once that run ends)")
        targets: list[tuple[Path, str | None]] = [(w.path, None) for w in found if not w.in_use]
    else:
        targets = [_target(root, name) for name in args.delete]
    for path, _ in targets:
        check_deletable(path)
    freed = 0
    for path, recipe in targets:
        size = delete(path) if recipe is None else delete_recipe(path, recipe)
        freed += size
        print(f"deleted {path} ({size_text(size)})" if recipe is None else
              f"deleted what {recipe} wrote in {path} ({size_text(size)})")  # fmt: skip
    print(f"freed {size_text(freed)}")


def _list(root: Path, given: str) -> None:
    """Each working directory: its size, model, calibration, recipes (finished, unfinished) and last run;
    each distillation's checkpoints: whose, and that they serve to resume it. ``given``: the ``--root``
    option the commands it suggests need (none for the default root)."""
    from thanos.runner.disk import size_text
    from thanos.runner.workdirs import is_search, scan

    found = scan(root)
    if not found:
        print(f"no working directories under {root}")
        return
    for workdir in found:
        name = workdir.path.relative_to(root)
        print(f"{size_text(workdir.bytes):>10}  {name}{f' (in use by {workdir.holder})' * workdir.in_use}")
        if workdir.distill:
            print(f"            {workdir.calibration}; last run {workdir.last_run}")
            continue
        print(f"            model {workdir.model}; calibration {workdir.calibration}")
        recipes = ", ".join(workdir.recipes) or "none finished"
        print(f"            recipes {recipes}; last run {workdir.last_run}")
        for recipe in workdir.unfinished:
            if workdir.in_use:  # the run using it may be this recipe's
                print(f"            unfinished: {recipe} (not finished yet; a run is using the directory)")
                continue
            target = name if is_search(workdir.path) else f"{name}/{recipe}"  # a size: its whole cost table
            print(
                f"            unfinished: {recipe} (interrupted or abandoned; its command again resumes it; "
                f"delete: thanos workdirs{given} --delete {target})"
            )
    total = sum(w.bytes for w in found)
    print(f"{size_text(total):>10}  in all, under {root}; delete: thanos workdirs{given} --delete NAME")
