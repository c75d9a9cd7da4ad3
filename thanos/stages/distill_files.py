"""The distilled model's directory: the student's files with the trained weights, and what it says of itself.

``write_student`` copies every file of the student's directory into ``out`` (written whole, then renamed into
place), each safetensors shard written again with the trained tensors under the same names and in the same
dtype (the shards, their index and ``config.json`` stay as they were), and adds ``distillation.json``. A
pruned student's ``pruning_report.json`` gains a ``distillation`` section and the digests of the new files,
its ``sparsity.json`` is counted again on the trained weights and its card (README.md) says what was done; the
pruned model's evaluation is not carried over (it was of other weights).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from thanos.files import digests
from thanos.files.atomic import atomic_path

RECORD = "distillation.json"


def _rewrite_shard(source: Path, target: Path, weights: dict[str, torch.Tensor]) -> list[str]:
    """``source`` written to ``target`` with each tensor taken from ``weights`` (cast to the shard's dtype);
    returns the names ``weights`` lacks (kept as they were)."""
    tensors, missing = {}, []
    with safe_open(str(source), framework="pt") as shard:
        metadata = shard.metadata() or {"format": "pt"}
        for name in shard.keys():  # noqa: SIM118 - safe_open is not a mapping
            saved = shard.get_tensor(name)
            if name in weights:
                tensors[name] = weights[name].to(saved.dtype).contiguous()
            else:
                tensors[name] = saved
                missing.append(name)
    save_file(tensors, str(target), metadata=metadata)
    return missing


def write_student(
    student: Path, out: Path, weights: dict[str, torch.Tensor] | None, result: dict[str, Any]
) -> None:
    """``out``: the student with ``weights`` (None: its own: no checkpoint beat it), ``result`` recorded."""
    from thanos.stages.card import describe_model

    with atomic_path(out, is_dir=True) as tmp:
        untrained: list[str] = []
        for file in sorted(student.iterdir()):
            if not file.is_file() or file.name.startswith(".") or file.name == digests.REPORT:
                continue
            if file.suffix == ".safetensors" and weights is not None:
                untrained += _rewrite_shard(file, tmp / file.name, weights)
            else:
                shutil.copy2(file, tmp / file.name)
        if untrained:
            raise RuntimeError(
                f"the student's checkpoint holds tensors its model does not ({', '.join(untrained[:3])}): "
                "they would be written untrained; this architecture renames its weights when loaded"
            )
        (tmp / RECORD).write_text(json.dumps(result, indent=2) + "\n")
        report_file = student / digests.REPORT
        if report_file.is_file():
            report = json.loads(report_file.read_text())
            report["distillation"] = {key: value for key, value in result.items() if key != "train_kl"}
            report.pop("files", None)
            describe_model(tmp, report)
            report["files"] = digests.record(tmp)
            (tmp / digests.REPORT).write_text(json.dumps(report, indent=2, default=str) + "\n")
