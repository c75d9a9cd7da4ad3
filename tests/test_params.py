"""The vocabulary as a part of combined recipes, and a size as the request (``params:p``): the search's
choice, its record (``search.json``), its resume, and the chosen recipe run on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_vocabulary import END, PROSE, train_tokenizer

from thanos import prune_model


def bpe_model(directory: Path) -> Path:
    """A tiny random Llama (3 blocks, 4 query heads in 2 groups) over a trained byte-level BPE tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer("byte-level")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=tokenizer.convert_tokens_to_ids(END), pad_token_id=3,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).float().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The model, a calibration text and the options every run here shares."""
    root = tmp_path_factory.mktemp("params")
    text = root / "calib.txt"
    lines = [line for line in PROSE if line]
    text.write_text("\n\n".join(" ".join(lines[i:] + lines[:i]) for i in range(len(lines))) + "\n")
    options = {"calibration": str(text), "nsamples": 8, "seqlen": 32, "device": "cpu"}
    return {"root": root, "model": bpe_model(root / "dense"), "options": options}


def weights(out: Path) -> dict[str, bytes]:
    """What a written model is: its weights, config and tokenizer, byte for byte."""
    names = ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json")
    return {name: (out / name).read_bytes() for name in names if (out / name).exists()}


def test_vocab_runs_last_in_a_combined_recipe(inputs: dict[str, Any], tmp_path: Path) -> None:
    """``vocab:0.3+depth:1+neurons:0.3``: depth, then neurons, then the vocabulary on the model they wrote;
    the output is the one the parts give run one after the other by hand, and its card names the whole."""
    model, options = inputs["model"], inputs["options"]
    report = prune_model(model, "thanos", "vocab:0.3+depth:1+neurons:0.3", out=tmp_path / "out", **options)
    assert [part["sparsity"] for part in report["parts"]] == ["depth:1", "neurons:0.3", "vocab:0.3"]
    widths = prune_model(model, "thanos", "depth:1+neurons:0.3", out=tmp_path / "widths", **options)
    by_hand = prune_model(widths["out"], "thanos", "vocab:0.3", out=tmp_path / "by-hand", **options)
    assert weights(tmp_path / "out") == weights(tmp_path / "by-hand")
    assert report["kept_ids"] == by_hand["kept_ids"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == by_hand["tokens_kept"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "The last part of the combined recipe `depth:1+neurons:0.3+vocab:0.3` on `dense`" in card
    with pytest.raises(ValueError, match="ends with the vocabulary, which is not distilled"):
        prune_model(
            model, "thanos", "depth:1+vocab:0.3", out=tmp_path / "x", distill={"tokens": 64}, **options
        )
