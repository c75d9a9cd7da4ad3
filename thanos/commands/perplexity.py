"""WikiText-2 perplexity of a model (the paper's protocol): non-overlapping windows of --seqlen tokens
(default min(2048, max_position_embeddings)), ppl = exp(mean token NLL). Writes a JSON file."""

from __future__ import annotations

import argparse

HELP = "perplexity of a model on WikiText-2 (hub) or a local corpus -> perplexity.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory (assembled or dense) or hub id")
    parser.add_argument(
        "--source",
        default="wikitext2",
        help="'wikitext2' (hub: wikitext/wikitext-2-raw-v1, test split) or a local path: the raw test file "
        "wiki.test.raw (one dataset row per line), or a text/jsonl/parquet file or directory "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--text-field", default="text", help="jsonl/parquet field holding the text (default: text)"
    )
    parser.add_argument(
        "--seqlen",
        type=int,
        default=None,
        help="window length in tokens (default: min(2048, max_position_embeddings))",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="windows per forward pass (default: 1)")
    parser.add_argument(
        "--device", default="auto", help="auto (GPU if available, else CPU), cpu, cuda or cuda:N"
    )
    parser.add_argument(
        "--device-map",
        choices=["auto"],
        default=None,
        help="'auto': spread the model over all visible GPUs (for models that do not fit one GPU); "
        "overrides --device",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="weights dtype (default auto: the saved dtype; float16 becomes float32 on CPU)",
    )
    parser.add_argument("--offline", action="store_true", help="never contact the hub (HF_*_OFFLINE=1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--out", required=True, help="output JSON (written atomically)")


def run(args: argparse.Namespace) -> None:
    if args.offline:
        from thanos.evaluation.loading import set_offline

        set_offline()
    from thanos.atomic import write_json
    from thanos.evaluation.perplexity import evaluate_perplexity

    result = evaluate_perplexity(
        args.model,
        source=args.source,
        seqlen=args.seqlen,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
        device_map=args.device_map,
        text_field=args.text_field,
        progress=not args.no_progress,
    )
    write_json(args.out, result.to_dict())
