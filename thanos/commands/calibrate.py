"""Sample calibration windows (SparseGPT/Wanda procedure) from C4 or local text/jsonl/parquet files with the
model's tokenizer and write them to tokens.zarr with provenance attributes."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "calibration token windows from C4 or local files -> tokens.zarr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id (its tokenizer is used)")
    _args.add_text_source(parser, "c4", "hub: allenai/c4, en/c4-train.00000-of-01024.json.gz")
    _args.add_windows(parser)
    parser.add_argument("--out", required=True, help="output tokens.zarr")


def run(args: argparse.Namespace) -> None:
    from thanos.stages.calibrate import calibrate

    windows = _args.windows(args)
    _args.check_store_out(args.out, [("model", args.model), ("source", args.source)])
    calibrate(
        args.model, args.source, args.out, windows.nsamples, windows.seqlen, windows.seed, args.text_field
    )
