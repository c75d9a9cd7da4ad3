"""Build a tiny random model (config, tokenizer, safetensors) offline: Llama, Mistral, Qwen2, OPT or any
model type of the tested models (``thanos.demo.tested_models``: Qwen3, Gemma 2/3, Phi-3, OLMo 2, ...).

Used by the smoke workflow (workflow/configs/smoke.yaml), the workflow tests and the overhead benchmark.
"""

from __future__ import annotations

import argparse

from thanos.commands._args import positive

HELP = "build a tiny random HF model directory (Llama, Qwen3, Gemma 3, ...: --family) from a config (offline)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from thanos.demo.tested_models import TESTED_MODELS
    from thanos.demo.tiny import TOKENIZERS

    parser.add_argument(
        "--family", choices=list(TESTED_MODELS), default="llama", help="model_type (default: llama)"
    )
    parser.add_argument("--hidden-size", type=positive, default=64, help="width (default 64)")
    parser.add_argument(
        "--intermediate-size", type=positive, default=None, help="MLP width (default 2 x hidden)"
    )
    parser.add_argument("--num-blocks", type=positive, default=2, help="decoder blocks (default 2)")
    parser.add_argument(
        "--num-heads", type=positive, default=4, help="query heads, dividing --hidden-size (default 4)"
    )
    parser.add_argument(
        "--num-kv-heads",
        type=positive,
        default=None,
        help="key/value heads, dividing --num-heads (default: --num-heads for llama and opt, half of them "
        "for the others)",
    )
    parser.add_argument(
        "--max-position-embeddings", type=positive, default=512, help="positions, at least 2 (default 512)"
    )
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
    heads, kv_heads = args.num_heads, args.num_kv_heads
    if args.hidden_size % heads:
        raise ValueError(
            f"--num-heads {heads} does not divide --hidden-size {args.hidden_size}; give a divisor of it"
        )
    if kv_heads is not None and heads % kv_heads:
        raise ValueError(
            f"--num-kv-heads {kv_heads} does not divide --num-heads {heads}; give a divisor of it"
        )
    if args.max_position_embeddings < 2:
        raise ValueError(
            "--max-position-embeddings 1: a model reads at least 2 positions (a token and the next)"
        )
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
