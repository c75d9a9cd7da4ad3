"""Lazy reading of a Hugging Face checkpoint: one tensor at a time from its safetensors shards.

Nothing here loads a whole model: ``Checkpoint.tensors(names)`` opens only the shards that hold the
requested names with safetensors' own reader (``safe_open``) and copies out only those tensors.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import torch

from thanos.data.safetensors_io import SafetensorsFileError, open_safetensors
from thanos.files.fingerprint import MODEL_FILES

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
CONVERT_HINT = (
    "convert it to safetensors once, e.g. `AutoModelForCausalLM.from_pretrained(path)"
    ".save_pretrained(out, safe_serialization=True)` and copy the tokenizer files"
)


def resolve_model_path(path_or_hub_id: str | Path) -> Path:
    """A local model directory: ``path_or_hub_id`` itself if it is a directory, else a hub snapshot.

    The hub is asked (``huggingface_hub.snapshot_download``) only when the argument is not an existing
    directory; config, tokenizer and safetensors files are fetched, nothing else.
    """
    path = Path(path_or_hub_id)
    if path.is_dir():
        return path
    if path.exists() or str(path_or_hub_id).startswith((".", "/", "~")):
        raise FileNotFoundError(f"model directory not found: {path}; pass an HF model directory or a hub id")
    from huggingface_hub import snapshot_download

    log.info("model %s is not a local directory: downloading it from the hub", path_or_hub_id)
    try:
        local = snapshot_download(
            str(path_or_hub_id),
            allow_patterns=list(MODEL_FILES),
        )
    except Exception as err:  # noqa: BLE001 - any hub failure means the same thing to the user
        raise FileNotFoundError(
            f"model {path_or_hub_id!r} is neither a local directory nor downloadable from the hub ({err}); "
            "download it where the hub is reachable and pass the directory"
        ) from err
    return Path(local)


class Checkpoint:
    """The safetensors weights of a model directory, read tensor by tensor.

    Accepts ``model.safetensors.index.json`` (sharded) or a single ``model.safetensors``; anything else
    (e.g. only ``pytorch_model.bin``) is refused with a message telling how to convert it.

    ``views`` (``add_views``): 2-D tensors that are one expert's slice of a 3-D tensor holding every expert
    (a checkpoint that stores its experts fused): read, and shaped (out, in), as if they were stored so;
    ``names`` lists the stored tensors only.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        self.views: dict[str, tuple[str, int, bool]] = {}  # name -> (stored 3-D tensor, expert, transposed)
        self._shapes: dict[Path, dict[str, list[int]]] = {}  # a shard's header, read once: name -> shape
        index = self.model_dir / INDEX_FILE
        single = self.model_dir / SINGLE_FILE
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.weight_map = {name: self.model_dir / shard for name, shard in weight_map.items()}
        elif single.is_file():
            with open_safetensors(single) as handle:
                self.weight_map = dict.fromkeys(handle.keys(), single)
        else:
            others = sorted(p.name for p in self.model_dir.glob("*.bin")) + sorted(
                p.name for p in self.model_dir.glob("*.pt")
            )
            found = f" (found {', '.join(others)})" if others else ""
            raise FileNotFoundError(
                f"no safetensors weights in {self.model_dir}: expected {INDEX_FILE} or {SINGLE_FILE}{found}; "
                + CONVERT_HINT
            )

    def names(self, prefix: str = "") -> list[str]:
        """All tensor names starting with ``prefix``, sorted."""
        return sorted(n for n in self.weight_map if n.startswith(prefix))

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map or name in self.views

    def add_views(self, views: dict[str, tuple[str, int, bool]]) -> None:
        """Name -> (the stored 3-D tensor, the expert, whether it holds (in, out) matrices): each name reads
        as that expert's (out, in) matrix (``ModelLayout.expert_views``)."""
        for name, (source, expert, _) in views.items():
            if source not in self.weight_map:
                raise ValueError(f"{self.model_dir}: tensor {source} (of {name}) is not in the checkpoint")
            shape = self._stored_shape(source)
            if len(shape) != 3 or not 0 <= expert < shape[0]:
                raise ValueError(f"{self.model_dir}: {source} of shape {shape} has no expert {expert}")
        self.views.update(views)

    def tensors(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The named tensors (CPU, stored dtype), opening each needed shard once; a view is its expert's
        slice alone (``get_slice``: the other experts are not read)."""
        missing = [n for n in names if n not in self.weight_map and n not in self.views]
        if missing:
            raise ValueError(f"{self.model_dir}: tensors not in the checkpoint: {', '.join(missing[:5])}")
        by_shard: dict[Path, list[str]] = defaultdict(list)
        for name in names:
            by_shard[self.weight_map[self.views[name][0] if name in self.views else name]].append(name)
        out: dict[str, torch.Tensor] = {}
        for shard, shard_names in by_shard.items():
            if not shard.is_file():
                raise FileNotFoundError(
                    f"shard {shard} listed in {INDEX_FILE} is missing; re-download the model"
                )
            with open_safetensors(shard) as handle:
                for name in shard_names:
                    if name in self.views:
                        source, expert, transposed = self.views[name]
                        W = handle.get_slice(source)[expert]
                        out[name] = W.T.contiguous() if transposed else W
                    else:
                        out[name] = handle.get_tensor(name)
        return out

    def shape(self, name: str) -> list[int]:
        """A tensor's shape, from its shard's header (nothing is read); a view's as (out, in)."""
        if name in self.views:
            source, _, transposed = self.views[name]
            rows, columns = self._stored_shape(source)[1:]
            return [columns, rows] if transposed else [rows, columns]
        if name not in self.weight_map:
            raise ValueError(f"{self.model_dir}: tensor {name} is not in the checkpoint")
        return self._stored_shape(name)

    def _stored_shape(self, name: str) -> list[int]:
        """A stored tensor's shape, from its shard's header (every shape of a shard read at its first)."""
        shard = self.weight_map[name]
        if shard not in self._shapes:
            with open_safetensors(shard) as handle:
                self._shapes[shard] = {key: list(handle.get_slice(key).get_shape()) for key in handle.keys()}
        if name not in self._shapes[shard]:
            raise ValueError(f"{self.model_dir}: tensor {name} is not in {shard.name}; re-download the model")
        return list(self._shapes[shard][name])

    def tensor(self, name: str) -> torch.Tensor:
        """One named tensor."""
        return self.tensors([name])[name]

    def check_finite(self, chunk_bytes: int = 1 << 26) -> int:
        """Read every floating-point tensor once, ``chunk_bytes`` at a time, and refuse the first holding
        NaN or Inf, naming it and its shard. Returns the number of tensors checked.

        The data is read with ordinary file reads into one buffer, not through safetensors' memory map
        (whose pages, once read, count in the process's RSS until the shard is closed: up to a whole shard),
        so the memory used is one chunk whatever the size of the model."""
        by_shard: dict[Path, list[str]] = defaultdict(list)
        for name in sorted(self.weight_map):
            by_shard[self.weight_map[name]].append(name)
        buffer = bytearray(chunk_bytes)
        for shard, names in sorted(by_shard.items()):
            with open_safetensors(shard):  # a damaged header fails here, naming the file
                pass
            for name, bad in _non_finite(shard, names, buffer):
                if bad:
                    raise ValueError(
                        f"{self.model_dir}: tensor {name} (in {shard.name}) holds {bad} NaN or Inf "
                        "values; the checkpoint is damaged or overflowed when it was saved: re-download "
                        "or re-export it"
                    )
        return len(self.weight_map)

    def prefixed(self, prefix: str) -> dict[str, torch.Tensor]:
        """Every tensor under ``prefix``, keyed by the name relative to it (a module's state dict)."""
        names = self.names(prefix)
        if not names:
            raise ValueError(f"{self.model_dir}: no tensors named {prefix}*; is this the right architecture?")
        return {name[len(prefix) :]: t for name, t in self.tensors(names).items()}


_FLOATS = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


def _non_finite(shard: Path, names: list[str], buffer: bytearray) -> Iterator[tuple[str, int]]:
    """(name, how many NaN/Inf values) for each of ``names`` in the safetensors file ``shard``, read
    ``len(buffer)`` bytes at a time into ``buffer`` (0 for integer, boolean and empty tensors)."""
    with shard.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
        base = 8 + length
        for name in names:
            entry = header[name]
            dtype = _FLOATS.get(entry["dtype"])
            if dtype is None:
                yield name, 0
                continue
            start, stop = entry["data_offsets"]
            step = len(buffer) - len(buffer) % dtype.itemsize
            bad = 0
            for offset in range(start, stop, step):
                size = min(step, stop - offset)
                f.seek(base + offset)
                if f.readinto(memoryview(buffer)[:size]) != size:
                    raise SafetensorsFileError(EOFError(f"tensor {name} is cut short"), shard)
                values = torch.frombuffer(buffer, dtype=dtype, count=size // dtype.itemsize)
                values = values.float() if dtype.itemsize == 1 else values  # float8: no isfinite of its own
                bad += int((~torch.isfinite(values)).sum())
            yield name, bad


def stored_parameters(model_dir: str | Path) -> int:
    """The parameters a written model's safetensors files hold, read from their headers (a tied head stored
    once: once)."""
    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with open_safetensors(path) as handle:
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    return total
