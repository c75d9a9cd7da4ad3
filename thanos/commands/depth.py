"""A ``depth:k`` recipe's choice of whole blocks, and the linear maps that replace them, from the dense
chain's stores (the inputs of every block and the last block's output): the engine's step, given the
workflow's stores (``thanos.stages.parts.choose_blocks``), the same ``depth.json`` as ``thanos prune-model``
writes; ``assemble --depth`` then writes the shortened model."""

from __future__ import annotations

import argparse
from pathlib import Path

from thanos.commands import _args

HELP = "a depth:K recipe's removed blocks and their maps from the dense inputs_l.zarr -> depth.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    _args.add_recipe(parser, "depth:K, the blocks removed (K whole blocks)")
    parser.add_argument(
        "--dense-dir", required=True, help="the dense chain's stores: inputs_0.zarr .. inputs_L.zarr"
    )
    parser.add_argument(
        "--model-info", required=True, help="the model's model_info.json (`thanos model-info`)"
    )
    _args.add_device(parser)
    parser.add_argument("--out", required=True, help="depth.json (its maps in depth_maps/ beside it)")


def run(args: argparse.Namespace) -> None:
    from thanos.stages.parts import choose_blocks

    choose_blocks(
        args.model,
        _args.recipe(args),
        Path(args.dense_dir),
        Path(args.model_info),
        Path(args.out),
        args.device,
    )
