"""Perplexity and zero-shot accuracy of one model, loaded once: the same two JSON files, byte for byte the
same numbers, as `thanos perplexity` and `thanos zeroshot` (the workflow's evaluate rule, when both
evaluations are enabled: one process and one model load per evaluated model instead of two)."""

from __future__ import annotations

import argparse
from pathlib import Path

from thanos.commands import _args
from thanos.commands.zeroshot import _at_least_zero, _limit

HELP = "perplexity and lm-eval zero-shot of one model, loaded once -> perplexity.json, zeroshot.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.evaluation.perplexity import DEFAULT_BATCH_SIZE
    from thanos.evaluation.zeroshot import PAPER_TASKS

    parser.add_argument("--model", required=True, help="HF model directory (assembled or dense) or hub id")
    _args.add_text_source(parser, "wikitext2", "hub: wikitext/wikitext-2-raw-v1, test split")
    parser.add_argument("--seqlen", type=int, default=None, help="perplexity window length in tokens")
    parser.add_argument(
        "--max-windows", type=_args.positive, default=None, help="perplexity: the first K windows"
    )
    parser.add_argument(
        "--ppl-batch-size",
        type=_args.positive,
        default=DEFAULT_BATCH_SIZE,
        help=f"perplexity windows per pass (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument("--tasks", default=",".join(PAPER_TASKS), help="comma-separated lm-eval tasks")
    parser.add_argument("--include-path", default=None, help="directory of lm-eval task YAMLs")
    parser.add_argument("--zeroshot-batch-size", type=_args.positive, default=1, help="lm-eval batch size")
    parser.add_argument(
        "--limit", type=_limit, default=None, help="at most K documents per task (a fraction < 1: that share)"
    )
    parser.add_argument("--num-fewshot", type=_at_least_zero, default=0, help="few-shot examples (paper: 0)")
    _args.add_placement(parser)
    parser.add_argument("--offline", action="store_true", help="never contact the hub")
    parser.add_argument("--ppl-out", required=True, help="perplexity JSON (written atomically)")
    parser.add_argument("--zeroshot-out", required=True, help="zero-shot JSON (written atomically)")


def run(args: argparse.Namespace) -> None:
    from thanos.errors import Option, OptionError

    reads = [("model", args.model), ("source", args.source),
             *(("include_path", path) for path in (args.include_path or "").split(",") if path)]  # fmt: skip
    _args.check_json_out(args.ppl_out, "perplexity.json", reads, "ppl_out")
    _args.check_json_out(args.zeroshot_out, "zeroshot.json", reads, "zeroshot_out")
    if Path(args.ppl_out).expanduser().resolve() == Path(args.zeroshot_out).expanduser().resolve():
        raise OptionError(
            Option("zeroshot_out", args.zeroshot_out), " is ", Option("ppl_out", args.ppl_out),
            ": the zero-shot results would replace the perplexity's; give two paths",
        )  # fmt: skip
    _args.apply_offline(args)
    from thanos.evaluation.loading import load_model
    from thanos.evaluation.perplexity import evaluate_perplexity, load_eval_text, resolve_seqlen
    from thanos.evaluation.zeroshot import evaluate_zeroshot, load_tasks, parse_tasks, task_manager
    from thanos.files.atomic import write_json
    from thanos.models import model_config

    load_eval_text(args.source, args.text_field)  # bad data fails before the model is loaded
    resolve_seqlen(model_config(args.model), args.seqlen)  # so does a window the model cannot take
    names = parse_tasks(args.tasks)
    load_tasks(task_manager(names, args.include_path), names)
    loaded = load_model(args.model, **_args.placement(args))
    result = evaluate_perplexity(
        args.model,
        source=args.source,
        seqlen=args.seqlen,
        batch_size=args.ppl_batch_size,
        **_args.placement(args),
        text_field=args.text_field,
        progress=False,
        max_windows=args.max_windows,
        loaded=loaded,
    )
    write_json(args.ppl_out, result.to_dict())
    summary = evaluate_zeroshot(
        args.model,
        tasks=args.tasks,
        include_path=args.include_path,
        batch_size=args.zeroshot_batch_size,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        **_args.placement(args),
        loaded=loaded,
    )
    write_json(args.zeroshot_out, summary)
    _args.wrote(args.ppl_out)
    _args.wrote(args.zeroshot_out)
