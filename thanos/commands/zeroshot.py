"""Zero-shot accuracy with lm-eval (default: the paper's seven tasks, 0-shot). Writes a JSON file with
acc/acc_norm and stderrs per task, the plain mean of acc, the lm-eval version and the task versions."""

from __future__ import annotations

import argparse
import math

from thanos.commands import _args

HELP = "lm-eval zero-shot accuracy of a model -> zeroshot.json"


def _limit(value: str) -> int | float:
    """argparse type of --limit: a whole number of documents, or a fraction in (0, 1) of each task's."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf or (number >= 1 and not number.is_integer()):
        raise argparse.ArgumentTypeError(
            "give a whole number of documents per task (50) or a fraction below 1 of each task's (0.1), got "
            + value
        )
    return int(number) if number >= 1 else number


def _at_least_zero(value: str) -> int:
    """argparse type of --num-fewshot: an integer of at least 0."""
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.evaluation.zeroshot import PAPER_TASKS

    parser.add_argument("--model", required=True, help="HF model directory (assembled or dense) or hub id")
    parser.add_argument(
        "--tasks",
        default=",".join(PAPER_TASKS),
        help="comma-separated lm-eval task names (default: %(default)s); `lm-eval ls tasks` lists them",
    )
    parser.add_argument(
        "--include-path",
        default=None,
        help="directory (or comma-separated directories) of lm-eval task YAMLs, e.g. tasks reading local "
        "files for offline machines; a task there overrides the built-in task of the same name",
    )
    parser.add_argument(
        "--batch-size", type=_args.positive, default=1, help="lm-eval batch size (default: 1)"
    )
    parser.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help="at most K documents per task (a fraction < 1: that share); quick checks only",
    )
    parser.add_argument("--num-fewshot", type=_at_least_zero, default=0, help="few-shot examples (paper: 0)")
    _args.add_evaluation(parser)


def run(args: argparse.Namespace) -> None:
    reads = [
        ("model", args.model),
        *(("include_path", path) for path in (args.include_path or "").split(",") if path),
    ]
    _args.check_json_out(args.out, "zeroshot.json", reads)
    _args.apply_offline(args)
    from thanos.evaluation.zeroshot import evaluate_zeroshot
    from thanos.files.atomic import write_json

    summary = evaluate_zeroshot(
        args.model,
        tasks=args.tasks,
        include_path=args.include_path,
        batch_size=args.batch_size,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        **_args.placement(args),
    )
    write_json(args.out, summary)
    _args.wrote(args.out)
