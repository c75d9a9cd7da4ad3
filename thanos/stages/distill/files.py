"""The files of a distillation: its working directory (``run.json``, the checkpoints) and its output.

``check_work`` says what ``WORK`` holds for a run, ``prepare_work`` keeps ``WORK/run.json`` (what the
checkpoints are of: the ledger's record, ``thanos.files.ledger``) and ``about.json`` (for whom, when;
``finished`` once the run wrote its model and kept them), ``WORK/distill.log`` is ``thanos distill``'s log;
``Checkpoints`` writes and reads ``WORK/checkpoint/`` whole (``state.pt``: the weights, AdamW's moments, the
step, the random state, the history; ``best.pt``: the weights with the lowest held-out KL so far).

``write_student`` copies every file of the student's directory into ``out`` (written whole, then renamed into
place), each safetensors shard written again with the trained tensors under the same names and in the same
dtype (the shards, their index and ``config.json`` stay as they were), and adds ``distillation.json``. A
pruned student's ``pruning_report.json`` gains a ``distillation`` section and the digests of the new files,
its ``sparsity.json`` is counted again on the trained weights and its card (README.md) says what was done; the
pruned model's evaluation is not carried over (it was of other weights).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from thanos.errors import Option, OptionError
from thanos.events import DistillWarning, OnEvent, ignore
from thanos.files import digests
from thanos.files.atomic import atomic_path, write_json
from thanos.files.layout import DISTILL_ABOUT, DISTILL_RUN
from thanos.files.ledger import Entry, difference
from thanos.files.locks import LOCK_NAME

log = logging.getLogger(__name__)

RECORD = "distillation.json"
RUN, ABOUT = DISTILL_RUN, DISTILL_ABOUT
CHECKPOINT = "checkpoint"
LOG = "distill.log"  # the log of `thanos distill`'s runs


def _ledger(work: Path) -> Entry:
    """The checkpoints and the ledger's record of what they are of (``WORK/run.json``)."""
    return Entry(work / CHECKPOINT, work / RUN)


def check_work(work: Path, record: dict[str, Any]) -> str:
    """What ``work`` holds for the run of ``record``: "new" (nothing yet), "resumes" (a checkpoint of this
    run), "other" (a checkpoint of other inputs or options: ``prepare_work`` deletes it), "started" (the
    run's record, no checkpoint yet). A directory that is not a distillation's is refused (its lock file and
    the run's log aside)."""
    if not (work / RUN).is_file():
        if work.is_dir() and any(p.name not in (LOCK_NAME, LOG) for p in work.iterdir()):
            raise OptionError(
                Option("work", str(work)),
                f" is not empty and holds no {RUN} (not a distillation's working directory); give a new or "
                "empty directory",
            )
        return "new"
    if difference(_ledger(work).recorded(), record) is not None:
        return "other"
    return "resumes" if (work / CHECKPOINT / "state.pt").is_file() else "started"


def prepare_work(
    work: Path, record: dict[str, Any], about: dict[str, Any], on_event: OnEvent = ignore
) -> None:
    """``WORK/run.json`` holds ``record``: a checkpoint of other inputs or options is not resumed from (it
    is deleted, after saying which input changed); a directory that is not a distillation's is refused
    (``check_work``). ``WORK/about.json``: ``about`` (the student, teacher and output paths) and the time.
    ``on_event``: told why the checkpoints are deleted (``thanos.events.DistillWarning``)."""
    fresh = check_work(work, record) == "new"
    work.mkdir(parents=True, exist_ok=True)
    why = _ledger(work).discard_if_changed(record, [work / CHECKPOINT])
    if why is not None and not fresh:
        warning = DistillWarning(f"the checkpoints in {work} are of another run ({why}): starting over")
        log.warning("distill: %s", warning.text)
        on_event(warning)
    write_json(work / ABOUT, about | {"last_run": time.strftime("%Y-%m-%d %H:%M:%S")})


def mark_finished(work: Path) -> None:
    """``WORK/about.json`` records when the run finished (its model written to ``out``): the checkpoints
    kept then are a finished run's, which nothing resumes from."""
    about = json.loads((work / ABOUT).read_text())
    write_json(work / ABOUT, about | {"finished": time.strftime("%Y-%m-%d %H:%M:%S")})


class Checkpoints:
    """``WORK/checkpoint/``: ``state.pt`` and ``best.pt``, written whole and renamed into place."""

    def __init__(self, work: Path) -> None:
        self.dir = work / CHECKPOINT

    def load(self) -> dict[str, Any] | None:
        state = self.dir / "state.pt"
        if not state.is_file():
            return None
        return torch.load(state, map_location="cpu", weights_only=False, mmap=True)  # read as it is used

    def best_weights(self) -> dict[str, torch.Tensor] | None:
        best = self.dir / "best.pt"
        return torch.load(best, map_location="cpu", weights_only=True) if best.is_file() else None

    def save(self, state: dict[str, Any], best: dict[str, torch.Tensor] | None) -> None:
        """``state``; ``best``: the new best weights, or None to keep the previous checkpoint's."""
        previous = self.dir / "best.pt"
        with atomic_path(self.dir, is_dir=True) as tmp:
            torch.save(state, tmp / "state.pt")
            if best is not None:
                torch.save(best, tmp / "best.pt")
            elif previous.is_file():
                try:
                    os.link(previous, tmp / "best.pt")
                except OSError:
                    shutil.copy2(previous, tmp / "best.pt")


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
    from thanos.stages.describe.card import describe_model

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
            describe_model(tmp, report, out=out)
            report["files"] = digests.record(tmp)
            (tmp / digests.REPORT).write_text(json.dumps(report, indent=2, default=str) + "\n")
