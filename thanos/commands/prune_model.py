"""Prune one model with one recipe in one command: runs every stage in this process (resumable: run the
same command again after a crash or Ctrl-C) and writes a loadable, self-describing model (sparsity.json,
README.md model card) to --out."""

from __future__ import annotations

import argparse
from typing import Any

from thanos.commands import _args

# its own errors (bad input, found before anything runs) name the fix: no traceback on a piped stderr (a
# step's failure is logged with its traceback in the run's log file)
TRACEBACK = False

HELP = "prune a model with one recipe, resumably: --model M --method thanos --sparsity 2:4 --out DIR"

EXAMPLES = """\
examples:
  thanos prune-model --model TinyLlama/TinyLlama-1.1B-Chat-v1.0 --method thanos --sparsity 2:4 \\
      --out tinyllama-2of4 --evaluate ppl
  thanos prune-model --model ./my-llama --method sparsegpt --sparsity 0.5 \\
      --calibration corpus.jsonl --nsamples 64 --seqlen 1024 --out ./my-llama-50 --device cpu

Interrupted (Ctrl-C, crash, lost session)? Run the same command again: it resumes where it stopped.
Intermediates live in --workdir (default $THANOS_WORKDIR/<model>-<hash>, THANOS_WORKDIR defaulting to
~/.cache/thanos): another recipe on the same model and calibration reuses them. The disk a run needs is
estimated and checked before it starts; `thanos workdirs` lists the working directories and deletes them.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.pruning.methods import names
    from thanos.recipe import DEFAULT_DAMP, Recovery
    from thanos.runner.one_recipe import DEFAULT_NSAMPLES

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLES
    parser.add_argument("--model", required=True, help="Hugging Face model directory or hub id")
    parser.add_argument("--method", required=True, choices=names(), help="pruning method")
    parser.add_argument(
        "--sparsity",
        required=True,
        help="0.5 (unstructured), 2:4, 4:8, structured:0.3, neurons:0.3 (MLP neurons, model written "
        "smaller), heads:0.33 (attention query heads of each key/value group, model written smaller), "
        "kv_heads:0.25 (whole key/value groups), depth:6 or depth:0.2 (whole blocks), or structures "
        "joined with + (depth:4+neurons:0.3: blocks first, then heads, then neurons, each on the model the "
        "previous part wrote)",
    )
    parser.add_argument("--out", required=True, help="output directory (new, empty, or a previous result)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --out that holds another model's or another recipe's result",
    )
    alpha_help = (
        "fraction of rows kept dense (outliers). Default 0 for n:m, so the model is exactly n:m (2:4 "
        "kernels can run it); --alpha 0.1 is the paper's Thanos n:m setting (lower perplexity, not n:m "
        "in every row). Default 0.1 for Thanos structured, else 0"
    )
    parser.add_argument("--alpha", type=float, default=None, help=alpha_help)
    parser.add_argument(
        "--blocksize",
        type=_args.positive,
        default=None,
        help="B (default: Thanos 128 unstructured / 512 n:m, SparseGPT 128)",
    )
    parser.add_argument(
        "--damp",
        type=float,
        default=None,
        help=f"damping, fraction of mean(diag H) (default {DEFAULT_DAMP})",
    )
    parser.add_argument(
        "--profile",
        choices=["uniform", "owl"],
        default=None,
        help="uniform (default): every block at --sparsity; owl: a sparsity per block by its outlier ratio "
        "(OWL, Yin et al. 2024), the same overall sparsity, unstructured only",
    )
    parser.add_argument("--owl-m", type=float, default=None, help="OWL's outlier threshold M (default 5)")
    parser.add_argument("--owl-lambda", type=float, default=None, help="OWL's lambda (default 0.08)")
    recovery = parser.add_argument_group(
        "recovery (each pruned block's kept weights trained to match the dense block's outputs; zeros kept)"
    )
    recovery.add_argument("--recover", action="store_true", help="recover every pruned block")
    defaults = Recovery()
    for name, kind, text in (
        ("epochs", int, "passes over the calibration windows"),
        ("lr", float, "Adam's learning rate, decayed linearly to 0"),
        ("batch_size", int, "windows per step"),
        ("holdout", float, "fraction of the windows held out to pick the best epoch"),
        ("target", str, "dense: the dense model's outputs of each block; block: the dense block on the "
         "pruned chain's inputs"),
    ):  # fmt: skip
        recovery.add_argument(
            f"--recover-{name.replace('_', '-')}",
            type=kind,
            default=None,
            help=f"{text} (default {getattr(defaults, name)})",
        )
    parser.add_argument(
        "--calibration",
        default="c4",
        help="c4 (the hub, default) or a local text/jsonl/parquet file or directory",
    )
    parser.add_argument(
        "--nsamples",
        type=_args.positive,
        default=DEFAULT_NSAMPLES,
        help=f"calibration windows (default {DEFAULT_NSAMPLES})",
    )
    parser.add_argument(
        "--seqlen",
        type=_args.positive,
        default=None,
        help="tokens per window (default min(2048, the model's max positions))",
    )
    parser.add_argument("--seed", type=int, default=0, help="calibration sampling seed (default 0)")
    _args.add_exclude(parser)
    parser.add_argument("--text-field", default="text", help="jsonl/parquet field holding the text")
    parser.add_argument("--workdir", default=None, help="where intermediates go (default: see below)")
    parser.add_argument(
        "--keep",
        choices=["needed", "all"],
        default="needed",
        help="what the workdir keeps: needed (default: what a resume and another recipe on the same "
        "calibration need; each block's own inputs and Hessians go once the block is done, the pruned layers "
        "once the model is assembled) or all (every intermediate)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything and print what the run would do and the disk it needs; run nothing",
    )
    parser.add_argument(
        "--no-disk-check",
        dest="disk_check",
        action="store_false",
        help="run even when the estimated disk use exceeds the free space",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if visible), cpu, cuda, cuda:N")
    _args.add_compute_dtype(parser)
    parser.add_argument("--evaluate", default="", help="ppl and/or zeroshot, comma-separated (default none)")
    parser.add_argument(
        "--ppl-source",
        default="wikitext2",
        help="perplexity text: wikitext2 (the hub, default) or a local file",
    )
    tasks_help = "zero-shot lm-eval tasks, comma-separated (default: the paper's 7)"
    parser.add_argument("--tasks", default=None, help=tasks_help)
    include_help = "directory of local lm-eval task YAMLs (for --tasks defined there)"
    parser.add_argument("--include-path", default=None, help=include_help)
    parser.add_argument("--cores", type=_args.positive, default=None, help="CPU cores to use (default: all)")
    parser.add_argument(
        "--compact",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="neurons:P, heads:P, kv_heads:P only: write the model without the removed neurons or heads "
        "(default); --no-compact writes "
        "zeros in the original shape",
    )


def recover_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--recover`` and its options as ``prune_model``'s ``recover``; an option without ``--recover`` is
    refused."""
    options = {
        name: getattr(args, f"recover_{name}")
        for name in ("epochs", "lr", "batch_size", "holdout", "target")
        if getattr(args, f"recover_{name}") is not None
    }
    if options and not args.recover:
        flags = ", ".join(f"--recover-{name.replace('_', '-')}" for name in options)
        raise ValueError(f"{flags}: recovery options without --recover; add --recover or leave them out")
    return options if args.recover else None


def run(args: argparse.Namespace) -> None:
    from thanos.runner.one_recipe import RunFailed, prune_model

    try:
        prune_model.__wrapped__(  # the errors name the flags (prune_model's name its parameters)
            args.model,
            args.method,
            args.sparsity,
            out=args.out,
            calibration=args.calibration,
            alpha=args.alpha,
            blocksize=args.blocksize,
            damp=args.damp,
            nsamples=args.nsamples,
            seqlen=args.seqlen,
            seed=args.seed,
            text_field=args.text_field,
            workdir=args.workdir,
            device=args.device,
            compute_dtype=args.compute_dtype,
            evaluate=args.evaluate,
            ppl_source=args.ppl_source,
            tasks=args.tasks.split(",") if args.tasks else None,
            include_path=args.include_path,
            cores=args.cores,
            exclude=args.exclude,
            compact=args.compact,
            profile=args.profile,
            owl_m=args.owl_m,
            owl_lambda=args.owl_lambda,
            overwrite=args.overwrite,
            recover=recover_options(args),
            keep=args.keep,
            disk_check=args.disk_check,
            dry_run=args.dry_run,
        )
    except RunFailed as err:  # prune_model has printed what failed and how to resume
        raise SystemExit(130 if err.interrupted else 1) from None
