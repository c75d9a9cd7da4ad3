"""OWL's per-block sparsities (Yin et al., ICML 2024) of one recipe, from the dense chain's Hessians of
every block (||X_j||^2 = N H_jj / 2) and the original weights: writes owl.json, which the recipe's prune
and chain jobs read with --owl."""

from __future__ import annotations

import argparse

from thanos.commands import _args

HELP = "OWL per-block sparsities from the dense hessians_l.zarr of every block -> owl.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument(
        "--hessians", required=True, nargs="+", help="the dense chain's hessians_l.zarr, every block in order"
    )
    _args.add_recipe(parser, "the target sparsity, unstructured (0.5): OWL spreads it over the blocks")
    for name in _args.OWL_OPTIONS:
        _args.add_option(parser, name)
    parser.add_argument("--out", required=True, help="output owl.json (written atomically)")
    _args.add_model_info(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.owl_plan import owl

    owl(args.model, args.hessians, _args.recipe(args, owl=True), args.out, args.model_info)
