"""Compute block 0's inputs from calibration tokens (the embedding part of the model only)."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "tokens.zarr -> block 0 inputs (embeddings) inputs_0.zarr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--tokens", required=True, help="tokens.zarr written by calibrate")
    parser.add_argument("--out", required=True, help="output activation store (inputs_0.zarr)")
    _args.add_batch_size(parser, 8, "samples")
    _args.add_device(parser)
    _args.add_compute_dtype(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.capture import embed

    _args.check_store_out(args.out, [("model", args.model), ("tokens", args.tokens)])
    embed(args.model, args.tokens, args.out, args.batch_size, args.device, args.compute_dtype)
