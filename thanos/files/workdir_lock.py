"""One run at a time in a working directory: ``thanos prune-model`` holds an exclusive lock on its working
directory, ``thanos distill`` on its checkpoints' directory.

The lock is an ``flock`` on ``WORKDIR/.thanos-run.lock``: the kernel releases it when the process ends,
however it ends, so a killed run leaves nothing to unlock and the next run resumes at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".thanos-run.lock"


@contextlib.contextmanager
def exclusive_workdir(workdir: Path, option: str = "--workdir") -> Iterator[None]:
    """Hold ``workdir/.thanos-run.lock`` (flock) for the duration; refuse if another run holds it, naming
    ``option`` (the one that gives another directory)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise ValueError(
                f"working directory {workdir} is in use by {owner}; wait for it to finish, or give "
                f"another {option}"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"thanos (pid {os.getpid()})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
