"""The config check of the inputs a workflow config names (thanos/workflow/inputs.py), in process: every
text and model directory read for content before any job runs, each problem one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import corpus_sentences, make_tiny_model, write_corpus

from thanos.workflow.config import expand
from thanos.workflow.inputs import input_problems

THANOS = {"method": "thanos", "sparsity": 0.5}


def _config(models: dict, source: str | Path, seqlen: int = 32, **over) -> dict:
    """A validated workflow config's keys the check reads: calibration of ``source``, no evaluation."""
    config = {
        "models": models,
        "calibration": {
            "source": str(source),
            "nsamples": 4,
            "seqlen": seqlen,
            "seed": 0,
            "text_field": "text",
        },
        "perplexity": {"enabled": False, "source": "wikitext2"},
        "recipes": {"r": THANOS},
    }
    return config | over


def _problems(config: dict, built: tuple[str, ...] = ()) -> list[str]:
    return input_problems(config, expand(config), lambda path: path in built)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny Llama on disk (64 positions, a word-level tokenizer: one token per word)."""
    return make_tiny_model(tmp_path_factory.mktemp("model"), "llama")


def test_a_good_config_has_no_problems(model, tmp_path):
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=8, words=60)
    assert _problems(_config({"m": {"path": str(model)}}, corpus)) == []


def test_an_empty_calibration_file_is_named_with_its_key_and_fix(model, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    (line,) = _problems(_config({"m": {"path": str(model)}}, empty))
    assert line == f"calibration.source: {empty}: no text: the file is empty; give a file with text"


def test_a_missing_source_is_refused_unless_the_workflow_builds_it(tmp_path):
    missing = str(tmp_path / "data" / "calib.jsonl")
    (line,) = _problems(_config({"m": {"path": "org/hub-model"}}, missing))
    assert line.startswith(f"calibration.source: {missing}: no such file or directory")
    assert _problems(_config({"m": {"path": "org/hub-model"}}, missing), built=(missing,)) == []
    assert _problems(_config({"m": {"path": "org/hub-model"}}, "c4")) == []


def test_a_missing_vocabulary_text_is_named_with_its_key(tmp_path):
    """A ``vocab_text`` that is not there is refused before any job runs (unless the workflow builds it)."""
    missing = str(tmp_path / "prose.jsonl")
    vocab = {"v": {"method": "thanos", "sparsity": "vocab:0.3", "vocab_text": missing}}
    (line,) = _problems(_config({"m": {"path": "org/hub-model"}}, "c4", recipes=vocab))
    assert line.startswith(f"recipes.v.vocab_text: {missing}: no such file or directory; give the text")
    assert _problems(_config({"m": {"path": "org/hub-model"}}, "c4", recipes=vocab), built=(missing,)) == []


def test_a_jsonl_without_the_field_names_the_config_key(tmp_path):
    source = tmp_path / "calib.jsonl"
    source.write_text(json.dumps({"content": "a b c"}) + "\n")
    (line,) = _problems(_config({"m": {"path": "org/hub-model"}}, source))
    assert "line 1 has no 'text' field" in line and "set the text field name (calibration.text_field)" in line


def test_documents_shorter_than_a_window_by_their_bytes(tmp_path):
    """A model not on disk (a hub id): the bound from bytes, one token per byte at most."""
    source = tmp_path / "short.txt"
    source.write_text("a short text\n\nand another one\n")
    (line,) = _problems(_config({"m": {"path": "org/hub-model"}}, source, seqlen=2048))
    assert line.startswith(
        f"calibration.source: {source}: no document is longer than calibration.seqlen=2048"
    )
    assert "counted as one token per byte" in line and "a smaller calibration.seqlen" in line


def test_documents_shorter_than_a_window_in_the_models_tokens(model, tmp_path):
    """The tiny model's tokenizer makes one token per word: 20 words (over 32 bytes) are not a window of
    32 tokens; 40 words are."""
    short = tmp_path / "short.txt"
    short.write_text(" ".join(corpus_sentences(2, words=9)) + "\n")  # 20 words and periods
    (line,) = _problems(_config({"m": {"path": str(model)}}, short, seqlen=32))
    assert "no document is longer than calibration.seqlen=32" in line
    assert "counted with the model's tokenizer, model m" in line
    long = tmp_path / "long.txt"
    long.write_text(" ".join(corpus_sentences(4, words=9)) + "\n")  # 40 tokens
    assert _problems(_config({"m": {"path": str(model)}}, long, seqlen=32)) == []


def test_a_window_longer_than_the_models_positions(model, tmp_path):
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=4, words=200)
    (line,) = _problems(_config({"m": {"path": str(model)}}, corpus, seqlen=128))
    assert (
        line
        == "calibration.seqlen: 128 exceeds the 64 positions of model m; set calibration.seqlen to 64 or less"
    )


def test_blocks_heads_and_tokens_beyond_the_models_are_refused_before_any_job(model, tmp_path):
    """A recipe (a combined one's part, a vocabulary's job) that removes every block, head or token of a
    local model is refused at the config check, as its job refuses it: the job ran after the calibration
    and the dense chain, and Snakemake deleted a finished run's outputs of the recipe first."""
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=8, words=60)
    counts = json.loads((model / "config.json").read_text())
    blocks, heads, tokens = counts["num_hidden_layers"], counts["num_attention_heads"], counts["vocab_size"]
    recipes = {
        "deep": {"method": "thanos", "sparsity": f"depth:{blocks}"},
        "heads": {"method": "thanos", "sparsity": "kv_heads:0.99"},
        "parts": {"method": "thanos", "sparsity": f"depth:{blocks + 5}+neurons:0.3"},
        "tokens": {"method": "thanos", "sparsity": f"vocab:{tokens}"},
        "fine": {"method": "thanos", "sparsity": f"depth:{blocks - 1}+heads:0.5"},
    }
    kv = counts.get("num_key_value_heads", heads)
    lines = _problems(_config({"m": {"path": str(model)}}, corpus, recipes=recipes))
    fix = f"which leaves none: at most {blocks - 1} can go"
    assert [line.split(": ", 1)[0] for line in lines] == [f"recipe {name} on models.m" for name in recipes][
        :4
    ]
    assert f"depth:{blocks} removes {blocks} of the model's {blocks} blocks, {fix}" in lines[0]
    assert lines[0].endswith(f"give depth:{blocks - 1} or less") and lines[2].endswith(lines[0][-15:])
    assert f"kv_heads:0.99 removes {kv} of the {kv} key/value groups, which leaves none" in lines[1]
    assert f"depth:{blocks + 5} removes {blocks + 5} of the model's {blocks} blocks, {fix}" in lines[2]
    assert lines[3].endswith(
        f"vocab:{tokens} keeps {tokens} of the model's {tokens} tokens, which removes none"
    )


