"""Run one recipe's whole chain in one process (the engine, ``thanos.stages.engine``, given the dense chain's
stores): for each block, capture its Hessians (sequential chain, block >= 1), prune all its layers,
propagate through the pruned block. Writes the same stores and pruned
files, at the same paths and byte for byte, as the per-block capture/prune/propagate commands, keeps those
already complete (a killed run resumes) and writes a summary JSON last (the workflow's marker)."""

from __future__ import annotations

import argparse
from pathlib import Path

from thanos.commands import _args

HELP = "one recipe's whole chain (capture, prune, propagate per block) in one process -> pruned/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    _args.add_recipe(parser, _args.LAYER_SPARSITY)
    _args.add_owl(parser)
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
    _args.add_batch_size(parser, 8, "samples")
    for kind in ("activations", "hessians"):
        store = "inputs_l" if kind == "activations" else "hessians_l"
        what = f"delete the chain's own {store} as each block is done"
        parser.add_argument(f"--drop-{kind}", action="store_true", help=what)
    _args.add_device(parser)
    _args.add_compute_dtype(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.stages.engine import RecipeFiles, RunOptions, run_recipe

    optional = {name: getattr(args, name) for name in ("dense_dir", "chain_dir", "owl")}
    files = RecipeFiles(
        Path(args.pruned_root), Path(args.out), **{k: Path(v) for k, v in optional.items() if v is not None}
    )
    drop = tuple(
        kind
        for kind, dropped in (("inputs", args.drop_activations), ("hessians", args.drop_hessians))
        if dropped
    )
    # the upstream stores are the workflow's shared jobs' outputs (no calibration given): the engine
    # checks them and runs the chain
    options = RunOptions(args.device, args.batch_size, drop, dtype=args.compute_dtype)
    run_recipe(args.model, _args.recipe(args), files, options=options)
