"""Train the demo model on the demo data: a byte-level BPE tokenizer and a small Llama (GQA), from
scratch, deterministically (seeded init and data order, deterministic kernels). Writes an HF directory
(safetensors, tokenizer, train_report.json) atomically: a temporary sibling renamed into place."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

from thanos.files.atomic import atomic_path, write_json

HELP = "train the small demo Llama (and its tokenizer) on the demo data"
SAVE_EVERY = 20  # steps between kept states (the default options: about 13 s of 2 cores)
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.demo.train import TrainOptions

    parser.add_argument(
        "--data-dir", required=True, type=Path, help="output of demo-data (train.jsonl, test.jsonl)"
    )
    parser.add_argument("--out", required=True, type=Path, help="HF model directory to write")
    parser.add_argument(
        "--device", default="auto", help="auto (CUDA if available, else CPU), cpu, cuda, cuda:N"
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=SAVE_EVERY,
        metavar="N",
        help="keep the training's state every N steps (and at least every minute) in OUT.train-state, so "
        "that a stopped run (Ctrl-C, a killed job) resumes there when run again, to the same bytes; deleted "
        f"once the model is written; 0: never (default {SAVE_EVERY})",
    )
    parser.add_argument(
        "--no-held-out",
        action="store_true",
        help="skip the held-out perplexity at the end (train_report.json's held_out is null); the workflow "
        "sets it, since it evaluates the written model with the same protocol in its own job",
    )
    defaults = TrainOptions()
    helps = {
        "vocab_size": "BPE vocabulary size",
        "hidden_size": "model width",
        "intermediate_size": "MLP width",
        "num_layers": "decoder blocks",
        "num_heads": "attention heads",
        "num_kv_heads": "key/value heads (GQA)",
        "max_position_embeddings": "maximum context (perplexity windows use min(2048, this))",
        "seq_len": "training window length",
        "batch_size": "windows per step",
        "steps": "optimizer steps",
        "lr": "peak learning rate (AdamW)",
        "min_lr_ratio": "final learning rate / peak (cosine decay)",
        "warmup_steps": "linear warm-up steps",
        "weight_decay": "AdamW weight decay (matrices only)",
        "grad_clip": "gradient norm clip",
        "seed": "seed of initialisation and data order",
        "eval_batch_size": "windows per batch of the held-out evaluation",
        "log_every": "log the mean training loss every N steps",
    }
    for field in dataclasses.fields(TrainOptions):
        default = getattr(defaults, field.name)
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            type=type(default),
            default=default,
            help=f"{helps[field.name]} (default {default})",
        )


def run(args: argparse.Namespace) -> None:
    from thanos.demo.splits import read_jsonl
    from thanos.demo.train import TrainOptions, train_demo
    from thanos.demo.train_state import TrainState, state_dir
    from thanos.errors import Option, OptionError
    from thanos.files.ledger import digest
    from thanos.stages.common import resolve_device
    from thanos.stages.publish import check_replaceable

    opts = TrainOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainOptions)})
    opts.validate()
    if args.save_every < 0:
        raise OptionError(Option("save-every", str(args.save_every)), "give 0 (never) or a number of steps")
    check_replaceable(args.out, "out", "train_report.json", "thanos train-demo")  # the rest: deleted
    device = resolve_device(args.device)
    train_docs = [a.text for a in read_jsonl(args.data_dir / "train.jsonl")]
    test_docs = [a.text for a in read_jsonl(args.data_dir / "test.jsonl")]
    manifest = args.data_dir / "manifest.json"
    inputs = {"options": dataclasses.asdict(opts), "train": digest(train_docs), "device": device.type}
    state = TrainState(state_dir(args.out), inputs, args.save_every)
    try:
        with atomic_path(args.out, is_dir=True) as tmp:
            report = train_demo(train_docs, test_docs, tmp, opts, device, not args.no_held_out, state)
            report["data"]["dir"] = str(args.data_dir)
            if manifest.is_file():
                import json

                splits = json.loads(manifest.read_text()).get("splits", {})
                report["data"]["splits_sha256"] = {k: v["sha256"] for k, v in splits.items()}
            write_json(tmp / "train_report.json", report)
    except KeyboardInterrupt as err:  # the command's last line says what was kept (``thanos.cli``)
        err.resume = _kept(state, opts.steps, args.save_every)  # type: ignore[attr-defined]
        raise
    state.clear()
    scores = report["held_out"]
    log.info(
        "wrote %s: %.2fM parameters, %d steps in %.0fs%s",
        args.out,
        report["model"]["parameters"] / 1e6,
        report["steps"],
        report["seconds"],
        f", held-out ppl {scores['ppl']:.2f}" if scores else "",
    )


def _kept(state: Any, steps: int, save_every: int) -> str:
    """What a stopped training kept, and what the same command does: the last line of the command."""
    if state.saved:
        return (
            f"the state after step {state.saved} of {steps} is kept in {state.where}: the same command "
            "resumes there"
        )
    if not save_every:
        return "no state kept (--save-every 0): the same command starts over"
    return (
        f"stopped before its first kept state (every {save_every} steps or every minute): the same "
        "command starts over"
    )
