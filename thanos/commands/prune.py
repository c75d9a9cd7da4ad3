"""Prune linear layers of block l: each original weight is read lazily from the safetensors and its group's
Hessian from hessians_l.zarr; writes DIR/{layer}.safetensors (tensor 'weight') and DIR/{layer}.json."""

from __future__ import annotations

import argparse

HELP = "prune layers of block l -> DIR/{layer}.safetensors + DIR/{layer}.json"


# thanos.prune.METHODS, spelled out so that building the parser does not import the algorithms
METHOD_CHOICES = ("magnitude", "wanda", "sparsegpt", "thanos")


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
    parser.add_argument("--method", required=True, choices=METHOD_CHOICES, help="pruning method")
    parser.add_argument("--sparsity", required=True, help="e.g. 0.5, unstructured:0.5, 2:4, structured:0.3")
    parser.add_argument("--blocksize", type=int, default=None, help="B (default: the method's)")
    parser.add_argument("--alpha", type=float, default=None, help="outlier-row fraction (default: method's)")
    parser.add_argument("--damp", type=float, default=0.01, help="damping fraction of mean(diag H)")
    parser.add_argument("--out-dir", required=True, help="output directory for this block's pruned layers")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")


def run(args: argparse.Namespace) -> None:
    from thanos.stages.prune import prune

    layers = [name.strip() for name in args.layers.split(",") if name.strip()] if args.layers else None
    prune(
        args.model,
        args.block,
        layers,
        args.method,
        args.sparsity,
        args.out_dir,
        hessians=args.hessians,
        blocksize=args.blocksize,
        alpha=args.alpha,
        damp=args.damp,
        device=args.device,
    )
