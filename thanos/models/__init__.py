"""Model adapters (one per architecture family), lazy checkpoint reading and model directory resolution.

>>> config = load_config(model_dir)
>>> adapter = get_adapter(config)
"""

from __future__ import annotations

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


def load_config(model_dir: str | Path) -> PretrainedConfig:
    """The model's config; a directory without ``config.json`` is refused."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: pass a Hugging Face model directory")
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path)


def get_adapter(config: PretrainedConfig) -> ModelAdapter:
    """The adapter for ``config.model_type``; unsupported types fail with the supported list."""
    model_type = getattr(config, "model_type", None)
    for cls in ADAPTERS:
        if model_type in cls.model_types:
            return cls(config)
    raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED)}")


def open_model(path_or_hub_id: str | Path) -> tuple[Path, ModelAdapter, Checkpoint]:
    """Resolve a model argument to (local dir, adapter, lazy checkpoint)."""
    model_dir = resolve_model_path(path_or_hub_id)
    adapter = get_adapter(load_config(model_dir))
    return model_dir, adapter, Checkpoint(model_dir)


__all__ = [
    "ADAPTERS",
    "SUPPORTED",
    "Checkpoint",
    "ModelAdapter",
    "get_adapter",
    "load_config",
    "open_model",
    "resolve_model_path",
]
