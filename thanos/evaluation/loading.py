"""Load an assembled (or dense) HF causal LM and its tokenizer for evaluation.

One device (``auto``: the GPU if there is one, else the CPU), or spread over all visible GPUs with
``device_map="auto"`` for models that do not fit one.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.errors import PathError
from thanos.files import digests
from thanos.stages.common import COMPUTE_DTYPES, compute_dtype, resolve_device

log = logging.getLogger(__name__)


def set_offline() -> None:
    """Switch the hub clients to offline mode for this process and its children.

    Call it before anything imports ``datasets`` or ``huggingface_hub``; modules already imported are
    patched too (their switches are read once, at import time).
    """
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[var] = "1"
    if "huggingface_hub.constants" in sys.modules:
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True
    if "datasets.config" in sys.modules:
        cfg = sys.modules["datasets.config"]
        cfg.HF_HUB_OFFLINE = True
        cfg.HF_DATASETS_OFFLINE = True


@dataclass
class LoadedModel:
    model: Any  # transformers PreTrainedModel, eval mode
    tokenizer: Any
    device: str  # where inputs go (the embedding's device)
    placement: str  # "cuda", "cpu", "cuda:1" or "device_map=auto (cuda:0, cuda:1)"
    dtype: str


def _torch_dtype(dtype: str, device: str, config: Any, path: str) -> Any:
    """The dtype the model is loaded and run in: ``compute_dtype``'s policy (``auto``: the saved dtype on a
    GPU and on a CPU that multiplies it faster than float32, else float32), except that ``auto`` keeps the
    saved dtype on the CPU when the model's float32 weights would not fit in the memory available now (a
    7B bf16 model needs 28 GB in float32)."""
    import psutil
    import torch

    from thanos.models.base import config_dtype

    saved = config_dtype(config)
    chosen = compute_dtype(dtype, torch.device(device), saved)
    if dtype != "auto" or chosen == saved or not Path(path).is_dir():
        return chosen
    weights = sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
    needed = weights * chosen.itemsize // saved.itemsize
    available = psutil.virtual_memory().available
    if needed > 0.8 * available:
        log.warning(
            "%s: its float32 weights (%.1f GiB) do not fit in the memory available (%.1f GiB): running it in "
            "its saved %s, several times slower on a CPU without bf16/fp16 matrix units",
            path, needed / 2**30, available / 2**30, str(saved).removeprefix("torch."),
        )  # fmt: skip
        return saved
    return chosen


def run_dtype(path: str, device: str = "auto", dtype: str = "auto") -> str:
    """The dtype ``load_model(path, device, dtype)`` runs the model in (``float32``, ``bfloat16``), read
    from its config alone: a result computed in another dtype is another result."""
    from thanos.models import model_config

    chosen = _torch_dtype(dtype, str(resolve_device(device)), model_config(path), path)
    return str(chosen).removeprefix("torch.")


def load_model(
    path: str, device: str = "auto", dtype: str = "auto", device_map: str | None = None
) -> LoadedModel:
    """Load ``path`` (an HF model directory, or a hub id for users with hub access) for inference.

    A pruned model (a directory with ``pruning_report.json``) is first checked against the file digests
    recorded when it was assembled: an edited, truncated or deleted file stops here, named.

    ``device_map="auto"`` spreads the model over every visible GPU (accelerate's placement); otherwise the
    whole model goes to ``device``. ``dtype="auto"``: the saved dtype where the device multiplies it
    faster than float32 (a GPU; a CPU where it measured so, ``thanos.stages.cpu_dtypes``), else float32
    (``thanos.stages.common.compute_dtype``).
    """
    from transformers import AutoModelForCausalLM

    from thanos.data.safetensors_io import open_safetensors
    from thanos.models import load_tokenizer, model_config

    if dtype not in COMPUTE_DTYPES:
        raise ValueError(f"--dtype {dtype!r}: use one of {', '.join(COMPUTE_DTYPES)}")
    if Path(path).is_file():
        raise PathError(
            "a file, not a model directory", path, "give the directory that holds the model's files"
        )
    if Path(path).is_dir():  # a pruned model: evaluate what was computed, nothing else
        digests.verify(path)
        if not any(file.suffix in (".safetensors", ".bin") for file in Path(path).iterdir()):
            raise PathError(
                "no weights (*.safetensors, pytorch_model*.bin) in the model directory",
                path,
                "give a directory that save_pretrained wrote, weights included",
            )
        for shard in sorted(Path(path).glob("*.safetensors")):  # a truncated one named (headers read)
            with open_safetensors(shard):
                pass
    config = model_config(path)
    tokenizer = load_tokenizer(path)  # a model without one refused before its weights are read
    if device_map is not None:
        import torch

        if device_map != "auto":
            raise ValueError(f"--device-map {device_map!r}: only 'auto' is supported")
        if not torch.cuda.is_available():
            raise ValueError(
                "--device-map auto needs GPUs; none is available (drop the option to use the CPU)"
            )
        torch_dtype = _torch_dtype(dtype, "cuda", config, path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, device_map="auto")
        in_device = str(model.get_input_embeddings().weight.device)
        devices = sorted({str(p.device) for p in model.parameters()})
        placement = f"device_map=auto ({', '.join(devices)})"
    else:
        in_device = str(resolve_device(device))
        torch_dtype = _torch_dtype(dtype, in_device, config, path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        model.to(in_device)
        placement = in_device
    model.eval()
    log.info("loaded %s on %s (%s)", path, placement, str(torch_dtype).removeprefix("torch."))
    return LoadedModel(model, tokenizer, in_device, placement, str(torch_dtype).removeprefix("torch."))
