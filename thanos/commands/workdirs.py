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
        help="delete these (names as listed, under --root, or paths)",
    )
    parser.add_argument("--delete-all", action="store_true", help="delete every one not in use")


def run(args: argparse.Namespace) -> None:
    from thanos.runner.disk import size_text
    from thanos.runner.workdirs import check_deletable, default_root, delete, scan

    root = Path(args.root).expanduser().resolve() if args.root else default_root()
    if args.delete or args.delete_all:
        if args.delete and args.delete_all:
            raise ValueError("--delete and --delete-all: give one of them")
        targets = (
            [w.path for w in scan(root) if not w.in_use]
            if args.delete_all
            else [
                root / name if (root / name).exists() or "/" not in name else Path(name)
                for name in args.delete
            ]
        )
        for path in targets:  # every one is checked before any is deleted
            check_deletable(path.resolve())
        freed = 0
        for path in targets:
            size = delete(path.resolve())
            freed += size
            print(f"deleted {path} ({size_text(size)})")
        print(f"freed {size_text(freed)}")
        return
    found = scan(root)
    if not found:
        print(f"no working directories under {root}")
        return
    for workdir in found:
        flag = " (in use)" if workdir.in_use else ""
        print(f"{size_text(workdir.bytes):>10}  {workdir.path.relative_to(root)}{flag}")
        print(f"            model {workdir.model}; calibration {workdir.calibration}")
        recipes = ", ".join(workdir.recipes) or "none finished"
        print(f"            recipes {recipes}; last run {workdir.last_run}")
    total = sum(w.bytes for w in found)
    print(f"{size_text(total):>10}  in all, under {root}; delete: thanos workdirs --delete NAME")
