"""Who may write where, held by ``flock`` (the kernel releases a lock when its process ends, however it
ends, so a killed run leaves nothing to unlock and the next run starts at once):

- one run at a time in a working directory (``exclusive_workdir``: ``thanos prune-model``'s working
  directory, ``thanos distill``'s checkpoints), or runs that share one and exclude its deletion
  (``shared_workdir``: a size's search directory and the workflow's candidate jobs measuring into it); the
  lock is ``WORKDIR/.thanos-run.lock``, and ``holder`` says who holds it (``thanos workdirs``: in use);
- one writer of an output directory (``exclusive_out``: ``--out`` of ``prune-model``, ``prune-vocab``,
  ``distill`` and the workflow's assembly and parts), held from the check of what it holds to the last
  write into it; the lock is a file beside it, ``.<name>.thanos-lock``, which stays (deleting a lock file
  that another process may have open would let two writers in).

A refusal names the holder: its pid and its command line, as it wrote them into the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from thanos.errors import Option, OptionError

LOCK_NAME = ".thanos-run.lock"
OUT_LOCK = ".{name}.thanos-lock"
# the outputs this process holds: by which thread, and how deep (a size writes its choice to its own --out)
_HELD_OUTS: dict[Path, list[int]] = {}


def this_process() -> str:
    """How a lock file names its holder: ``pid 4242 (thanos prune-model --model m --out o)``."""
    argv = sys.argv or ["python"]
    program = Path(argv[0]).name
    program = "thanos" if program in ("__main__.py", "thanos", "-m") else program
    command = shlex.join([program, *argv[1:]])
    return f"pid {os.getpid()} ({command if len(command) <= 300 else command[:297] + '...'})"


def _try_lock(handle: IO[str], mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _written_owner(path: Path) -> str:
    """The holder a lock file names (the last line written), or "another process"."""
    try:
        lines = path.read_text().strip().splitlines()
    except OSError:
        lines = []
    return lines[-1] if lines else "another process"


def _claim(handle: IO[str]) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(this_process() + "\n")
    handle.flush()


def holder(path: Path) -> str | None:
    """Who holds the working directory ``path`` now (its lock file's holder), or None when nobody does."""
    lock = path / LOCK_NAME
    if not lock.exists():
        return None
    with lock.open("a+") as handle:
        if not _try_lock(handle, fcntl.LOCK_EX):
            return _written_owner(lock)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


@contextlib.contextmanager
def exclusive_workdir(workdir: Path, option: str = "--workdir") -> Iterator[None]:
    """Hold ``workdir/.thanos-run.lock`` (flock) for the duration; refuse if another run holds it, naming
    the holder and ``option`` (the one that gives another directory)."""
    with _held_workdir(workdir, fcntl.LOCK_EX, f", or give another {option}") as handle:
        try:
            yield
        finally:
            handle.truncate(0)


@contextlib.contextmanager
def shared_workdir(workdir: Path) -> Iterator[None]:
    """Hold ``workdir``'s lock shared for the duration: other shared holders run beside this one, an
    exclusive one (a run of its own there, ``thanos workdirs --delete``) is refused while it is held, and
    refuses this one while it holds it. The holder named is the last one that came (the file is not
    cleared on release: others may still hold it)."""
    with _held_workdir(workdir, fcntl.LOCK_SH, ""):
        yield


@contextlib.contextmanager
def _held_workdir(workdir: Path, mode: int, fix: str) -> Iterator[IO[str]]:
    """``workdir``'s lock held in ``mode`` and naming this process, its handle yielded; refused (ValueError
    naming the holder, then ``fix``) while another holds it in a mode that excludes this one."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    with path.open("a+") as handle:
        if not _try_lock(handle, mode):
            raise ValueError(
                f"working directory {workdir} is in use by {_written_owner(path)}; wait for it to finish{fix}"
            )
        _claim(handle)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def deleting(workdir: Path) -> Iterator[None]:
    """Hold ``workdir``'s lock while it is deleted: refused (ValueError naming the holder, nothing deleted)
    while a run holds it; a run that starts meanwhile is refused in its turn."""
    path = workdir / LOCK_NAME
    with path.open("a+") as handle:
        if not _try_lock(handle, fcntl.LOCK_EX):
            raise ValueError(
                f"{workdir}: a run is using it now ({_written_owner(path)}); wait for it to finish (nothing "
                "deleted)"
            )
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def out_lock(out: str | Path) -> Path:
    """The lock file of the output directory ``out``: ``.<name>.thanos-lock`` beside it."""
    resolved = Path(out).expanduser().resolve()
    return resolved.parent / OUT_LOCK.format(name=resolved.name)


@contextlib.contextmanager
def exclusive_out(out: str | Path, option: str = "out", probe: bool = False) -> Iterator[None]:
    """Hold the output directory ``out`` for the duration (``out_lock``); while another process holds it,
    refuse at once (``OptionError`` naming ``option``, the holder, and what to do), having touched nothing.
    Held again by the same process (a size writing its chosen recipe to its ``out``), it passes.
    ``probe``: only check (a dry run: nothing is created, nothing held)."""
    resolved, thread = Path(out).expanduser().resolve(), threading.get_ident()
    path = out_lock(resolved)
    if resolved in _HELD_OUTS:
        held = _HELD_OUTS[resolved]
        if held[0] != thread:  # another thread of this process (``prune_model`` called from threads)
            raise _refusal(out, option, f"{this_process()}, another thread")
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    if probe:
        if path.is_file():
            with path.open("r") as handle:
                _check_free(handle, path, out, option)
                fcntl.flock(handle, fcntl.LOCK_UN)
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # under a file: no writer can get in; the checks name it
        yield
        return
    with path.open("a+") as handle:
        _check_free(handle, path, out, option)
        _claim(handle)
        _HELD_OUTS[resolved] = [thread, 1]
        try:
            yield
        finally:
            del _HELD_OUTS[resolved]
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_free(handle: IO[str], path: Path, out: str | Path, option: str) -> None:
    """Lock ``handle`` exclusively, or refuse naming the holder."""
    if not _try_lock(handle, fcntl.LOCK_EX):
        raise _refusal(out, option, _written_owner(path))


def _refusal(out: str | Path, option: str, owner: str) -> OptionError:
    return OptionError(
        Option(option, str(out)),
        f" is being written by {owner}; wait for that run to finish (or stop it: its command again resumes "
        "it), or give another ",
        Option(option),
    )
