"""Train a pruned model (the student) toward the dense model it came from (the teacher) on real text: the KL
divergence of their next-token distributions (Minitron's logit loss), AdamW, warm-up and cosine decay; every
zero pruning wrote stays zero. Checkpoints every --checkpoint-every steps: the same command again continues
from the last one, to the same weights. The weights with the lowest KL on held-out windows of the text are
written to --out (the student's files, shards and dtype); then the checkpoints are deleted (--keep all keeps
them). Several processes: `torchrun --nproc-per-node N -m thanos distill ...` (data parallel; gloo on CPUs,
NCCL on GPUs). See docs/distillation.md."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from thanos import options
from thanos.commands import _args
from thanos.recipes.training import Distillation
from thanos.runner.disk import KEEP

# its own errors (bad input, found before anything runs) name the fix: no traceback on a piped stderr (a
# failure once it runs is logged with its traceback in the run's log file)
TRACEBACK = False

log = logging.getLogger("thanos.stages.distill.distill")

HELP = "train a pruned model toward the dense model's next-token distributions on text (resumable)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--student", required=True, help="the pruned model's directory (thanos prune-model --out)"
    )
    parser.add_argument(
        "--teacher", required=True, help="the dense model it was pruned from (directory or hub id)"
    )
    parser.add_argument(
        "--out", required=True, help="the distilled model's directory (written whole at the end)"
    )
    # the options of the distillation itself, as prune-model's --distill-*
    # (thanos.recipes.training.Distillation)
    options.add_options(parser, Distillation)
    parser.add_argument(
        "--work",
        default=None,
        help="the checkpoints' directory (default: $THANOS_WORKDIR/distill/<out>-<hash of the inputs>, "
        "~/.cache/thanos by default)",
    )
    parser.add_argument(
        "--shard",
        action="store_true",
        help="under torchrun: shard the student, its gradients and AdamW's moments and the teacher over the "
        "processes (FSDP) instead of a whole copy in each, for models that do not fit one device",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --out holds: another model, or the distillation of other inputs or options "
        "(default: refused; the same command again may always replace its own result)",
    )
    parser.add_argument(
        "--keep",
        default="needed",
        choices=KEEP,
        help="what --work keeps once --out holds the model: needed (default: nothing; the checkpoints, 16 "
        "bytes a parameter, serve only to resume a killed run and are deleted then) or all (the checkpoints "
        "and the log)",
    )
    _args.add_device(parser)
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=_args.DTYPE_CHOICES,
        help=f"the teacher's dtype and the student's autocast (default {_args.DTYPE_AUTO}); the student's "
        "master weights are float32",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no status line on a terminal (the checkpoints' lines only, as when stderr is not a terminal)",
    )


def default_work(args: argparse.Namespace, distillation: dict) -> Path:
    """Where the checkpoints of these inputs and options go when --work is not given."""
    from thanos.runner.workdirs import DISTILL, default_root, slug

    inputs = [str(Path(args.student).resolve()), args.teacher, args.source, str(Path(args.out).resolve())]
    key = hashlib.sha256(json.dumps([inputs, distillation], sort_keys=True).encode()).hexdigest()[:10]
    return default_root() / DISTILL / f"{slug(Path(args.out).name)}-{key}"


def run(args: argparse.Namespace) -> None:
    """Check everything and read the text (``prepare``), say what will run, run it with its full log in
    ``--work``, say what was written; a failure once it runs is one ``ERROR:`` line (its traceback in the
    log), exit status 1."""
    from dataclasses import asdict

    from thanos.files.locks import exclusive_out
    from thanos.runner.checks import check_apart

    distillation = Distillation(**options.given(args, Distillation))
    _check_sources(args.teacher, distillation)
    work = Path(args.work) if args.work else default_work(args, asdict(distillation))
    check_apart(work, args.out, "work")  # the model written whole over --out would replace its checkpoints
    first = os.environ.get("RANK", "0") == "0"  # under torchrun, the first process writes --out
    with exclusive_out(args.out) if first else contextlib.nullcontext():  # its one writer
        _distill(args, distillation, work)


def _check_sources(teacher: str, distillation: Distillation) -> None:
    """A teacher written as a path that is no directory, and a local text that is not there, refused before
    anything is written, naming the option (they failed once the run had begun: the teacher read as a hub
    id, the text as the config's)."""
    from thanos.errors import MissingOption, Option
    from thanos.recipes.training import streamed_dataset
    from thanos.runner.sources import is_local, source_reference

    if is_local(teacher) and not Path(teacher).expanduser().is_dir():
        raise MissingOption(
            Option("teacher", teacher), "no such directory; give the dense model the student was pruned from"
        )
    if not streamed_dataset(distillation.source):  # a local dataset directory: read when it streams
        source_reference(distillation.source, "source", distillation.text_field, check=False)


def _distill(args: argparse.Namespace, distillation: Distillation, work: Path) -> None:
    """``prepare``, then the run; the first process says what runs and what was written."""
    from thanos.runner import console
    from thanos.stages.distill import distill as stage
    from thanos.stages.distill.files import LOG

    prepared = stage.prepare(
        args.student,
        args.teacher,
        args.out,
        work,
        distillation,
        args.device,
        args.dtype,
        args.shard,
        args.overwrite,
    )
    if prepared.finished is not None:
        print(
            f"nothing to do: {prepared.out} holds this distillation (the same student, teacher, text and "
            "options), unchanged; --overwrite trains it again",
            file=sys.stderr,
        )
        return
    keep_checkpoints = args.keep == "all"
    if not prepared.ranks.main:  # another process of a torchrun: the first one says what runs
        stage.run(prepared, keep_checkpoints)
        return
    log_file = work / LOG
    console.announce_distill(prepared, args.keep, log_file, sys.stderr)
    started = time.monotonic()
    result = _logged(prepared, keep_checkpoints, log_file, not args.no_progress, started)
    console.distilled_summary(prepared.out, result, work, args.keep, sys.stderr, started)


def _logged(prepared: Any, keep_checkpoints: bool, log_file: Path, show: bool, started: float) -> dict:
    """``run(prepared)`` with the status line on stderr (a terminal's, unless not ``show``) and every other
    record and output in ``log_file``; a failure says what failed in one ``ERROR:`` line and exits 1."""
    from thanos.events import StepDone, StepStarted
    from thanos.runner.console import say, say_failure
    from thanos.runner.progress import Console, StepProgress, full_log
    from thanos.stages.distill import distill as stage
    from thanos.stages.distill.files import CHECKPOINT

    label = stage.step_label(prepared.options)
    stream = Console(sys.stderr)
    progress = StepProgress(stream, interactive=None if show else False, started=started)
    with full_log(log_file):
        log.info("thanos distill: %s -> %s, %s", prepared.student, prepared.out, prepared.options)
        for warning in prepared.warnings:
            log.warning("distill: %s", warning)
        with progress:
            progress.on_event(StepStarted(label))
            try:
                result = stage.run(prepared, keep_checkpoints, progress.on_event)
            except KeyboardInterrupt:
                log.warning("interrupted during: %s", label)
                raise
            except Exception as err:
                log.exception("failed: %s", label)  # into the log only (not a "distill: " note)
                failed = err
            else:
                progress.on_event(StepDone(label, time.monotonic() - started))
                return result
    say_failure(stream, label, failed, log_file, started)
    checkpoints = log_file.parent / CHECKPOINT
    checkpointed = checkpoints.is_dir() and any(checkpoints.iterdir())
    again = (
        "it continues from the last checkpoint"
        if checkpointed
        else "no checkpoint was written: it starts over"
    )
    say(stream, f"fix the cause and run the same command again: {again}")
    raise SystemExit(1)
