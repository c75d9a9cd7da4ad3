"""OWL's per-block sparsities (Yin et al., ICML 2024) of one recipe, from the dense chain's Hessians of
every block (||X_j||^2 = N H_jj / 2) and the original weights: writes owl.json, which the recipe's prune
and chain jobs read with --owl."""

from __future__ import annotations

import argparse

HELP = "OWL per-block sparsities from the dense hessians_l.zarr of every block -> owl.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.pruning.owl import DEFAULT_LAMBDA, DEFAULT_M

    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument(
        "--hessians", required=True, nargs="+", help="the dense chain's hessians_l.zarr, every block in order"
    )
    parser.add_argument("--sparsity", required=True, help="the target (unstructured) sparsity, e.g. 0.7")
    parser.add_argument("--owl-m", type=float, default=DEFAULT_M, help="outlier threshold M (default: 5)")
    parser.add_argument(
        "--owl-lambda", type=float, default=DEFAULT_LAMBDA, help="maximum deviation lambda (default: 0.08)"
    )
    parser.add_argument("--out", required=True, help="output owl.json (written atomically)")


def run(args: argparse.Namespace) -> None:
    from thanos.stages.owl_plan import owl

    owl(args.model, args.hessians, args.sparsity, args.out, m=args.owl_m, lam=args.owl_lambda)
