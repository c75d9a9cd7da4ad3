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

from thanos.files import digests
from thanos.stages.common import resolve_device

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "float16", "bfloat16")


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


def _torch_dtype(dtype: str, device: str, config: Any) -> Any:
    import torch

    if dtype != "auto":
        return getattr(torch, dtype)
    saved = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(saved, str):
        saved = getattr(torch, saved, None)
    if saved is None:
        saved = torch.float32
    if device == "cpu" and saved == torch.float16:
        return torch.float32  # fp16 matmuls on CPU are slow and partly unsupported
    return saved


def load_model(
    path: str, device: str = "auto", dtype: str = "auto", device_map: str | None = None
) -> LoadedModel:
    """Load ``path`` (an HF model directory, or a hub id for users with hub access) for inference.

    A pruned model (a directory with ``pruning_report.json``) is first checked against the file digests
    recorded when it was assembled: an edited, truncated or deleted file stops here, named.

    ``device_map="auto"`` spreads the model over every visible GPU (accelerate's placement); otherwise the
    whole model goes to ``device``. ``dtype="auto"`` keeps the saved dtype (fp16 becomes fp32 on CPU).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    from thanos.models import load_tokenizer

    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if Path(path).is_dir():  # a pruned model: evaluate what was computed, nothing else
        digests.verify(path)
    try:
        config = AutoConfig.from_pretrained(path)
    except OSError as err:  # missing directory, no config.json, hub id without hub access
        raise FileNotFoundError(f"cannot load model {path!r}: {err}") from err
    if device_map is not None:
        import torch

        if device_map != "auto":
            raise ValueError(f"--device-map {device_map!r}: only 'auto' is supported")
        if not torch.cuda.is_available():
            raise ValueError(
                "--device-map auto needs GPUs; none is available (drop the option to use the CPU)"
            )
        torch_dtype = _torch_dtype(dtype, "cuda", config)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, device_map="auto")
        in_device = str(model.get_input_embeddings().weight.device)
        devices = sorted({str(p.device) for p in model.parameters()})
        placement = f"device_map=auto ({', '.join(devices)})"
    else:
        in_device = str(resolve_device(device))
        torch_dtype = _torch_dtype(dtype, in_device, config)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        model.to(in_device)
        placement = in_device
    model.eval()
    tokenizer = load_tokenizer(path)
    log.info("loaded %s on %s (%s)", path, placement, str(torch_dtype).removeprefix("torch."))
    return LoadedModel(model, tokenizer, in_device, placement, str(torch_dtype).removeprefix("torch."))