def test_perplexity_text_shorter_than_one_window(model, tmp_path):
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=8, words=60)
    short = tmp_path / "ppl.txt"
    short.write_text("the cat sees the dog .\n")
    perplexity = {"enabled": True, "source": str(short)}
    (line,) = _problems(_config({"m": {"path": str(model)}}, corpus, perplexity=perplexity))
    assert line.startswith(f"perplexity.source: {short}: the text has at most ")
    assert (
        "fewer than one window of 64" in line and "set perplexity.seqlen to" in line
    )  # the model's positions
    # a model not there yet (hub id): its window is not known, only the text's presence is checked
    assert _problems(_config({"m": {"path": "org/hub-model"}}, corpus, perplexity=perplexity)) == []
    short.write_text("")
    (line,) = _problems(_config({"m": {"path": "org/hub-model"}}, corpus, perplexity=perplexity))
    assert line.startswith(f"perplexity.source: {short}: no text")


def test_distillation_text_without_a_window_beyond_the_held_out(model, tmp_path):
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=8, words=60)
    text = write_corpus(tmp_path / "distill.jsonl", docs=2, words=24)  # about 60 tokens
    distilled = {**THANOS, "distill": {"tokens": 256, "source": str(text), "seqlen": 32, "heldout": 2}}
    (line,) = _problems(_config({"m": {"path": str(model)}}, corpus, recipes={"kd": distilled}))
    assert line.startswith(f"recipes.kd.distill.source: {text}: the text has at most ")
    assert "no more than 2 held-out window(s) of 32" in line and "fewer recipes.kd.distill.heldout" in line
    distilled["distill"]["heldout"] = 1
    assert _problems(_config({"m": {"path": str(model)}}, corpus, recipes={"kd": distilled})) == []


