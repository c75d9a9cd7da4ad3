"""Run the dense block l over its inputs and accumulate one fp32 Hessian H = (2/N) sum X X^T per group of
linear layers sharing an input (q/k/v, o, gate/up, down; OPT: q/k/v, out, fc1, fc2)."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "dense block l over inputs_l.zarr -> hessians_l.zarr (one fp32 H per input group)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--block", type=int, required=True, help="block index l")
    parser.add_argument("--inputs", required=True, help="block l inputs (inputs_l.zarr)")
    parser.add_argument("--out", required=True, help="output hessians_l.zarr")
    _args.add_batch_size(parser, 8, "samples")
    _args.add_device(parser)
    _args.add_compute_dtype(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.capture import capture

    _args.check_store_out(args.out, [("model", args.model), ("inputs", args.inputs)])
    capture(args.model, args.block, args.inputs, args.out, args.batch_size, args.device, args.compute_dtype)
