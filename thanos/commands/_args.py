"""Arguments shared by several commands, defined once: the recipe, the device, batching, model placement
and offline mode of the evaluations, and text sources. Torch-free, like every ``add_arguments``."""

from __future__ import annotations

import argparse
from typing import Any

from thanos.pruning import methods

DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda or cuda:N (default: auto)"


def positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_recipe(parser: argparse.ArgumentParser) -> None:
    """--method, --sparsity and the optional hyper-parameters (``thanos.files.recipes.Recipe.options``)."""
    parser.add_argument("--method", required=True, choices=methods.names(), help="pruning method")
    parser.add_argument(
        "--sparsity", required=True, help="e.g. 0.5, unstructured:0.5, 2:4, structured:0.3, neurons:0.3"
    )
    parser.add_argument("--blocksize", type=int, default=None, help="B (default: the method's)")
    parser.add_argument("--alpha", type=float, default=None, help="outlier-row fraction (default: method's)")
    parser.add_argument("--damp", type=float, default=0.01, help="damping fraction of mean(diag H)")
    add_exclude(parser)


def add_exclude(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--exclude",
        action="append",
        default=None,
        metavar="REGEX",
        help="leave dense the layers this regular expression matches (searched in the layer's name within "
        "its block, e.g. 'self_attn' or 'mlp\\.down_proj'); repeatable. Routers and lm_head are never pruned",
    )


def add_owl(parser: argparse.ArgumentParser) -> None:
    """--owl: the recipe's owl.json (``thanos owl``), each block pruned at its sparsity there."""
    parser.add_argument(
        "--owl",
        default=None,
        help="owl.json of `thanos owl`: prune each block at its OWL sparsity (--sparsity is the target)",
    )


def recipe(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe arguments as keywords of the ``prune`` and ``chain`` stages."""
    names = ("method", "sparsity", "blocksize", "alpha", "damp", "exclude")
    return {name: getattr(args, name) for name in names}


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)


def add_batch_size(parser: argparse.ArgumentParser, default: int, unit: str) -> None:
    """--batch-size: ``unit`` per forward pass (samples, windows)."""
    parser.add_argument(
        "--batch-size", type=int, default=default, help=f"{unit} per forward pass (default: {default})"
    )


def add_placement(parser: argparse.ArgumentParser) -> None:
    """Where and in which dtype an evaluated model is loaded: --device, --device-map, --dtype."""
    add_device(parser)
    parser.add_argument(
        "--device-map",
        choices=["auto"],
        default=None,
        help="'auto': spread the model over all visible GPUs (for models that do not fit one GPU); "
        "overrides --device",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="weights dtype (default auto: the saved dtype; float16 becomes float32 on CPU)",
    )


def placement(args: argparse.Namespace) -> dict[str, Any]:
    """The placement arguments as keywords of the evaluation functions."""
    return {"device": args.device, "device_map": args.device_map, "dtype": args.dtype}


def add_evaluation(parser: argparse.ArgumentParser) -> None:
    """The options every evaluation shares: model placement, --offline and the output JSON."""
    add_placement(parser)
    parser.add_argument(
        "--offline",
        action="store_true",
        help="never contact the hub: sets HF_DATASETS_OFFLINE=1 and HF_HUB_OFFLINE=1 (models and datasets "
        "must be local or cached)",
    )
    parser.add_argument("--out", required=True, help="output JSON (written atomically)")


def apply_offline(args: argparse.Namespace) -> None:
    """Set the offline environment before datasets, transformers or lm_eval are imported."""
    if args.offline:
        from thanos.evaluation.loading import set_offline

        set_offline()


def add_text_source(parser: argparse.ArgumentParser, default: str, hub: str) -> None:
    """--source (``default`` names the hub dataset described by ``hub``, or a local path) and --text-field."""
    parser.add_argument(
        "--source",
        default=default,
        help=f"'{default}' ({hub}) or a local text/jsonl/parquet file or directory (default: %(default)s)",
    )
    parser.add_argument(
        "--text-field", default="text", help="jsonl/parquet field holding the text (default: text)"
    )
