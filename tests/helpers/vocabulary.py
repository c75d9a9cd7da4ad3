"""Tokenizers trained here (byte-level BPE, SentencePiece-style BPE with byte fallback) on a short English
prose, and tiny random Llama models over them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


END = "<|end|>"  # an added special token after every other token: its id changes


PROSE = """Rivers carry sand from the mountains to the sea, and every spring the valley floods again.
The farmers of the valley learned to plant late, after the water had gone, in soil the river left behind.
Their houses stand on stone platforms; their granaries on stilts. Children learn to swim before they read.
In the old town the streets are narrow and the walls are thick, built to keep out summer heat and winter
wind alike. Markets open at dawn: bread, cheese, olives, figs, and fish brought up from the coast overnight.
A traveller who arrives in the evening finds the squares full of people talking, eating, and arguing about
the weather, the harvest, the price of oil, and whether the new bridge will ever be finished.
Scientists measure the river's flow at three stations. The numbers go into a model that predicts floods
a week ahead, which gives the farmers time to move their animals and their grain to higher ground.
""".split("\n")


def train_tokenizer(kind: str) -> Any:
    """A BPE tokenizer trained on ``PROSE``: byte-level, or SentencePiece-style with byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIAL, show_progress=False)
    if kind == "byte-level":
        trainer = trainers.BpeTrainer(
            vocab_size=420,
            special_tokens=SPECIAL,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(PROSE, trainer)
    else:
        normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        trained = Tokenizer(models.BPE(unk_token="<unk>"))
        trained.normalizer = normalizer
        trained.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
        trained.train_from_iterator(PROSE, trainer)
        learned = json.loads(trained.to_str())["model"]
        pieces = [*SPECIAL, *(f"<0x{b:02X}>" for b in range(256)), *list(learned["vocab"])[len(SPECIAL) :]]
        vocab = {piece: i for i, piece in enumerate(dict.fromkeys(pieces))}
        merges = [tuple(merge) for merge in learned["merges"]]
        tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizer
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    end = tok.get_vocab_size()
    tok.add_special_tokens([END])
    tok.post_processor = processors.TemplateProcessing(
        single=f"<s> $A {END}", special_tokens=[("<s>", 1), (END, end)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token=END, pad_token="<pad>"
    )


def build_model(directory: Path, kind: str, intermediate: int = 64) -> Path:
    """A tiny random Llama over the ``kind`` tokenizer, float32: untied head for byte-level, tied for the
    other, a few more embedding rows than tokens (a padded vocabulary), an MLP ``intermediate`` wide."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(kind)
    eos = tokenizer.convert_tokens_to_ids(END)
    config = LlamaConfig(
        vocab_size=len(tokenizer) + 3,
        hidden_size=32,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=kind != "byte-level",
        bos_token_id=1,
        eos_token_id=eos,
        pad_token_id=3,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=[eos, 2], pad_token_id=3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def bpe_model(directory: Path, num_blocks: int = 3) -> Path:
    """A tiny random Llama (``num_blocks`` blocks, hidden size 64, 4 query heads in 2 groups) over a trained
    byte-level BPE tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer("byte-level")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=num_blocks,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=tokenizer.convert_tokens_to_ids(END), pad_token_id=3,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).float().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
