"""Atomic writes: everything is written to a temporary sibling and renamed into place.

A reader therefore sees either nothing or a complete file/directory, never a half-written one. The
temporary sibling of ``out`` is ``.out.<host>.<pid>.<random>.tmp``; one left behind by a killed job is
removed by the next atomic write of ``out`` (unless its process is still running on this host).
Published files and directories get the permissions a plain create would give (``0666``/``0777`` minus
the umask), also the files inside a published directory (safetensors and mkstemp create ``0600``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# ".{name}." + one of: "<host>.<pid>.<random>.tmp|old" (this module) or "<8 random>.tmp", "old-<pid>"
# (earlier versions); host has no dots, so a sibling of another output ("{name}.x") never matches
_SIBLING = re.compile(
    r"(?P<host>[^.]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.(tmp|old)|[a-z0-9_]{8}\.tmp|old-(?P<old>\d+)"
)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"


def _prefix(path: Path) -> str:
    return f".{path.name}.{_host()}.{os.getpid()}."


def _running_here(host: str | None, pid: int) -> bool:
    """Whether ``pid`` on ``host`` (None: this host) is a live process other than this one."""
    if (host is not None and host != _host()) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def remove_stale_siblings(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary siblings of ``path`` left by killed writers; returns them."""
    path = Path(path)
    removed = []
    lead = f".{path.name}."
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path.parent):
            if not entry.name.startswith(lead):
                continue
            match = _SIBLING.fullmatch(entry.name[len(lead) :])
            if match is None:
                continue
            pid = match["pid"] or match["old"]
            if pid is not None and _running_here(match["host"], int(pid)):
                continue
            stale = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
            log.info("removed %s, left behind by an interrupted write of %s", stale, path)
            removed.append(stale)
    return removed


def _tmp_sibling(path: Path, is_dir: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(path)
    if is_dir:
        return Path(tempfile.mkdtemp(prefix=_prefix(path), suffix=".tmp", dir=path.parent))
    fd, name = tempfile.mkstemp(prefix=_prefix(path), suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish_mode(tmp: Path) -> None:
    """Give the temporary file or directory, and everything in it, the permissions a plain create would:
    0666 (0777 for directories and executables) minus the umask (mkstemp and safetensors use 0600)."""
    umask = _umask()

    def chmod(target: str) -> None:
        if not os.path.islink(target):  # a link's target is not ours to change
            mode = os.stat(target).st_mode
            executable = os.path.isdir(target) or bool(mode & 0o111)
            os.chmod(target, (0o777 if executable else 0o666) & ~umask)

    chmod(str(tmp))
    for root, dirs, files in os.walk(tmp):
        for name in dirs + files:
            chmod(os.path.join(root, name))


def _replace(tmp: Path, path: Path) -> None:
    _publish_mode(tmp)
    if path.is_dir() and not path.is_symlink() and not tmp.is_dir():  # a file never takes a directory's place
        raise IsADirectoryError(
            errno.EISDIR, "a directory is there, where a file was to be written; give a file path", str(path)
        )
    if path.is_dir() and not path.is_symlink():
        old = path.with_name(f"{_prefix(path)}{secrets.token_hex(4)}.old")
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; on success rename it to ``path``, on error delete it.

    Stale temporary siblings of ``path`` (from killed writers) are removed first. An ``OSError`` that
    names no file (a failed write: disk full, quota) and a "No space left on device" error from a library
    are raised as an ``OSError`` naming ``path``."""
    path = Path(path)
    tmp = _tmp_sibling(path, is_dir)
    try:
        yield tmp
        _replace(tmp, path)
    except BaseException as err:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno is not None and err.filename is None:
            raise OSError(err.errno, err.strerror, str(path)) from err
        if (
            isinstance(err, Exception)
            and not isinstance(err, OSError)
            and "No space left on device" in str(err)
        ):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from err
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
