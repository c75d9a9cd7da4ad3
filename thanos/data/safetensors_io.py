"""Reading ``.safetensors`` files with errors that name the file.

safetensors' own errors do not say which file is bad (a truncated shard gives ``SafetensorError: Error
while deserializing header: incomplete metadata, file not fully covered``). ``open_safetensors`` and
``load_safetensors`` are ``safe_open`` and ``load_file`` that raise ``SafetensorsFileError`` instead: the
file, what is wrong with it, and the fix.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from thanos.errors import PathError


class SafetensorsFileError(PathError):
    """A ``.safetensors`` file that cannot be read (truncated, damaged, not safetensors)."""

    def __init__(self, err: Exception, path: str | os.PathLike) -> None:
        super().__init__(
            f"unreadable safetensors file: {err}",
            path,
            "the file is truncated or damaged (an interrupted copy or download?): replace it, or delete it "
            "and rerun the step that wrote it",
        )


class SafetensorsFile:
    """A file opened by ``open_safetensors``: safe_open's ``keys``, ``metadata``, ``get_tensor`` and
    ``get_slice``, raising ``SafetensorsFileError``."""

    def __init__(self, handle: Any, path: Path) -> None:
        self._handle = handle
        self.path = path

    def keys(self) -> list[str]:
        return list(self._handle.keys())

    def metadata(self) -> dict[str, str] | None:
        return self._handle.metadata()

    def get_tensor(self, name: str) -> torch.Tensor:
        try:
            return self._handle.get_tensor(name)
        except SafetensorError as err:
            raise SafetensorsFileError(err, self.path) from err

    def get_slice(self, name: str) -> Any:
        try:
            return self._handle.get_slice(name)
        except SafetensorError as err:
            raise SafetensorsFileError(err, self.path) from err


@contextlib.contextmanager
def open_safetensors(path: str | os.PathLike, device: str = "cpu") -> Iterator[SafetensorsFile]:
    """``safe_open(path, framework="pt")`` whose errors name ``path``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"safetensors file not found: {path}")
    try:
        opened = safe_open(str(path), framework="pt", device=device)
    except SafetensorError as err:
        raise SafetensorsFileError(err, path) from err
    with opened as handle:
        yield SafetensorsFile(handle, path)


def load_safetensors(path: str | os.PathLike, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Every tensor of ``path`` (``safetensors.torch.load_file``) with errors that name ``path``."""
    with open_safetensors(path, device) as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}
