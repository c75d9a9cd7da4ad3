"""Model adapters (one per architecture family), lazy checkpoint reading and model directory resolution.

>>> config = load_config(model_dir)
>>> adapter = get_adapter(config)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from thanos.models.base import ModelAdapter
from thanos.models.checkpoint import Checkpoint, resolve_model_path
from thanos.models.llama import LlamaAdapter
from thanos.models.opt import OPTAdapter

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ADAPTERS: tuple[type[ModelAdapter], ...] = (LlamaAdapter, OPTAdapter)
SUPPORTED = tuple(t for cls in ADAPTERS for t in cls.model_types)


class ConfigFile:
    """``config.json`` with attribute access, without transformers: enough for an adapter's names
    (``model_type``, ``num_hidden_layers``, ...) in stages that build no modules. Importing transformers'
    configuration code costs seconds per process; ``load_config`` gives the full ``PretrainedConfig``."""

    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str):
        raise AttributeError(f"config.json has no {name!r}")


def load_config(model_dir: str | Path, full: bool = True) -> PretrainedConfig | ConfigFile:
    """The model's config (``full=False``: a ``ConfigFile``); a directory without config.json is refused."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: pass a Hugging Face model directory")
    if not full:
        return ConfigFile(json.loads((path / "config.json").read_text()))
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path)


def get_adapter(config: PretrainedConfig) -> ModelAdapter:
    """The adapter for ``config.model_type``; unsupported types fail with the supported list."""
    model_type = getattr(config, "model_type", None)
    for cls in ADAPTERS:
        if model_type in cls.model_types:
            return cls(config)
    raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED)}")


def open_model(path_or_hub_id: str | Path, full_config: bool = True) -> tuple[Path, ModelAdapter, Checkpoint]:
    """Resolve a model argument to (local dir, adapter, lazy checkpoint).

    ``full_config=False`` reads config.json without transformers: for stages that only read tensors by
    name (the adapter then cannot build modules)."""
    model_dir = resolve_model_path(path_or_hub_id)
    adapter = get_adapter(load_config(model_dir, full=full_config))
    return model_dir, adapter, Checkpoint(model_dir)


__all__ = [
    "ADAPTERS",
    "SUPPORTED",
    "Checkpoint",
    "ConfigFile",
    "ModelAdapter",
    "get_adapter",
    "load_config",
    "open_model",
    "resolve_model_path",
]
