"""Perplexity: the paper's protocol on a tiny random Llama, checked against an independent computation."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model

from thanos.cli import main
from thanos.evaluation.perplexity import evaluate_perplexity, load_eval_text

WORDS = [f"w{i}" for i in range(60)] + ["the", "of", "and", "=", "@-@", ",", "."]


def _raw_text(seed: int = 0, lines: int = 40) -> str:
    """A WikiText-like raw file: headings, paragraphs, blank lines."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        if i % 7 == 0:
            out.append(" = w1 w2 = \n")
        elif i % 3 == 0:
            out.append(" \n")
        else:
            out.append(" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) + " \n")
    return "".join(out)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random Llama (64 positions) whose word-level tokenizer knows the words of ``_raw_text``."""
    return make_tiny_model(tmp_path_factory.mktemp("ppl"), "llama", words=WORDS)


@pytest.fixture()
def raw_file(tmp_path) -> Path:
    path = tmp_path / "wiki.test.raw"
    path.write_text(_raw_text(), encoding="utf-8")
    return path


def _reference_ppl(
    model_dir: Path, text: str, seqlen: int, max_windows: int | None = None
) -> tuple[float, int]:
    """Independent computation: full-model forward over every window (or the first ``max_windows``), NLL
    by hand in float64."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(text, return_tensors="pt").input_ids[0]
    n = min(ids.numel() // seqlen, max_windows or ids.numel())
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(n):
            window = ids[i * seqlen : (i + 1) * seqlen].unsqueeze(0)
            logp = torch.log_softmax(model(window).logits[0].double(), dim=-1)
            for t in range(seqlen - 1):
                total -= float(logp[t, window[0, t + 1]])
                count += 1
    return math.exp(total / count), n


def test_raw_file_rows_match_hub_join(raw_file):
    """wiki.test.raw: each line is a dataset row (blank lines -> ""), rows joined with blank lines."""
    lines = raw_file.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [line if line.strip() else "" for line in lines]
    data = load_eval_text(str(raw_file))
    assert data.text == "\n\n".join(rows)
    assert data.dataset == str(raw_file)
    assert len(data.checksum) == 64


def test_cli_perplexity_matches_reference(tiny, raw_file, tmp_path):
    out = tmp_path / "eval" / "perplexity.json"
    argv = ["perplexity", "--model", str(tiny), "--source", str(raw_file), "--batch-size", "2"]
    rc = main([*argv, "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    for key in ("ppl", "nll", "tokens", "windows", "seqlen", "dataset", "checksum", "seconds", "device"):
        assert key in result
    assert result["seqlen"] == 64  # min(2048, max_position_embeddings)
    assert result["device"] == "cpu"
    ref_ppl, ref_windows = _reference_ppl(tiny, load_eval_text(str(raw_file)).text, 64)
    assert result["windows"] == ref_windows >= 3
    assert result["tokens"] == ref_windows * 63
    assert result["ppl"] == pytest.approx(ref_ppl, rel=1e-5)
    assert result["nll"] == pytest.approx(math.log(ref_ppl), rel=1e-5)


def test_window_length_option_and_jsonl(tiny, tmp_path):
    docs = [" ".join(random.Random(i).choice(WORDS) for _ in range(40)) for i in range(8)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    one = evaluate_perplexity(str(tiny), source=str(corpus), seqlen=32, batch_size=1, progress=False)
    many = evaluate_perplexity(str(tiny), source=str(corpus), seqlen=32, batch_size=4, progress=False)
    ref_ppl, ref_windows = _reference_ppl(tiny, "\n\n".join(docs), 32)
    assert one.seqlen == 32 and one.windows == ref_windows
    assert one.ppl == pytest.approx(ref_ppl, rel=1e-5)
    assert many.ppl == pytest.approx(one.ppl, rel=1e-5)


def test_max_windows_scores_the_first_windows(tiny, raw_file, tmp_path):
    """--max-windows K: the perplexity of the first K windows exactly, recorded; K < 1 is refused."""
    from transformers import AutoTokenizer

    text = load_eval_text(str(raw_file)).text
    ids = AutoTokenizer.from_pretrained(tiny)(text).input_ids
    first_two, windows = _reference_ppl(tiny, text, 32, max_windows=2)
    out = tmp_path / "p.json"
    argv = [
        "perplexity",
        "--model",
        str(tiny),
        "--source",
        str(raw_file),
        "--seqlen",
        "32",
        "--max-windows",
        "2",
    ]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(ids) // 32 > 2 and windows == result["windows"] == 2 and result["max_windows"] == 2
    assert result["text_tokens"] == len(ids)
    assert result["ppl"] == pytest.approx(first_two, rel=1e-5)
    with pytest.raises(ValueError, match="--max-windows 0"):
        evaluate_perplexity(str(tiny), source=str(raw_file), max_windows=0, progress=False)


def test_missing_data_is_a_clean_error(tiny, tmp_path, capsys):
    """One line naming what is missing and where to get it, whatever stderr is (no traceback, not twice)."""
    argv = ["perplexity", "--model", str(tiny), "--source", str(tmp_path / "nope.raw")]
    rc = main([*argv, "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("evaluation data not found") == 1 and "Traceback" not in err, err
    assert err.rstrip().splitlines()[-1].startswith("ERROR: ") and "wiki.test.raw" in err
    assert not (tmp_path / "x.json").exists()


def test_window_longer_than_model_names_max_and_option(tiny, raw_file):
    with pytest.raises(ValueError, match=r"max_position_embeddings = 64.*--seqlen 64"):
        evaluate_perplexity(str(tiny), source=str(raw_file), seqlen=128, progress=False)


def test_text_shorter_than_one_window(tiny, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("w1 w2 w3\n")
    with pytest.raises(ValueError, match="fewer than one window"):
        evaluate_perplexity(str(tiny), source=str(short), progress=False)


def test_missing_model_is_a_clean_error(raw_file, tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot load model"):
        evaluate_perplexity(str(tmp_path / "no-model"), source=str(raw_file), progress=False)


def test_bits_per_byte_counts_the_bytes_of_the_predicted_tokens(tiny, tmp_path):
    """``bytes`` is the UTF-8 length of the text each window's predicted tokens cover (from the end of its
    first token to the end of its last; multi-byte words included), ``bits_per_byte`` the total NLL over it
    in bits; the dense model's perplexity per original token, from its bits per byte, is its perplexity."""
    import re

    from thanos.recipes.labels import per_original_token

    text = _raw_text().replace("w3", "naïve").replace("w4", "日本語 🙂")
    path = tmp_path / "text.raw"
    path.write_text(text, encoding="utf-8")
    result = evaluate_perplexity(str(tiny), source=str(path), seqlen=16, progress=False).to_dict()
    text = load_eval_text(str(path)).text
    words = [m.end() for m in re.finditer(r"\S+", text)]  # the tiny tokenizer splits on whitespace
    assert result["text_tokens"] == 1 + len(words) and len(text.encode()) > len(text)
    ends = [0] + [len(text[:end].encode()) for end in words]  # the tokenizer's bos first, ending at 0
    covered = sum(ends[w * 16 + 15] - ends[w * 16] for w in range(result["windows"]))
    assert result["bytes"] == covered
    assert result["bits_per_byte"] == pytest.approx(result["total_nll"] / math.log(2) / covered, rel=1e-12)
    assert result["total_nll"] == pytest.approx(result["nll"] * result["tokens"], rel=1e-12)
    assert per_original_token(result, result) == pytest.approx(result["ppl"], rel=1e-9)
