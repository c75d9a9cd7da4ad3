"""Describe a model for the workflow: family, number of blocks, prunable layers and their Hessian groups,
and its input fingerprint (name, size and mtime_ns of each model file). Refuses a checkpoint without a
prunable layer's weight, and reads every tensor once and refuses one holding NaN or Inf, naming it."""

from __future__ import annotations

import argparse
import json

HELP = "model family, blocks, layers, Hessian groups and file fingerprint of a model -> info.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--out", required=True, help="output JSON file")


def run(args: argparse.Namespace) -> None:
    from thanos.files.atomic import write_json
    from thanos.files.fingerprint import model_fingerprint
    from thanos.models import Checkpoint, get_adapter, load_config, resolve_model_path

    model_dir = resolve_model_path(args.model)
    adapter = get_adapter(load_config(model_dir))
    info = adapter.info() | {"path": str(model_dir)}
    fingerprint = model_fingerprint(model_dir)
    checkpoint = Checkpoint(model_dir)
    adapter.check_checkpoint(checkpoint)
    checkpoint.check_finite()
    write_json(args.out, info | {"fingerprint": fingerprint})
    print(json.dumps(info))
