"""Models: what the pipeline knows about an architecture, and the model directories it reads and writes.

- ``base``, ``llama``, ``opt``, ``generic``: the adapters: blocks, linear layers and their input groups,
  embedding and head; hand-written for Llama-like models and OPT, the generic one (the model's own
  transformers code) for every other decoder-only causal LM;
- ``experts``: mixture-of-experts experts (transformers' experts interface): their per-expert matrices as
  the checkpoint stores them, the routed tokens' inputs, the weight conversions of a block;
- ``neurons``: where a block's MLP neurons live (its output projection and feeders), for ``neurons:p``;
- ``matrix``: the tested matrix of model types and their tiny configs;
- ``checkpoint``: lazy reading of a checkpoint's tensors, one block at a time; model directories;
- ``card``: what a pruned model directory says about itself (config metadata, model card);
- ``tiny``: tiny random models built from a config, for the smoke workflow, tests and benchmarks.

Imports: ``thanos.pruning``, ``thanos.files``, ``thanos.data`` and ``thanos.errors``.

>>> config = load_config(model_dir)
>>> adapter = get_adapter(config)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.errors import PathError
from thanos.models.base import ModelAdapter
from thanos.models.checkpoint import Checkpoint, resolve_model_path
from thanos.models.generic import GenericAdapter
from thanos.models.llama import LlamaAdapter
from thanos.models.opt import OPTAdapter

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ADAPTERS: tuple[type[ModelAdapter], ...] = (LlamaAdapter, OPTAdapter)


class ConfigFile:
    """``config.json`` with attribute access, without transformers: enough for an adapter's names
    (``model_type``, ``num_hidden_layers``, ...) in stages that build no modules. Importing transformers'
    configuration code costs seconds per process; ``load_config`` gives the full ``PretrainedConfig``."""

    def __init__(self, values: dict, path: Path) -> None:
        self.__dict__.update(values)
        self._path = path

    def full(self) -> PretrainedConfig:
        """The ``PretrainedConfig`` (imports transformers)."""
        return load_config(self._path)

    def __getattr__(self, name: str):
        raise AttributeError(f"config.json has no {name!r}")


def load_config(model_dir: str | Path, full: bool = True) -> PretrainedConfig | ConfigFile:
    """The model's config (``full=False``: a ``ConfigFile``); a directory without a readable config.json
    is refused, naming it."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        empty = " (the directory is empty)" if path.is_dir() and not any(path.iterdir()) else ""
        raise FileNotFoundError(
            f"no config.json in the model directory{empty} ({path}); pass a Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer files), as save_pretrained writes it"
        )
    try:
        values = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise PathError(
            f"config.json is not valid JSON ({err})",
            path / "config.json",
            "restore it from the original model",
        ) from None
    if not full:
        return ConfigFile(values, path)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path)


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
    """The hand-written adapter of ``config.model_type`` if there is one, else the generic adapter (the
    model's own transformers code; it refuses, naming why, a model it cannot run block by block)."""
    model_type = getattr(config, "model_type", None)
    for cls in ADAPTERS:
        if model_type in cls.model_types:
            return cls(config)
    if isinstance(config, ConfigFile):  # the generic adapter builds the model: it needs transformers' config
        config = config.full()
    return GenericAdapter(config)


_OPENED: dict[tuple, ModelAdapter] = {}


def open_model(path_or_hub_id: str | Path, full_config: bool = True) -> tuple[Path, ModelAdapter, Checkpoint]:
    """Resolve a model argument to (local dir, adapter, lazy checkpoint).

    ``full_config=False`` reads config.json without transformers: for stages that only read tensors by
    name (the adapter then cannot build modules). The adapter is built once per process and model
    directory (and kept while its config.json is unchanged): stages called one after another share it."""
    model_dir = resolve_model_path(path_or_hub_id)
    config_file = model_dir / "config.json"
    key = None
    if config_file.is_file():
        stat = config_file.stat()
        key = (str(model_dir.resolve()), full_config, stat.st_mtime_ns, stat.st_size)
    adapter = _OPENED.get(key) if key else None
    if adapter is None:
        adapter = get_adapter(load_config(model_dir, full=full_config))
        if key:
            _OPENED[key] = adapter
    return model_dir, adapter, Checkpoint(model_dir)


__all__ = [
    "ADAPTERS",
    "Checkpoint",
    "ConfigFile",
    "ModelAdapter",
    "check_tokenizer_files",
    "get_adapter",
    "load_config",
    "load_tokenizer",
    "open_model",
    "resolve_model_path",
]
