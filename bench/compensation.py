"""What the compensation benches (``width_bias.py``, ``asymmetric_refit.py``) share: their arguments, the
dense and pruned models in fp32, the calibration windows they fit on, the written model and the perplexity
they report (measured as ``bench/structures.py`` does: the first ``--ppl-windows`` windows of 512 tokens of
``DATA/test.jsonl``)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch


def parser(description: str, pruned: str, out: str) -> argparse.ArgumentParser:
    """The arguments every compensation bench takes; ``pruned`` and ``out`` say what those two are."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dense", type=Path, required=True, help="the dense model's directory")
    parser.add_argument("--data", type=Path, required=True, help="the demo's data (calib.jsonl, test.jsonl)")
    parser.add_argument("--pruned", type=Path, required=True, help=pruned)
    parser.add_argument("--out", type=Path, required=True, help=out)
    parser.add_argument("--windows", type=int, default=64, help="calibration windows (default 64)")
    parser.add_argument("--seqlen", type=int, default=256, help="their length (default 256)")
    parser.add_argument("--ppl-windows", type=int, default=16, help="perplexity windows of 512 (default 16)")
    return parser


def models(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The dense and the pruned model in fp32 (eval mode) and the pruned model's tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dense = AutoModelForCausalLM.from_pretrained(args.dense, dtype=torch.float32).eval()
    pruned = AutoModelForCausalLM.from_pretrained(args.pruned, dtype=torch.float32).eval()
    return dense, pruned, AutoTokenizer.from_pretrained(args.pruned)


def calibration_windows(args: argparse.Namespace, tokenizer: Any) -> torch.Tensor:
    """``--windows`` windows of ``--seqlen`` tokens at random places (seed 0) of ``DATA/calib.jsonl``."""
    text = "\n\n".join(json.loads(line)["text"] for line in open(args.data / "calib.jsonl"))
    ids = tokenizer(text, return_tensors="pt").input_ids[0]
    starts = torch.randint(
        0, ids.numel() - args.seqlen, (args.windows,), generator=torch.Generator().manual_seed(0)
    )
    return torch.stack([ids[s : s + args.seqlen] for s in starts])


def write(model: Any, tokenizer: Any, out: Path) -> None:
    """``model`` and ``tokenizer`` written to ``out`` (replacing what was there)."""
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def print_perplexities(args: argparse.Namespace, labelled: list[tuple[str, Path]]) -> None:
    """Each (label, model directory)'s perplexity on the held-out articles, a line each."""
    from thanos.evaluation.perplexity import evaluate_perplexity

    source = str(args.data / "test.jsonl")
    for label, model in labelled:
        result = evaluate_perplexity(
            str(model), source, seqlen=512, device="cpu", max_windows=args.ppl_windows, progress=False
        )
        print(f"{label}: perplexity {result.ppl:.2f}", flush=True)
