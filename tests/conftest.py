"""Shared fixtures: tiny random models of every supported family, saved like real checkpoints.

``make_tiny_model(tmp_path, family)`` builds a random model from a config (no download), saves it as
sharded safetensors next to a tiny word-level tokenizer and returns the directory. Other test files use
it directly or through the ``tiny_model`` fixture (parametrised over ``FAMILIES``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

FAMILIES = ("llama", "mistral", "qwen2", "opt")
VOCAB_SIZE = 128
WORDS = (
    "the a one two three cat dog bird fish tree house river stone cloud light dark small big old new "
    "red green blue runs sees eats sleeps jumps sings walks flies swims reads writes under over near far "
    "and but or with without before after today tomorrow slowly quickly happily sadly again always never"
).split()


def corpus_sentences(count: int, seed: int = 0, words: int = 12) -> list[str]:
    """``count`` random sentences over the tiny tokenizer's vocabulary (deterministic for a seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + " ." for _ in range(count)]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``WORDS`` that prepends ``<s>`` like Llama's."""
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {token: i for i, token in enumerate([*specials, *WORDS, "."])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def tiny_config(family: str, num_blocks: int, hidden: int, max_positions: int) -> PretrainedConfig:
    """A random-init config of ``family`` (Mistral: GQA + sliding window, Qwen2: q/k/v bias, OPT: biases)."""
    common = {"vocab_size": VOCAB_SIZE, "hidden_size": hidden, "num_hidden_layers": num_blocks}
    common |= {"num_attention_heads": 4, "max_position_embeddings": max_positions}
    common |= {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
    if family == "llama":
        return LlamaConfig(**common, intermediate_size=2 * hidden, tie_word_embeddings=False)
    if family == "mistral":
        return MistralConfig(**common, intermediate_size=2 * hidden, num_key_value_heads=2, sliding_window=16)
    if family == "qwen2":
        return Qwen2Config(
            **common, intermediate_size=2 * hidden, num_key_value_heads=2, tie_word_embeddings=True
        )
    if family == "opt":
        return OPTConfig(**common, ffn_dim=2 * hidden, word_embed_proj_dim=hidden, do_layer_norm_before=True)
    raise ValueError(f"unknown family {family}")


def make_tiny_model(
    tmp_path: Path,
    family: str,
    num_blocks: int = 2,
    hidden: int = 32,
    max_positions: int = 64,
    dtype: torch.dtype = torch.float32,
    max_shard_size: str = "40KB",
    seed: int = 0,
) -> Path:
    """Build, save (sharded safetensors + tokenizer) and return the directory of a tiny random model."""
    torch.manual_seed(seed)
    config = tiny_config(family, num_blocks, hidden, max_positions)
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    with torch.no_grad():  # random biases/norms so that every parameter matters in equivalence tests
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    out = Path(tmp_path) / f"{family}-{num_blocks}b-{hidden}h-{str(dtype).removeprefix('torch.')}"
    model.save_pretrained(out, max_shard_size=max_shard_size)
    make_tokenizer().save_pretrained(out)
    return out


def write_corpus(path: Path, docs: int = 24, words: int = 40, kind: str = "jsonl", seed: int = 0) -> Path:
    """A local calibration corpus: ``docs`` documents of ``words`` words as jsonl or plain text."""
    texts = [" ".join(corpus_sentences(words // 12 + 1, seed=seed + i)) for i in range(docs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        path.write_text("\n\n".join(texts) + "\n")
    return path


@pytest.fixture(params=FAMILIES)
def tiny_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 2-block model of each family."""
    return make_tiny_model(tmp_path_factory.mktemp("models"), request.param)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A small jsonl calibration corpus."""
    return write_corpus(tmp_path / "corpus" / "calib.jsonl")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The gensim 4.4.0 wheel of the demo data: $THANOS_GENSIM_WHEEL, else fetched once with pip (PyPI)."""
    from thanos.demo import wikidump

    local = os.environ.get("THANOS_GENSIM_WHEEL")
    if local:
        return Path(local)
    return wikidump.fetch_wheel(tmp_path_factory.mktemp("wheel-cache"))
