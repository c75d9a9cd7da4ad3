"""Run one recipe's whole chain in one process: for each block, capture its Hessians (sequential chain,
block >= 1), prune all its layers, propagate through the pruned block. Writes the same stores and pruned
files, at the same paths and byte for byte, as the per-block capture/prune/propagate commands, keeps those
already complete (a killed run resumes) and writes a summary JSON last (the workflow's marker)."""

from __future__ import annotations

import argparse

HELP = "one recipe's whole chain (capture, prune, propagate per block) in one process -> pruned/"

METHOD_CHOICES = ("magnitude", "wanda", "sparsegpt", "thanos")  # thanos.prune.METHODS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--method", required=True, choices=METHOD_CHOICES, help="pruning method")
    parser.add_argument("--sparsity", required=True, help="e.g. 0.5, unstructured:0.5, 2:4, structured:0.3")
    parser.add_argument("--blocksize", type=int, default=None, help="B (default: the method's)")
    parser.add_argument("--alpha", type=float, default=None, help="outlier-row fraction (default: method's)")
    parser.add_argument("--damp", type=float, default=0.01, help="damping fraction of mean(diag H)")
    parser.add_argument(
        "--dense-dir",
        default=None,
        help="the dense chain's stores: inputs_0.zarr and hessians_0.zarr (with --chain-dir), else every "
        "hessians_l.zarr (the dense chain); omit for magnitude",
    )
    parser.add_argument(
        "--chain-dir",
        default=None,
        help="sequential chain: where this recipe's inputs_l.zarr/hessians_l.zarr (l >= 1) are written; "
        "omit for the dense chain",
    )
    parser.add_argument(
        "--pruned-root", required=True, help="output ROOT: block{l}/{layer}.safetensors|.json"
    )
    parser.add_argument("--out", required=True, help="summary JSON, written when every block is done")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per forward pass (default: 8)")
    parser.add_argument(
        "--drop-activations", action="store_true", help="delete the chain's inputs_l at the end"
    )
    parser.add_argument(
        "--drop-hessians", action="store_true", help="delete the chain's hessians_l at the end"
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")


def run(args: argparse.Namespace) -> None:
    from thanos.stages.chain import chain

    chain(
        args.model,
        args.method,
        args.sparsity,
        args.pruned_root,
        args.out,
        dense_dir=args.dense_dir,
        chain_dir=args.chain_dir,
        blocksize=args.blocksize,
        alpha=args.alpha,
        damp=args.damp,
        batch_size=args.batch_size,
        device=args.device,
        keep_activations=not args.drop_activations,
        keep_hessians=not args.drop_hessians,
    )
