"""Errors about one file or store: what went wrong, where and how to fix it, and ``describe``: any error as
the one line the CLI and ``thanos prune-model`` print after ``ERROR:``."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class PathError(ValueError):
    """``path`` cannot be used: ``what`` went wrong, ``hint`` says how to fix it.

    ``str(err)`` is ``"<what> (<path>); <hint>"``, the line the CLI prints after ``ERROR:``.
    """

    def __init__(self, what: str, path: str | os.PathLike, hint: str) -> None:
        self.what = what
        self.path = Path(path)
        self.hint = hint
        super().__init__(f"{what} ({self.path}); {hint}")


MAX_LINE = 2000
_OS_HINTS = {
    errno.ENOSPC: "disk full: free space on that filesystem (or point the results elsewhere) and rerun",
    errno.EDQUOT: "disk quota exceeded: free space or raise the quota, then rerun",
    errno.EACCES: "permission denied: check the permissions of the path",
    errno.EPERM: "operation not permitted: check the permissions of the path",
    errno.ENOENT: "check the path",
    errno.EROFS: "read-only filesystem: write the results elsewhere",
}

# errors of libraries that do not name the file they failed on (the codebase's own readers do)
_LIBRARY_HINTS = {
    "safetensors": "a .safetensors file is truncated or damaged, the traceback shows which reader",
    "zarr": "a zarr store is damaged, the traceback shows which one",
    "numcodecs": "a zarr store is damaged, the traceback shows which one",
}


def describe(err: BaseException) -> str:
    """One line: what went wrong, the path involved, and how to fix it."""
    if isinstance(err, PathError):
        text = str(err)
    elif isinstance(err, OSError) and err.errno is not None:
        paths = " -> ".join(str(p) for p in (err.filename, err.filename2) if p is not None)
        hint = _OS_HINTS.get(err.errno, "check the path and its filesystem, then rerun")
        text = f"{err.strerror or err}" + (f" ({paths})" if paths else "") + f"; {hint}"
    elif isinstance(err, (ValueError, FileNotFoundError)):
        text = str(err)  # the codebase's own errors: they name the path and the fix
    else:
        library = type(err).__module__.split(".")[0]
        hint = _LIBRARY_HINTS.get(library, "unexpected error")
        text = f"{type(err).__name__}: {err}; {hint}: the traceback is in the job's log (or rerun with -v)"
    text = " ".join(text.split())
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."
