"""Errors about one file or store: what went wrong, where and how to fix it (the CLI prints one line)."""

from __future__ import annotations

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
