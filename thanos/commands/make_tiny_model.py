"""Build a tiny random model (config, tokenizer, safetensors) offline: Llama, Mistral, Qwen2, OPT or any
model type of the tested models (``thanos.demo.tested_models``: Qwen3, Gemma 2/3, Phi-3, OLMo 2, ...).

Used by the smoke workflow (workflow/configs/smoke.yaml), the workflow tests and the overhead benchmark.
"""

from __future__ import annotations

import argparse

HELP = "build a tiny random HF model directory (Llama, Qwen3, Gemma 3, ...: --family) from a config (offline)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.demo.tested_models import TESTED_MODELS
    from thanos.demo.tiny import TOKENIZERS

    parser.add_argument(
        "--family", choices=list(TESTED_MODELS), default="llama", help="model_type (default: llama)"
    )
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--intermediate-size", type=int, default=None, help="default 2 x hidden")
    parser.add_argument("--num-blocks", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--num-kv-heads", type=int, default=None)
    parser.add_argument("--max-position-embeddings", type=int, default=512)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default="byte-level",
        help="byte-level BPE, or Llama 2's kind (BPE with byte fallback), which llama.cpp's converter reads",
    )
    parser.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> None:
    from thanos.demo.tiny import build_tiny_model
    from thanos.stages.publish import check_replaceable

    check_replaceable(args.out, "out", None, "thanos make-tiny-model")  # what is there would be deleted
    out = build_tiny_model(
        args.out,
        family=args.family,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_blocks=args.num_blocks,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        max_position_embeddings=args.max_position_embeddings,
        dtype=args.dtype,
        seed=args.seed,
        tokenizer=args.tokenizer,
    )
    blocks = f"{args.num_blocks} block{'s' * (args.num_blocks != 1)}"
    print(f"wrote {out}: a random {args.family} model, {blocks}, hidden size {args.hidden_size}")
