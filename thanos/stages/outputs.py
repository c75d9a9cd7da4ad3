"""What the resuming stages ask of an output: is it finished, what identifies it, how it is deleted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def store_complete(path: Path) -> bool:
    """A finished zarr store (stores are renamed into place; ``complete`` is their last attribute)."""
    from thanos.data.storage import open_complete

    try:
        open_complete(path, "store")
    except (FileNotFoundError, ValueError):
        return False
    return True


def mtime(path: str | os.PathLike | None) -> int | None:
    """An output's identity for what reads it: its modification time (what Snakemake compares too; a
    rewritten output changes it); None for no path or a missing one."""
    try:
        return os.stat(path).st_mtime_ns if path is not None else None
    except OSError:
        return None


def remove(path: Path) -> None:
    """Delete a file, a link or a directory tree; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
