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
- ``handle``: a model opened once (``ModelHandle``: its directory, layout, checkpoint, adapter built on first
  use), which the engine passes to every stage (``as_handle``: a path or hub id made one);
- ``card``: what a pruned model directory says about itself (config metadata, model card);
- ``real``: real models from the hub, cut to a few blocks, for the real-LLM workflow.

Imports: ``thanos.pruning``, ``thanos.files``, ``thanos.data`` and ``thanos.errors``.

>>> model = as_handle(model_dir, "results/m/model_info.json")  # model.layout, .checkpoint, .adapter
>>> model_dir, adapter, checkpoint = open_model(model_dir)
>>> model_dir, layout, checkpoint = open_layout(model_dir, "results/m/model_info.json")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.errors import PathError
from thanos.files.fingerprint import file_key
from thanos.models.base import ModelAdapter
from thanos.models.checkpoint import Checkpoint, resolve_model_path
from thanos.models.generic import GenericAdapter
from thanos.models.handle import ModelHandle, as_handle
from thanos.models.layout import ModelLayout

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def model_config(reference: str) -> PretrainedConfig:
    """The config of a local model directory (``load_config``: refused, naming the directory, without a
    readable config.json) or of a hub id (refused, named, when the hub cannot give it)."""
    if Path(reference).is_dir():
        return load_config(reference)
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(reference)
    except OSError as err:  # missing directory, hub id without hub access
        raise FileNotFoundError(f"cannot load model {reference!r}: {err}") from err


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
    for name in ("tokenizer.json", "tokenizer_config.json"):  # damaged: refused before a run reads them
        if (path / name).is_file() and (error := _json_error(str(path / name), file_key(path / name))):
            fix = "restore it from the original model"
            raise PathError(f"{name} is not valid JSON ({error})", path / name, fix)


@lru_cache(maxsize=16)
def _json_error(path: str, key: Any) -> str | None:
    """Why the file at ``path`` is not JSON (None: it is), parsed once while it stays the same (``key``:
    ``file_key``): a size search checks the model's tokenizer files before each point (SmolLM2-135M's
    tokenizer.json: 0.2 s a parse)."""
    try:
        json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        return str(err)
    return None


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


def open_model(path_or_hub_id: str | Path | ModelHandle) -> tuple[Path, ModelAdapter, Checkpoint]:
    """(local dir, adapter, lazy checkpoint) of a model argument (``as_handle``; the adapter is built once
    per process and model directory, kept while its config.json is unchanged)."""
    handle = as_handle(path_or_hub_id)
    return handle.path, handle.adapter, handle.checkpoint


def open_layout(
    path_or_hub_id: str | Path | ModelHandle, model_info: str | Path | Mapping[str, Any] | None = None
) -> tuple[Path, ModelLayout, Checkpoint]:
    """(local dir, layout, lazy checkpoint) of a model argument, for stages that only read tensors by name.
    ``model_info``: the workflow's ``model_info.json`` (or its content), which holds the layout: nothing of
    transformers is imported. Without one (or with one of an earlier version) the layout is the adapter's
    (``ModelHandle.layout``)."""
    handle = as_handle(path_or_hub_id, model_info)
    return handle.path, handle.layout, handle.checkpoint


__all__ = [
    "Checkpoint",
    "ModelAdapter",
    "ModelHandle",
    "ModelLayout",
    "as_handle",
    "check_tokenizer_files",
    "get_adapter",
    "load_config",
    "load_tokenizer",
    "model_config",
    "open_layout",
    "open_model",
    "resolve_model_path",
]
