"""Prune linear layers of block l: each original weight is read lazily from the safetensors and its group's
Hessian from hessians_l.zarr; writes DIR/{layer}.safetensors (tensor 'weight') and DIR/{layer}.json."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "prune layers of block l -> DIR/{layer}.safetensors + DIR/{layer}.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--block", type=int, required=True, help="block index l")
    parser.add_argument(
        "--layers",
        default=None,
        help="comma-separated layer names relative to the block, e.g. self_attn.q_proj,mlp.up_proj "
        "(default: every prunable layer of the block)",
    )
    parser.add_argument("--hessians", default=None, help="hessians_l.zarr (omit for magnitude)")
    _args.add_recipe(parser, _args.LAYER_SPARSITY)
    _args.add_owl(parser)
    parser.add_argument("--out-dir", required=True, help="output directory for this block's pruned layers")
    _args.add_device(parser)
    _args.add_model_info(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.prune import BlockInputs, prune

    layers = [name.strip() for name in args.layers.split(",") if name.strip()] if args.layers else None
    inputs = BlockInputs(args.hessians, args.owl, args.model_info)
    prune(args.model, args.block, _args.recipe(args), args.out_dir, layers, inputs, args.device)
