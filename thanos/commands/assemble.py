"""Assemble a pruned Hugging Face model directory from the original model and the pruned layers.

Writes MODEL_DIR atomically: config, generation config and tokenizer files of M, sharded safetensors with
model.safetensors.index.json (ROOT/block{l}/{layer}.safetensors in place of the original weights) and
pruning_report.json. Streams tensors shard by shard; never loads the whole model.
"""

from __future__ import annotations

import argparse

HELP = "build the pruned HF model dir + pruning_report.json from the pruned layers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="original model: local HF dir or hub id")
    parser.add_argument("--pruned-root", required=True, help="ROOT with block{l}/{layer}.safetensors|.json")
    parser.add_argument(
        "--recipe",
        required=True,
        metavar="JSON",
        help="the recipe as JSON text {name, method, sparsity, ...} (thanos.recipes.recipe.Recipe.to_json)",
    )
    parser.add_argument("--calibration", default=None, help="tokens.zarr (provenance); omit for magnitude")
    parser.add_argument(
        "--intermediates",
        nargs="*",
        default=[],
        help="directories/files whose disk use is reported (activations, Hessians, pruned layers)",
    )
    parser.add_argument("--owl", default=None, help="an OWL recipe's owl.json (reported per block)")
    parser.add_argument(
        "--depth",
        default=None,
        help="a depth:K recipe's depth.json (`thanos depth`): the model written without its removed blocks, "
        "their maps folded in (--pruned-root is not read)",
    )
    parser.add_argument("--model-info", default=None, help="model_info.json (block_prefix, ...)")
    parser.add_argument("--model-name", default=None, help="the model's name in the config (for the report)")
    parser.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard (default 2GB)")
    parser.add_argument("--granularity", default=None, help="how the workflow ran (for the report)")
    parser.add_argument("--granularity-reason", default=None, help="why that granularity (for the report)")
    parser.add_argument("--out", required=True, help="output model directory")


def run(args: argparse.Namespace) -> None:
    from thanos.files.locks import exclusive_out
    from thanos.recipes.recipe import Recipe
    from thanos.stages.assemble import assemble
    from thanos.stages.describe.provenance import RunRecord
    from thanos.stages.publish import MARKER, check_replaceable

    workflow = {"granularity": args.granularity, "granularity_reason": args.granularity_reason}
    record = RunRecord(
        args.model_name, args.calibration, tuple(args.intermediates), workflow if args.granularity else None
    )
    recipe = Recipe.from_json(args.recipe, key="--recipe")
    with exclusive_out(args.out):  # one writer of --out
        check_replaceable(args.out, "out", MARKER, "thanos assemble")  # written whole: the rest deleted
        assemble(
            args.model, args.pruned_root, recipe, args.out, args.model_info, args.owl,
            args.max_shard_size, record, args.depth,
        )  # fmt: skip
