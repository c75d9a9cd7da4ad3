"""Describe a model for the workflow: family, number of blocks, prunable layers and their Hessian groups."""

from __future__ import annotations

import argparse
import json

HELP = "model family, blocks, layers and Hessian groups of a model -> info.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--out", required=True, help="output JSON file")


def run(args: argparse.Namespace) -> None:
    from thanos.atomic import write_json
    from thanos.models import get_adapter, load_config, resolve_model_path

    model_dir = resolve_model_path(args.model)
    info = get_adapter(load_config(model_dir)).info() | {"path": str(model_dir)}
    write_json(args.out, info)
    print(json.dumps(info))
