"""Tiny random causal LMs built from a config (no download): for the smoke workflow, tests and benchmarks.

``build_tiny_model(out, family, ...)`` writes a Hugging Face directory (config, generation config, a
tokenizer, safetensors weights) with seeded random weights: Llama, Mistral (grouped-query attention and a
sliding window), Qwen2 (grouped-query attention, q/k/v biases, tied embeddings) and OPT (biases
everywhere) as the smoke workflow has always built them (``FAMILIES``), any other model type from its tiny
config (``thanos.demo.tested_models``). The tokenizer is byte-level (it encodes any text) unless
``words`` is given: then it is a word-level tokenizer over those words, which keeps test texts short;
``tokenizer="llama"`` gives Llama 2's kind instead (sentencepiece-style BPE with byte fallback, saved as
``tokenizer.json``), which llama.cpp's ``convert_hf_to_gguf.py`` reads (it refuses byte-level BPE
vocabularies it does not know).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from thanos.demo.tested_models import SLIDING_WINDOW
from thanos.demo.tested_models import tiny_config as any_type
from thanos.files.atomic import atomic_path

FAMILIES = ("llama", "mistral", "qwen2", "opt")  # configs built by hand, as the smoke workflow always had
TOKENIZERS = ("byte-level", "llama")
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def build_tokenizer(words: Sequence[str] | None = None, kind: str = "byte-level") -> Any:
    """A ``PreTrainedTokenizerFast`` with the special tokens ``SPECIAL`` first.

    ``words=None``: byte-level BPE without merges, 256 byte tokens (vocab 260), encodes any text;
    ``kind="llama"``: Llama 2's format, BPE with byte fallback over ``"▁"`` (a space) and 256 tokens
    ``<0xNN>`` (vocab 261), encodes any text. ``words``: one token per whitespace-separated word of
    ``words`` (others are ``<unk>``). Every kind but byte-level prepends ``<s>`` to every text as Llama's
    tokenizer does.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if kind not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {kind!r}")
    if kind == "llama":
        pieces = [*SPECIAL, *(f"<0x{byte:02X}>" for byte in range(256)), "▁"]
        vocab = {token: i for i, token in enumerate(pieces)}
        bpe = models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True)
        tok = Tokenizer(bpe)
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    elif words is None:
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        vocab = {token: i for i, token in enumerate(SPECIAL + alphabet)}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    else:
        vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIAL, *words]))}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_config(
    family: str,
    hidden_size: int,
    intermediate_size: int,
    num_blocks: int,
    num_heads: int,
    num_kv_heads: int,
    max_position_embeddings: int,
    vocab_size: int,
) -> Any:
    """The ``PretrainedConfig`` of ``family`` with these sizes (token ids of ``SPECIAL``): Llama, Mistral,
    Qwen2 and OPT as the smoke workflow has always built them, any other model type from
    ``thanos.demo.tested_models``."""
    from transformers import LlamaConfig, MistralConfig, OPTConfig, Qwen2Config

    common = {"vocab_size": vocab_size, "hidden_size": hidden_size, "num_hidden_layers": num_blocks}
    common |= {"num_attention_heads": num_heads, "max_position_embeddings": max_position_embeddings}
    common |= {"pad_token_id": 3, "bos_token_id": 1, "eos_token_id": 2}  # their indices in SPECIAL
    if family == "opt":
        return OPTConfig(ffn_dim=intermediate_size, word_embed_proj_dim=hidden_size, **common)
    common |= {"intermediate_size": intermediate_size, "num_key_value_heads": num_kv_heads}
    if family == "llama":
        return LlamaConfig(tie_word_embeddings=False, **common)
    if family == "mistral":
        return MistralConfig(sliding_window=SLIDING_WINDOW, **common)
    if family == "qwen2":
        return Qwen2Config(tie_word_embeddings=True, **common)
    return any_type(family, head_dim=hidden_size // num_heads, **common)


@dataclass(frozen=True)
class TinyArchitecture:
    """The sizes of a tiny model: ``build_tiny_model``'s architecture keywords. None: derived
    (``for_family``, ``for_tokenizer``)."""

    hidden_size: int = 64
    intermediate_size: int | None = None  # 2 x hidden_size
    num_blocks: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None  # num_heads for Llama and OPT, half of them for the others
    max_position_embeddings: int = 512
    vocab_size: int | None = None  # the tokenizer's

    @classmethod
    def of(cls, options: dict[str, Any]) -> TinyArchitecture:
        """The architecture of these keywords; an unknown one is refused, named, with the known ones."""
        known = [f.name for f in fields(cls)]
        unknown = [key for key in options if key not in known]
        if unknown:
            raise TypeError(
                f"build_tiny_model() got an unexpected keyword argument {unknown[0]!r} (architecture "
                f"keywords: {', '.join(known)})"
            )
        return cls(**options)

    def for_family(self, family: str) -> TinyArchitecture:
        """The heads checked and the widths given: ``family``'s key/value heads, 2 x hidden MLP."""
        heads = self.num_heads
        if self.hidden_size % heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {heads}")
        kv_heads = self.num_kv_heads
        if kv_heads is None:
            kv_heads = heads // 2 if family not in ("llama", "opt") and heads % 2 == 0 else heads
        if heads % kv_heads:
            raise ValueError(f"num_heads {heads} is not a multiple of num_kv_heads {kv_heads}")
        return replace(
            self, intermediate_size=self.intermediate_size or 2 * self.hidden_size, num_kv_heads=kv_heads
        )

    def for_tokenizer(self, tokens: int) -> TinyArchitecture:
        """The vocabulary given: the tokenizer's ``tokens`` unless larger; a smaller one is refused."""
        vocab_size = self.vocab_size or tokens
        if vocab_size < tokens:
            raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {tokens} tokens")
        return replace(self, vocab_size=vocab_size)


def build_tiny_model(
    out: str | os.PathLike,
    family: str = "llama",
    *,
    dtype: str = "float32",
    seed: int = 0,
    words: Sequence[str] | None = None,
    jitter: float = 0.0,
    max_shard_size: str | None = None,
    tokenizer: str = "byte-level",
    **architecture: int | None,
) -> Path:
    """Write a tiny random model directory to ``out`` (atomically) and return its path.

    ``architecture``: the sizes, keywords of ``TinyArchitecture`` (``hidden_size`` 64, ``intermediate_size``
    2 x ``hidden_size``, ``num_blocks`` 2, ``num_heads`` 4, ``num_kv_heads`` ``num_heads`` for Llama and
    half of them for Mistral and Qwen2 (grouped-query attention), ``max_position_embeddings`` 512,
    ``vocab_size`` the tokenizer's (``words``: see ``build_tokenizer``)); another keyword is refused.
    ``jitter`` adds that much Gaussian noise to every bias and norm weight (transformers initialises them
    to 0 and 1), so that each of them changes the output. ``max_shard_size`` (e.g. ``"40KB"``) splits
    the weights into several safetensors shards. ``tokenizer``: ``byte-level`` or ``llama`` (see
    ``build_tokenizer``; ``words`` applies to byte-level).
    """
    import torch
    from transformers import AutoModelForCausalLM

    sizes = TinyArchitecture.of(architecture).for_family(family)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (float32, float16, bfloat16)")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}")
    tokenizer = build_tokenizer(None if tokenizer == "llama" else words, tokenizer)
    sizes = sizes.for_tokenizer(len(tokenizer))
    config = tiny_config(family, **asdict(sizes))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch_dtype).eval()
    if jitter:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("bias") or "norm" in name:
                    param.add_(jitter * torch.randn_like(param))
    shard = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    out = Path(out)
    with atomic_path(out, is_dir=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True, **shard)
        tokenizer.save_pretrained(tmp)
    return out
