"""Run block l over its inputs with the pruned weights of --pruned-dir (original weights for layers without
a file; no --pruned-dir: the dense block) and store block l + 1's inputs."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "block l (pruned or dense) over inputs_l.zarr -> inputs_{l+1}.zarr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--block", type=int, required=True, help="block index l")
    parser.add_argument("--inputs", required=True, help="block l inputs (inputs_l.zarr)")
    parser.add_argument(
        "--pruned-dir", default=None, help="directory of block l's pruned layers (omit: dense)"
    )
    parser.add_argument("--out", required=True, help="output inputs_{l+1}.zarr")
    _args.add_option(parser, "exclude")
    _args.add_batch_size(parser, 8, "samples")
    _args.add_device(parser)
    _args.add_compute_dtype(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.capture import propagate

    reads = [("model", args.model), ("inputs", args.inputs), ("pruned_dir", args.pruned_dir or "")]
    _args.check_store_out(args.out, [(option, path) for option, path in reads if path])
    propagate(
        args.model, args.block, args.inputs, args.out, args.pruned_dir, args.batch_size, args.device,
        args.exclude, args.compute_dtype,
    )  # fmt: skip
