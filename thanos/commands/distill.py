"""Train a pruned model (the student) toward the dense model it came from (the teacher) on real text: the KL
divergence of their next-token distributions (Minitron's logit loss), AdamW, warm-up and cosine decay; every
zero pruning wrote stays zero. Checkpoints every --checkpoint-every steps: the same command again continues
from the last one, to the same weights. The weights with the lowest KL on held-out windows of the text are
written to --out (the student's files, shards and dtype). Several processes: `torchrun --nproc-per-node N -m
thanos distill ...` (data parallel; gloo on CPUs, NCCL on GPUs). See docs/distillation.md."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

from thanos.commands import _args

HELP = "train a pruned model toward the dense model's next-token distributions on text (resumable)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--student", required=True, help="the pruned model's directory (thanos prune-model --out)"
    )
    parser.add_argument(
        "--teacher", required=True, help="the dense model it was pruned from (directory or hub id)"
    )
    _args.add_text_source(
        parser,
        "c4",
        "the first English training shard of allenai/c4, from the hub; or hf:NAME[:CONFIG], the "
        "train split of a hub dataset streamed, read only as far as the budget needs",
    )
    parser.add_argument(
        "--out", required=True, help="the distilled model's directory (written whole at the end)"
    )
    parser.add_argument(
        "--tokens", type=int, required=True, help="the token budget: windows trained on x seqlen"
    )
    parser.add_argument("--seqlen", type=int, default=512, help="window length in tokens (default: 512)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="windows per optimizer step, over every process (default: 8)",
    )
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=1,
        help="windows per forward pass: gradient accumulation (default: 1)",
    )
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate of AdamW (default: 1e-4)")
    parser.add_argument(
        "--warmup", type=int, default=None, help="warm-up steps (default: a tenth of the steps)"
    )
    parser.add_argument("--heldout", type=int, default=8, help="windows of the text held out (default: 8)")
    parser.add_argument(
        "--checkpoint-every", type=int, default=50, help="steps between checkpoints (default: 50)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the windows' order (default: 0)")
    parser.add_argument(
        "--hidden-weight",
        type=float,
        default=0.0,
        help="add the hidden-state loss with this weight: each student block's output matched to the output "
        "of the teacher block it stands for (relative squared error; blocks removed by depth:k are read "
        "from the student's pruning report); default 0: the logits' KL only",
    )
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
        "--delete-checkpoints",
        action="store_true",
        help="delete the checkpoints' directory once --out is written (16 bytes a parameter that serve only "
        "to resume a killed run); default: kept",
    )
    _args.add_device(parser)
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=_args.DTYPE_CHOICES,
        help=f"the teacher's dtype and the student's autocast (default {_args.DTYPE_AUTO}); the student's "
        "master weights are float32",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def default_work(args: argparse.Namespace, options: dict) -> Path:
    """Where the checkpoints of these inputs and options go when --work is not given."""
    from thanos.runner.workdirs import DISTILL, default_root, slug

    inputs = [str(Path(args.student).resolve()), args.teacher, args.source, str(Path(args.out).resolve())]
    key = hashlib.sha256(json.dumps([inputs, options], sort_keys=True).encode()).hexdigest()[:10]
    return default_root() / DISTILL / f"{slug(Path(args.out).name)}-{key}"


def run(args: argparse.Namespace) -> None:
    from dataclasses import asdict, fields

    from thanos.recipe import Distillation
    from thanos.stages.distill import distill

    options = Distillation(**{f.name: getattr(args, f.name) for f in fields(Distillation)})
    work = Path(args.work) if args.work else default_work(args, asdict(options))
    result = distill(
        args.student,
        args.teacher,
        args.out,
        work,
        options,
        device=args.device,
        dtype=args.dtype,
        progress_bar=not args.no_progress,
        delete_checkpoints=args.delete_checkpoints,
        shard_models=args.shard,
        overwrite=args.overwrite,
    )
    if int(os.environ.get("RANK", "0")):
        return  # not the first process of a torchrun: the first one says what was written
    before, best = result["heldout"][0], result["best"]
    print(
        f"distilled {result['tokens']:,} tokens in {result['seconds']:.0f} s "
        f"({result['tokens_per_second'] or 0:.0f} tokens/s): held-out KL {before['kl']:.4g} -> "
        f"{best['kl']:.4g} (step {best['step']}); written to {args.out}"
    )