def test_model_directories_need_a_readable_config(tmp_path):
    corpus = write_corpus(tmp_path / "calib.jsonl")
    empty = tmp_path / "empty-model"
    empty.mkdir()
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{")
    models = {"a": {"path": str(empty)}, "b": {"path": str(broken)}, "c": {"path": str(corpus)}}
    lines = _problems(_config(models, corpus))
    assert (
        lines[0]
        == f"models.a.path: {empty}: no config.json; give a Hugging Face model directory (save_pretrained)"
    )
    assert lines[1].startswith(f"models.b.path: {broken / 'config.json'}: not readable JSON")
    assert lines[2].startswith(f"models.c.path: {corpus}: not a directory")
    # a model the workflow builds is not looked at, even when its directory is there
    assert _problems(_config({"a": {"path": str(empty)}}, corpus), built=(str(empty),)) == []


def test_a_missing_model_path_that_no_hub_id_can_be_is_refused(tmp_path):
    """A model path that is not there is taken as a hub id only where it can be one (``name``,
    ``namespace/name``): an absolute path, ``./``, three parts or an empty one is a typo, refused at the
    config check (its model-info job failed on it; on a finished run Snakemake deleted the model's facts
    first, and every evaluation ran again once it was corrected)."""
    corpus = write_corpus(tmp_path / "calib.jsonl")
    models = {
        "absolute": {"path": str(tmp_path / "smollm3")},
        "parts": {"path": "results/smoke/modl"},
        "empty": {"path": ""},
        "hub": {"path": "HuggingFaceTB/SmolLM2-135M"},
        "name": {"path": "gpt2"},
    }
    lines = _problems(_config(models, corpus))
    fix = "no such directory, and not a hub id (name or namespace/name); give a Hugging Face model directory"
    assert lines == [
        f"models.absolute.path: '{tmp_path / 'smollm3'}': {fix} or a hub id",
        f"models.parts.path: 'results/smoke/modl': {fix} or a hub id",
        f"models.empty.path: '': {fix} or a hub id",
    ]


def test_a_tiny_model_the_workflow_builds_is_checked_by_its_sizes(tmp_path):
    """A tiny model is not there before its job builds it, but its sizes are the config's: a window longer
    than its positions, a recipe removing all its blocks and sizes its family cannot have are refused at the
    config check, where they failed in a job (the calibration's, the depth's, the model's build)."""
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=8, words=60)
    tiny = {
        "family": "llama",
        "hidden_size": 64,
        "num_blocks": 2,
        "num_heads": 4,
        "max_position_embeddings": 64,
    }
    models = {
        "t": {"path": "results/t", "tiny": tiny},
        "odd": {"path": "results/o", "tiny": tiny | {"num_heads": 5}},
    }
    recipes = {"deep": {"method": "thanos", "sparsity": "depth:2"}}
    lines = _problems(_config(models, corpus, seqlen=128, recipes=recipes), built=("results/t", "results/o"))
    assert lines == [
        "models.odd.tiny: hidden_size 64 is not a multiple of num_heads 5; give sizes a model of this family "
        "can have",
        "recipe deep on models.t: depth:2 removes 2 of the model's 2 blocks, which leaves none: at most 1 "
        "can go (a model keeps at least one block, the final norm and the head read its outputs); give "
        "depth:1 or less",
        "calibration.seqlen: 128 exceeds the 64 positions of model t; set calibration.seqlen to 64 or less",
    ]
