"""Zero-shot accuracy with lm-eval (default: the paper's seven tasks, 0-shot). Writes a JSON file with
acc/acc_norm and stderrs per task, the plain mean of acc, the lm-eval version and the task versions."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "lm-eval zero-shot accuracy of a model -> zeroshot.json"


def _limit(value: str) -> int | float:
    number = float(value)
    return int(number) if number >= 1 and number.is_integer() else number


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
    parser.add_argument("--batch-size", type=int, default=1, help="lm-eval batch size (default: 1)")
    parser.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help="at most K documents per task (a fraction < 1: that share); quick checks only",
    )
    parser.add_argument("--num-fewshot", type=int, default=0, help="few-shot examples (paper: 0)")
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
