"""Tiny random causal LMs built from a config (no download): for the smoke workflow, tests and benchmarks.

``build_tiny_model(out, family="llama"|"opt", ...)`` writes a Hugging Face directory (config, generation
config, a byte-level BPE tokenizer that encodes any text, safetensors weights) with seeded random weights.
"""

from __future__ import annotations

import os
from pathlib import Path

from thanos.atomic import atomic_path

FAMILIES = ("llama", "opt")
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def build_tokenizer():
    """A byte-level tokenizer with 256 byte tokens + 4 special tokens (vocab 260): encodes any text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_config(
    family: str = "llama",
    hidden_size: int = 64,
    intermediate_size: int | None = None,
    num_blocks: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    max_position_embeddings: int = 512,
    vocab_size: int = 260,
):
    from transformers import LlamaConfig, OPTConfig

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
    ffn = intermediate_size or 2 * hidden_size
    common = dict(vocab_size=vocab_size, pad_token_id=3, bos_token_id=1, eos_token_id=2)
    if family == "llama":
        return LlamaConfig(
            hidden_size=hidden_size,
            intermediate_size=ffn,
            num_hidden_layers=num_blocks,
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads or num_heads,
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=False,
            **common,
        )
    return OPTConfig(
        hidden_size=hidden_size,
        ffn_dim=ffn,
        num_hidden_layers=num_blocks,
        num_attention_heads=num_heads,
        word_embed_proj_dim=hidden_size,
        max_position_embeddings=max_position_embeddings,
        **common,
    )


def build_tiny_model(
    out: str | os.PathLike,
    family: str = "llama",
    hidden_size: int = 64,
    intermediate_size: int | None = None,
    num_blocks: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    max_position_embeddings: int = 512,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Write a tiny random model directory to ``out`` (atomically) and return its path."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(
        family, hidden_size, intermediate_size, num_blocks, num_heads, num_kv_heads, max_position_embeddings
    )
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (float32, float16, bfloat16)")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch_dtype).eval()
    out = Path(out)
    with atomic_path(out, is_dir=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        build_tokenizer().save_pretrained(tmp)
    return out
