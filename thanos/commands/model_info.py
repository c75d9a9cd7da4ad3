"""Describe a model for the workflow: its layout (model type, blocks, prunable layers and their Hessian
groups, ``thanos.models.layout``: what the prune, owl and compact jobs read instead of building the model)
and its input fingerprint (name, size and mtime_ns of each model file); prints the layout and whether the
type is a tested one. Refuses a checkpoint without a prunable layer's weight, and reads every tensor once
and refuses one holding NaN or Inf, naming it."""

from __future__ import annotations

import argparse
import json

HELP = "model family, blocks, layers, Hessian groups and file fingerprint of a model -> info.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory or hub id")
    parser.add_argument("--out", required=True, help="output JSON file")


def run(args: argparse.Namespace) -> None:
    from thanos.commands._args import check_json_out
    from thanos.demo.tested_models import TESTED_MODELS
    from thanos.stages.model_info import model_info

    check_json_out(args.out, "info.json", [("model", args.model)])
    info = model_info(args.model, args.out)
    tested = info["model_type"] in TESTED_MODELS  # a row of the tested models (tests/test_matrix.py)
    print(json.dumps(info | {"tested": tested}))
