"""One model, opened once: ``ModelHandle``, what the stages read of the model they prune.

A stage is given its model as a hub id, a directory or a handle, and makes it a handle once (``as_handle``:
a handle is returned as it is); the engine opens one handle per run and passes it to every stage, so the
model is resolved (a hub id: found in the hub's cache or downloaded), its checkpoint index read, its layout
found and its adapter built at most once per run.

What a handle holds is built when first asked for: the stages that read tensors by name (prune, assemble,
compact, OWL, depth) ask for the layout and the checkpoint alone, and with the workflow's
``model_info.json`` the layout is read from it: transformers is not imported. The adapter (the model's own
transformers code: calibrate, capture, propagate, the chain, model-info) is built when first asked for,
once per process and model directory.

>>> model = as_handle("results/m/model", "results/m/model_info.json")
>>> model.path, model.layout, model.checkpoint  # no adapter built
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.files.fingerprint import model_fingerprint
from thanos.models.checkpoint import Checkpoint, resolve_model_path
from thanos.models.layout import ModelLayout

if TYPE_CHECKING:
    from thanos.models.base import ModelAdapter

ModelInfo = str | Path | Mapping[str, Any] | None  # model_info.json's path, or its content


@dataclass(frozen=True, eq=False)
class ModelHandle:
    """A model opened once: ``reference`` (as it was given: a hub id or a path), ``path`` (the local
    directory it resolves to) and ``model_info`` (its ``model_info.json``'s path or content, or None); the
    layout, checkpoint (one ``Checkpoint``: ``weight_map`` reads its index without the layout), adapter
    and fingerprint are built on first use and kept."""

    reference: str
    path: Path
    model_info: ModelInfo = None

    @classmethod
    def open(cls, model: str | Path, model_info: ModelInfo = None) -> ModelHandle:
        """The handle of ``model`` (a hub id or a directory; a hub id is resolved here, asking the hub).

        ``model_info`` is read when the layout is first asked for; a path that is not a file then (the
        engine's, before its model-info step writes it) or a file of an earlier version: the layout is the
        adapter's."""
        return cls(str(model), resolve_model_path(model), model_info)

    @cached_property
    def adapter(self) -> ModelAdapter:
        """The model's adapter (its own transformers code), built once per process and model directory."""
        return open_adapter(self.path)

    @cached_property
    def layout(self) -> ModelLayout:
        """The layers by name: from ``model_info`` when it holds them (nothing of transformers imported),
        else the adapter's."""
        info = self.model_info
        if isinstance(info, str | Path):
            info = json.loads(Path(info).read_text(encoding="utf-8")) if Path(info).is_file() else None
        layout = ModelLayout.from_info(info) if info else None
        return layout if layout is not None else self.adapter.layout

    @cached_property
    def checkpoint(self) -> Checkpoint:
        """The lazy checkpoint (its index read once), reading the layout's expert views."""
        views = self.layout.expert_views()
        self._stored.add_views(views)
        return self._stored

    @property
    def weight_map(self) -> dict[str, Path]:
        """The stored tensors' files by name (the checkpoint's index: no layout needed)."""
        return self._stored.weight_map

    @cached_property
    def _stored(self) -> Checkpoint:
        return Checkpoint(self.path)

    @cached_property
    def fingerprint(self) -> dict[str, Any]:
        """The model files' names, sizes and modification times (``thanos.files.fingerprint``)."""
        return model_fingerprint(self.path)


def as_handle(model: str | Path | ModelHandle, model_info: ModelInfo = None) -> ModelHandle:
    """``model`` as a handle: a handle as it is (``model_info`` unused: it was opened with its own), else
    opened with ``model_info``, whose path must exist (a stage given one reads its layout from it)."""
    if isinstance(model, ModelHandle):
        return model
    handle = ModelHandle.open(model, model_info)
    if isinstance(model_info, str | Path) and not Path(model_info).is_file():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(model_info))
    return handle


_OPENED: dict[tuple, ModelAdapter] = {}


def open_adapter(model_dir: Path) -> ModelAdapter:
    """The adapter of the model in ``model_dir``, built once per process and directory (kept while its
    config.json is unchanged): the handles of one model share it."""
    from thanos.models import get_adapter, load_config

    key = _config_key(model_dir)
    adapter = _OPENED.get(key) if key else None
    if adapter is None:
        adapter = get_adapter(load_config(model_dir))
        if key:
            _OPENED[key] = adapter
    return adapter


def _config_key(model_dir: Path) -> tuple | None:
    """What identifies an opened model: its directory and its config.json's stat (None: no config)."""
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        return None
    stat = config_file.stat()
    return str(model_dir.resolve()), stat.st_mtime_ns, stat.st_size
