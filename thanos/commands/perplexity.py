"""WikiText-2 perplexity of a model (the paper's protocol): non-overlapping windows of --seqlen tokens
(default min(2048, max_position_embeddings)), ppl = exp(mean token NLL). Writes a JSON file."""

from __future__ import annotations

import argparse

from thanos.commands import _args

# its own errors (a tokenizer it cannot prune, a text too short) name the fix: one line, whatever stderr is
TRACEBACK = False

HELP = "perplexity of a model on WikiText-2 (hub) or a local corpus -> perplexity.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.evaluation.perplexity import DEFAULT_BATCH_SIZE

    parser.add_argument("--model", required=True, help="HF model directory (assembled or dense) or hub id")
    _args.add_text_source(
        parser,
        "wikitext2",
        "hub: wikitext/wikitext-2-raw-v1, test split; or its raw test file wiki.test.raw, one row per line",
    )
    parser.add_argument(
        "--seqlen",
        type=int,
        default=None,
        help="window length in tokens (default: min(2048, max_position_embeddings))",
    )
    parser.add_argument(
        "--max-windows",
        type=_args.positive,
        default=None,
        help="score only the first K windows, for quick runs (default: every window, the paper's protocol)",
    )
    _args.add_batch_size(parser, DEFAULT_BATCH_SIZE, "windows")
    _args.add_evaluation(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    _args.check_json_out(args.out, "perplexity.json", [("model", args.model), ("source", args.source)])
    _args.apply_offline(args)
    from thanos.evaluation.perplexity import evaluate_perplexity
    from thanos.files.atomic import write_json

    result = evaluate_perplexity(
        args.model,
        source=args.source,
        seqlen=args.seqlen,
        batch_size=args.batch_size,
        **_args.placement(args),
        text_field=args.text_field,
        progress=not args.no_progress,
        max_windows=args.max_windows,
    )
    write_json(args.out, result.to_dict())
    _args.wrote(args.out)
