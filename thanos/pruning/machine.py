"""This machine's cache of built and measured things (torch-free): ``$XDG_CACHE_HOME/thanos-prune``
(``~/.cache``): the Thanos kernel built for this CPU, whether bf16 is fast here, the real model's wheels,
lm-eval's built-in task names."""

from __future__ import annotations

import os
from pathlib import Path


def machine_cache() -> Path:
    """``$XDG_CACHE_HOME/thanos-prune`` (``~/.cache/thanos-prune``); RuntimeError where there is no home
    directory."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thanos-prune"
