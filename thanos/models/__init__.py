"""Models: what the pipeline knows about an architecture, and the model directories it reads and writes.

- ``base``, ``generic``: the adapter: blocks, linear layers and their input groups, embedding and head,
  from the model's own transformers code, for any decoder-only causal LM (``skeleton``: the model built
  on the meta device; ``recording``: what each block receives; ``discovery``: a block's linear layers);
- ``layout``: the names alone (block prefix, layers, groups, kinds of blocks), which the adapter finds and
  ``model_info.json`` holds: what the stages that read tensors by name need (``open_layout``);
- ``experts``: mixture-of-experts experts (transformers' experts interface): their per-expert matrices as
  the checkpoint stores them, the routed tokens' inputs, the weight conversions of a block;
- ``neurons``: where a block's MLP neurons live (its output projection and feeders), for ``neurons:p``;
- ``checkpoint``: lazy reading of a checkpoint's tensors, one block at a time; model directories;
- ``card``: what a pruned model directory says about itself (config metadata, model card);
- ``real``: real models from the hub, cut to a few blocks, for the real-LLM workflow.

Imports: ``thanos.pruning``, ``thanos.files``, ``thanos.data`` and ``thanos.errors``.

>>> model_dir, adapter, checkpoint = open_model(model_dir)
>>> model_dir, layout, checkpoint = open_layout(model_dir, "results/m/model_info.json")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.errors import PathError
from thanos.models.base import ModelAdapter
from thanos.models.checkpoint import Checkpoint, resolve_model_path
from thanos.models.generic import GenericAdapter
from thanos.models.layout import ModelLayout

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def load_config(model_dir: str | Path) -> PretrainedConfig:
    """The model's config; a directory without a readable config.json is refused, naming it."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        empty = " (the directory is empty)" if path.is_dir() and not any(path.iterdir()) else ""
        raise FileNotFoundError(
            f"no config.json in the model directory{empty} ({path}); pass a Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer files), as save_pretrained writes it"
        )
    try:
        json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise PathError(
            f"config.json is not valid JSON ({err})",
            path / "config.json",
            "restore it from the original model",
        ) from None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path)
    except Exception as err:  # noqa: BLE001 - a field of the wrong type or value (strict config classes)
        if not isinstance(err, TypeError | ValueError) and "Validation" not in type(err).__name__:
            raise
        raise PathError(
            f"config.json is not a valid config of its model type ({' '.join(str(err).split())})",
            path / "config.json",
            "restore it from the original model",
        ) from None


# A tokenizer transformers can load: a fast tokenizer.json, a SentencePiece model, or a BPE vocabulary
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))


def check_tokenizer_files(model_dir: str | Path) -> None:
    """Refuse a model directory without tokenizer files (a PathError naming it and the files expected)."""
    path = Path(model_dir)
    if not any(all((path / name).is_file() for name in files) for files in TOKENIZER_FILES):
        expected = " or ".join(" + ".join(files) for files in TOKENIZER_FILES)
        raise PathError(
            f"no tokenizer files in the model directory (expected {expected}, with tokenizer_config.json)",
            path,
            "copy the tokenizer files of the base model into it (AutoTokenizer.from_pretrained(base)"
            ".save_pretrained(dir) writes them)",
        )


def load_tokenizer(model_dir: str | Path) -> Any:
    """The model's tokenizer (``AutoTokenizer``); a missing or unloadable one is refused, naming the
    directory and the files expected."""
    from transformers import AutoTokenizer

    if Path(model_dir).is_dir():
        check_tokenizer_files(model_dir)
    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except Exception as err:  # noqa: BLE001 - transformers raises many kinds, none names the files
        text = " ".join(str(err).split())[:300]
        raise PathError(
            f"cannot load the tokenizer ({type(err).__name__}: {text})",
            model_dir,
            "check tokenizer.json / tokenizer_config.json, or copy the base model's tokenizer files into it",
        ) from err


def get_adapter(config: PretrainedConfig) -> ModelAdapter:
    """The generic adapter of ``config``'s model (the model's own transformers code); it refuses, naming
    why, a model it cannot run block by block."""
    return GenericAdapter(config)


_OPENED: dict[tuple, ModelAdapter] = {}


def open_model(path_or_hub_id: str | Path) -> tuple[Path, ModelAdapter, Checkpoint]:
    """Resolve a model argument to (local dir, adapter, lazy checkpoint).

    The adapter is built once per process and model directory (and kept while its config.json is
    unchanged): stages called one after another share it."""
    model_dir = resolve_model_path(path_or_hub_id)
    key = _config_key(model_dir)
    adapter = _OPENED.get(key) if key else None
    if adapter is None:
        adapter = get_adapter(load_config(model_dir))
        if key:
            _OPENED[key] = adapter
    checkpoint = Checkpoint(model_dir)
    checkpoint.add_views(adapter.layout.expert_views())
    return model_dir, adapter, checkpoint


def open_layout(
    path_or_hub_id: str | Path, model_info: str | Path | Mapping[str, Any] | None = None
) -> tuple[Path, ModelLayout, Checkpoint]:
    """Resolve a model argument to (local dir, layout, lazy checkpoint), for stages that only read tensors
    by name. ``model_info``: the workflow's ``model_info.json`` (or its content), which holds the layout:
    nothing of transformers is imported. Without one (or with one of an earlier version) the layout is the
    adapter's (``open_model``: built once per process)."""
    model_dir = resolve_model_path(path_or_hub_id)
    if isinstance(model_info, str | Path):
        model_info = json.loads(Path(model_info).read_text(encoding="utf-8"))
    layout = ModelLayout.from_info(model_info) if model_info else None
    if layout is None:
        layout = open_model(model_dir)[1].layout
    checkpoint = Checkpoint(model_dir)
    checkpoint.add_views(layout.expert_views())
    return model_dir, layout, checkpoint


def _config_key(model_dir: Path) -> tuple | None:
    """What identifies an opened model: its directory and its config.json's stat (None: no config)."""
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        return None
    stat = config_file.stat()
    return str(model_dir.resolve()), stat.st_mtime_ns, stat.st_size


__all__ = [
    "Checkpoint",
    "ModelAdapter",
    "ModelLayout",
    "check_tokenizer_files",
    "get_adapter",
    "load_config",
    "load_tokenizer",
    "open_layout",
    "open_model",
    "resolve_model_path",
]
