"""The vocabulary as a structure (``vocab:N``, ``vocab:p``): tokenizers trained here (byte-level BPE, and
SentencePiece-style BPE with byte fallback as Llama's), tiny Llama models (untied and tied head) built from
configs, each pruned once per module (``thanos.stages.vocab.prune_vocabulary``)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.models import stored_parameters
from helpers.tasks import toy_task
from helpers.tools import (
    converted_to_gguf,
    run_llama_cpp_converter,
    vllm_reads,
)
from helpers.vocabulary import END, PROSE, SPECIAL, build_model

from thanos.demo import tasks
from thanos.demo.tiny import build_tokenizer
from thanos.models.vocabulary import choose_tokens, closure, minimum_kept, read_bpe
from thanos.models.vocabulary_files import prune_config, prune_tokenizer_config, renumbering
from thanos.pruning.sparsity import parse_sparsity, vocab_count
from thanos.stages.vocab import prune_vocabulary

CHOOSING = [line for line in PROSE if line][:2] * 3  # chooses the vocabulary: each token used 3 times
STRINGS = [
    "",
    " ",
    "   leading and trailing   ",
    "tabs\tand\nnewlines\r\n\n",
    "\x00\x01\x1f control \x7f bytes",
    "emoji 🙂🚀👩‍👩‍👧 and flags 🇫🇷",
    "中文字符和日本語のテキスト、한국어",
    "Ünïcödé çàñ ß ∑ ∫ √ ≠ ™",
    "The valley floods every spring.",
    "zzqx unusual wordforms xylophonic",
]


def random_strings(count: int, seed: int = 0) -> list[str]:
    """Strings of random code points from many scripts (no '<', which could spell a special token)."""
    rng = random.Random(seed)
    ranges = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x1FAFF)]
    out = []
    for _ in range(count):
        chars = (chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 24)))
        out.append("".join(c for c in chars if c != "<"))
    return out


KINDS = ("byte-level", "byte-fallback")
_PRUNED: dict[str, dict[str, Any]] = {}  # each kind's case, made once for the file (its directories stay)


def pruned_case(kind: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model of tokenizer ``kind`` and the same model with ``vocab:0.15``, chosen by ``CHOOSING`` (made on
    first use, then the same for every test of the file)."""
    if kind not in _PRUNED:
        root = tmp_path_factory.mktemp(kind)
        dense = build_model(root / "dense", kind)
        out = root / "pruned"
        report = prune_vocabulary(dense, out, parse_sparsity("vocab:0.15"), CHOOSING, "prose")
        _PRUNED[kind] = {"kind": kind, "dense": dense, "out": out, "report": report}
    return _PRUNED[kind]


@pytest.fixture(scope="module", params=KINDS)
def pruned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model of each tokenizer kind and the same model with ``vocab:0.15``, chosen by ``CHOOSING``."""
    return pruned_case(request.param, tmp_path_factory)


def tokenizers_of(case: dict[str, Any]) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(case["dense"]), AutoTokenizer.from_pretrained(case["out"])


def test_vocab_grammar_exact_counts() -> None:
    """``vocab:N`` keeps N tokens, ``vocab:p`` removes ceil(p V) of V, written back as given; a count
    written with a point and a count that removes nothing are refused."""
    assert str(parse_sparsity("vocab:8000")) == "vocab:8000"
    assert vocab_count(parse_sparsity("vocab:8000"), 49152) == 8000
    assert vocab_count(parse_sparsity("vocab:0.3"), 10) == 7  # 0.3 * 10 is exactly 3
    assert vocab_count(parse_sparsity("Vocab:0.25"), 49152) == 36864
    with pytest.raises(ValueError, match="without a point"):
        parse_sparsity("vocab:1.0")
    with pytest.raises(ValueError, match="removes none"):
        vocab_count(parse_sparsity("vocab:500"), 500)


def test_choice_honours_the_budget_and_is_closed(pruned: dict[str, Any]) -> None:
    """Any budget from the minimum up is met exactly; the kept set holds the special tokens, the byte
    alphabet and the text's tokens (when they fit) and every kept token's merge parts; below the minimum
    it is refused, naming it."""
    data = json.loads((pruned["dense"] / "tokenizer.json").read_text())
    vocab = read_bpe(data, [1, 2, 3])
    parts = vocab.parts()
    dense_tok, _ = tokenizers_of(pruned)
    used = {i: 3 for i in dense_tok.encode(" farmers of the valley", add_special_tokens=False)}
    low = minimum_kept(vocab)
    needed = len(closure(used, parts, closure(vocab.always, parts)))
    assert low >= 256 + len(SPECIAL)
    for keep in (low, low + 1, low + 17, vocab.size - 1):
        kept = choose_tokens(vocab, keep, used)
        assert len(kept) == keep
        assert vocab.always <= set(kept)
        assert not closure(kept, parts, kept)  # closed: nothing beyond itself is needed
        assert all(set(parts.get(token, ())) <= set(kept) for token in kept)
    assert set(used) <= set(choose_tokens(vocab, low + needed, used))
    with pytest.raises(ValueError, match=f"keep at least {low}"):
        choose_tokens(vocab, low - 1, used)


def test_rank_text_tokens_used_thrice_then_earliest_merges(pruned: dict[str, Any]) -> None:
    """A token the text uses twice waits behind the earliest merges (the lowest ids); used three times,
    it comes first."""
    vocab = read_bpe(json.loads((pruned["dense"] / "tokenizer.json").read_text()), [1, 2, 3])
    parts = vocab.parts()
    minimum = closure(vocab.always, parts)
    late = max(t for t in vocab.tokens.values() if len(closure([t], parts, minimum)) == 1)
    earliest = min(t for t in vocab.tokens.values() if t not in minimum)
    assert earliest < late
    twice = set(choose_tokens(vocab, len(minimum) + 1, {late: 2})) - minimum
    thrice = set(choose_tokens(vocab, len(minimum) + 1, {late: 3})) - minimum
    assert (twice, thrice) == ({earliest}, {late})


def test_the_filler_is_the_earliest_merges_in_the_texts_scripts() -> None:
    """After the text's tokens, the earliest merge written in the choosing text's scripts comes before an
    earlier one of another script (a multilingual vocabulary kept for English prose); a script with a few
    letters of the text (under 1 %) is not the text's; without the text's characters, the earliest merge."""
    import itertools
    from collections import Counter

    from thanos.models.vocabulary import token_text

    singles = ["\u0434", "\u0436", "a", "b"]  # Cyrillic de and zhe, Latin a and b
    tokens = {**{f"<0x{byte:02X}>": byte for byte in range(256)}, "\u0434\u0436": 256, "ab": 257}
    tokens |= {single: 258 + i for i, single in enumerate(singles)}
    data = {
        "model": {
            "type": "BPE",
            "byte_fallback": True,
            "vocab": tokens,
            "merges": [["\u0434", "\u0436"], ["a", "b"]],
        },
        "added_tokens": [],
    }
    vocab = read_bpe(data)
    keep = minimum_kept(vocab) + 3  # one merge and its two parts
    english = Counter("ab ba " * 200 + "\u0434")  # one Cyrillic letter in 801
    assert set(choose_tokens(vocab, keep, {})) - vocab.always == {256, 258, 259}  # the earliest merge
    assert set(choose_tokens(vocab, keep, {}, english)) - vocab.always == {257, 260, 261}
    russian = Counter("\u0434\u0436 " * 200 + "ab")
    assert set(choose_tokens(vocab, keep, {}, russian)) - vocab.always == {256, 258, 259}
    # a vocabulary nearly all in the text's scripts (under 10 % in others): the earliest merges as they are
    latin = {
        "".join(pair): 262 + i
        for i, pair in enumerate(itertools.product("cdefghijklmnopqrstuvwxyz", repeat=3))
    }
    wide = read_bpe(data | {"model": data["model"] | {"vocab": tokens | latin}})
    assert set(choose_tokens(wide, keep, {}, english)) == set(choose_tokens(wide, keep, {}))
    # a token's text: byte-level symbols as UTF-8 (a piece of a character is none), SentencePiece's space
    assert (
        token_text("\u0120the", "byte-level") == " the"
        and token_text("\u00c3\u00a9", "byte-level") == "\u00e9"
    )
    assert token_text("\u00c3", "byte-level") is None and token_text("<0x41>", "byte-fallback") is None
    assert token_text("\u2581the", "byte-fallback") == " the"


def test_report_counts(pruned: dict[str, Any]) -> None:
    """The report: the text that chose, tokens kept (ceil-exact), parameters before and after, the text's
    length before and after."""
    report = pruned["report"]
    assert report["text"] == "prose" and report["tokenizer"] == pruned["kind"]
    assert report["tokens_kept"] == report["tokens_before"] - -(-15 * report["tokens_before"] // 100)
    rows = json.loads((pruned["dense"] / "config.json").read_text())["vocab_size"]
    tied = pruned["kind"] != "byte-level"
    removed = (rows - report["tokens_kept"]) * 32 * (1 if tied else 2)
    assert report["parameters_before"] - report["parameters_after"] == removed
    assert report["text_tokens_after"] == report["text_tokens_before"]  # the text's own tokens are all kept


def test_decodes_what_it_encodes(pruned: dict[str, Any]) -> None:
    """Every string the pruned tokenizer encodes decodes back to itself (unicode, emoji, CJK, control
    bytes, empty, whitespace runs), with only ids below the new vocabulary size."""
    _, tokenizer = tokenizers_of(pruned)
    size = pruned["report"]["tokens_kept"]
    for text in STRINGS + random_strings(60):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert all(0 <= i < size for i in ids)
        assert tokenizer.decode(ids) == text, repr(text)


def test_kept_text_same_ids_and_logits(pruned: dict[str, Any]) -> None:
    """A text of kept tokens encodes to the dense ids renumbered (special tokens included), and the pruned
    model's logits on it are the dense model's restricted to the kept tokens (fp32, 1e-5)."""
    from transformers import AutoModelForCausalLM

    dense_tok, tok = tokenizers_of(pruned)
    kept = pruned["report"]["kept_ids"]
    new_id = renumbering(kept)
    text = CHOOSING[1]
    dense_ids = dense_tok.encode(text)
    assert dense_ids[-1] == dense_tok.convert_tokens_to_ids(END) != new_id[dense_ids[-1]]
    assert tok.encode(text) == [new_id[i] for i in dense_ids]
    dense = AutoModelForCausalLM.from_pretrained(pruned["dense"], dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(pruned["out"], dtype=torch.float32)
    with torch.no_grad():
        expected = dense(torch.tensor([dense_ids])).logits[0][:, kept]
        got = model(torch.tensor([tok.encode(text)])).logits[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_kept_rows_equal_dense_rows(pruned: dict[str, Any]) -> None:
    """Every kept row of the embedding and the head is the dense row; a tied head stays tied, an untied
    one keeps its own rows; config and generation config name the renumbered special tokens."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    dense = AutoModelForCausalLM.from_pretrained(pruned["dense"], dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(pruned["out"], dtype=torch.float32)
    kept = pruned["report"]["kept_ids"]
    new_id = renumbering(kept)
    for get in ("get_input_embeddings", "get_output_embeddings"):
        new, old = getattr(model, get)().weight, getattr(dense, get)().weight
        assert new.shape == (len(kept), 32)
        assert torch.equal(new, old[kept])
    tied = model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert tied == (pruned["kind"] != "byte-level")
    config, generation = model.config, GenerationConfig.from_pretrained(pruned["out"])
    assert config.vocab_size == len(kept)
    assert (config.bos_token_id, config.pad_token_id) == (new_id[1], new_id[3])
    assert config.eos_token_id == new_id[dense.config.eos_token_id]
    assert generation.eos_token_id == [new_id[dense.config.eos_token_id], new_id[2]]


def test_tokenizer_config_ids_renumbered() -> None:
    """``added_tokens_decoder`` (as transformers 4 writes it) is keyed by the new ids; the config's token
    ids, one or a list, renumbered, and ``vocab_size`` the kept count."""
    entry = {"content": "<x>", "special": True}
    config = {"added_tokens_decoder": {"0": entry, "7": entry}, "bos_token": "<x>"}
    assert prune_tokenizer_config(config, [0, 3, 7])["added_tokens_decoder"] == {"0": entry, "2": entry}
    model = {"vocab_size": 10, "eos_token_id": [7, 3], "bos_token_id": 0, "hidden_size": 7}
    assert prune_config(model, [7, 0, 3]) == {
        "vocab_size": 3,
        "eos_token_id": [2, 1],
        "bos_token_id": 0,
        "hidden_size": 7,
    }
    with pytest.raises(ValueError, match="bos_token_id names token 0, which is not kept"):
        prune_config(model, [3, 7])


def test_other_tokenizers_refused(tmp_path: Path) -> None:
    """A word-level tokenizer is refused in one line naming its type; nothing is written."""
    tokenizer = build_tokenizer(["red", "green"])
    tokenizer.save_pretrained(tmp_path / "tok")
    data = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    with pytest.raises(ValueError, match="the tokenizer is WordLevel, not BPE") as err:
        read_bpe(data)
    assert "\n" not in str(err.value)
    (tmp_path / "tok" / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 8}))
    with pytest.raises(ValueError, match="WordLevel"):
        prune_vocabulary(tmp_path / "tok", tmp_path / "out", parse_sparsity("vocab:0.3"), ["red"], "x")
    assert not (tmp_path / "out").exists()


def test_prune_vocab_command(pruned: dict[str, Any], cli: Any, tmp_path: Path) -> None:
    """``thanos prune-vocab`` writes the model the stage wrote (the same kept ids and tensors), says what it
    kept, and its card names the text; a non-empty directory that is no earlier result is refused, kept,
    and so is a directory inside the input model; a text that is not there is refused naming ``--text``."""
    text = tmp_path / "prose.txt"
    text.write_text("\n\n".join(CHOOSING) + "\n")
    out = tmp_path / "out"
    args = ("prune-vocab", "--model", pruned["dense"], "--sparsity", "vocab:0.15", "--text", text)
    done = cli(*args, "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Loading weights" not in done.stderr and "Writing model shards" not in done.stderr, done.stderr
    report = pruned["report"]
    assert f"kept {report['tokens_kept']:,} of {report['tokens_before']:,} tokens" in done.stdout
    assert json.loads((out / "vocabulary.json").read_text())["kept_ids"] == report["kept_ids"]
    assert (out / "model.safetensors").read_bytes() == (pruned["out"] / "model.safetensors").read_bytes()
    assert str(text) in (out / "README.md").read_text()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = cli(*args, "--out", other, cwd=tmp_path)
    assert refused.returncode != 0 and "is not empty and is not a previous result" in refused.stderr
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    inside = cli(*args, "--out", pruned["dense"] / "pruned", cwd=tmp_path)
    assert inside.returncode != 0 and "is the input model or inside it" in inside.stderr
    missing = (*args[:-1], tmp_path / "nothing.txt", "--out", tmp_path / "none")
    absent = cli(*missing, cwd=tmp_path)  # named as its option, before --out is taken
    assert absent.returncode == 2 and "nothing.txt: no such file or directory" in absent.stderr
    assert "ERROR: --text " in absent.stderr, absent.stderr
    assert not (tmp_path / "none").exists() and not (tmp_path / ".none.thanos-lock").exists()
    # each problem said once, of the option that gave it (a value was said twice; a text's problem, a
    # count the tokenizer cannot keep and a field the text lacks named no option)
    jsonl = tmp_path / "prose.jsonl"
    jsonl.write_text(json.dumps({"text": CHOOSING[0]}) + "\n")
    model = ("prune-vocab", "--model", pruned["dense"], "--out", tmp_path / "none")
    for given, said in (
        (("--sparsity", "vocab:1.5", "--text", text), "--sparsity 'vocab:1.5': give a whole number of"),
        (("--sparsity", "vocab:10", "--text", text), "--sparsity vocab:10: keeps 10 tokens, fewer than the"),
        (("--sparsity", "vocab:0.15", "--text", jsonl, "--text-field", "body"), f"--text {jsonl}: line 1"),
    ):
        run = cli(*model, *given, cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.splitlines()[-1].startswith(f"ERROR: {said}"), run.stderr
    assert not (tmp_path / "none").exists()


def test_prune_model_vocab(pruned: dict[str, Any], tmp_path: Path) -> None:
    """``thanos.prune_model(..., sparsity="vocab:0.15")`` chooses by the calibration text and writes the
    model the stage writes; the workflow's config makes a vocab recipe one ``thanos prune-model`` job, and
    refuses what that job cannot take (recovery) naming the key."""
    from thanos import prune_model
    from thanos.recipes.fields import ConfigError
    from thanos.workflow.config import expand

    text = tmp_path / "calib.txt"
    text.write_text("\n\n".join(CHOOSING) + "\n")
    out = tmp_path / "out"
    report = prune_model(
        pruned["dense"],
        "thanos",
        "vocab:0.15",
        out=out,
        calibration=text,
        nsamples=4,
        seqlen=32,
        device="cpu",
    )
    kept = json.loads((out / "vocabulary.json").read_text())["kept_ids"]
    assert kept == pruned["report"]["kept_ids"] and report["out"] == str(out)
    assert (out / "model.safetensors").read_bytes() == (pruned["out"] / "model.safetensors").read_bytes()
    # described as every recipe's model is: sparsity.json and pruning_report.json name the recipe and the
    # input model, and count the written weights against the input model's
    sidecar = json.loads((out / "sparsity.json").read_text())
    written, dense = stored_parameters(out), stored_parameters(pruned["dense"])
    assert (sidecar["sparsity"], sidecar["structure"], sidecar["method"]) == ("vocab:0.15", "vocab", "thanos")
    assert sidecar["all_parameters"]["parameters"] == written
    assert sidecar["compact"]["parameters"] == {"original": dense, "kept": written}
    config = json.loads((out / "config.json").read_text())
    assert sidecar["compact"]["kept_tokens"] == config["vocab_size"] == len(kept)
    described = json.loads((out / "pruning_report.json").read_text())
    assert described["recipe"]["sparsity"] == "vocab:0.15" and described["model"]["path"] == str(
        pruned["dense"]
    )
    assert described["layers"] == [] and "model.safetensors" in described["files"]
    card = (out / "README.md").read_text()
    assert f"# {pruned['dense'].name}: vocabulary `vocab:0.15`" in card
    assert f"{written:,} of {dense:,} parameters" in card and "## Vocabulary" in card
    grid = {"recipe_grid": [{"methods": ["thanos"], "sparsities": ["vocab:0.3"]}]}
    (name, recipe), *_ = expand(grid).items()  # a workflow recipe: one `thanos prune-model` job
    assert name == "thanos_v30" and recipe.flags() == ["--method", "thanos", "--sparsity", "vocab:0.3"]
    with pytest.raises(ConfigError, match=r"recipe_grid\[0\]: recover with sparsity=vocab:0\.3: removing"):
        expand({"recipe_grid": [grid["recipe_grid"][0] | {"recover": True}]})


def test_prune_model_vocab_evaluates_in_bits_per_byte(
    pruned: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--evaluate ppl`` after ``vocab:p`` scores both models; on a text of kept tokens both cut it into
    the same tokens and bytes, and the pruned model's loss is the dense loss with the removed tokens'
    probability taken out: total NLL = dense total NLL + sum of log(kept probability mass) over the
    predicted positions (so its bits per byte are lower, never higher). The fields are in
    ``perplexity.json``, the bits per byte in the card and the closing lines, which are all the run shows
    besides its steps, as every recipe's run shows them: no progress bar of transformers' loading and
    saving, no INFO record of the evaluation. The same call again writes nothing and evaluates only what it
    had not (zero-shot accuracy, kept in turn)."""
    import io
    import logging

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from thanos import prune_model

    text = tmp_path / "calib.txt"
    text.write_text("\n\n".join(CHOOSING * 3) + "\n")
    out, stream = tmp_path / "out", io.StringIO()
    caplog.set_level(logging.INFO)
    evaluation = prune_model(
        pruned["dense"], "thanos", "vocab:0.15", out=out, calibration=text, nsamples=4, seqlen=32,
        device="cpu", evaluate="ppl", ppl_source=text, ppl_seqlen=16, stream=stream,
    )["evaluation"]  # fmt: skip
    kept = json.loads((out / "vocabulary.json").read_text())["kept_ids"]
    shown = capsys.readouterr().err
    assert "Loading weights" not in shown and "Writing model shards" not in shown, shown
    assert "INFO" not in shown and "INFO" not in stream.getvalue(), shown  # the records go to the run's log
    display = stream.getvalue()  # every recipe's: the plan, the steps, what was written
    assert display.startswith("thanos prune-model: ") and "  recipe thanos_v15: Vocabulary: " in display
    assert f"written: {out} (" in display and "vocab:0.15 kept " in display, display
    result, dense = evaluation["perplexity"], evaluation["dense"]["perplexity"]
    assert (result["text_tokens"], result["bytes"]) == (dense["text_tokens"], dense["bytes"]) and dense[
        "bytes"
    ]
    tokenizer = AutoTokenizer.from_pretrained(pruned["dense"])
    ids = torch.tensor(tokenizer(text.read_text()).input_ids[: dense["windows"] * 16]).view(-1, 16)
    model = AutoModelForCausalLM.from_pretrained(pruned["dense"], dtype=torch.float32)
    with torch.no_grad():
        log_probs = model(ids).logits[:, :-1].double().log_softmax(-1)
    kept_mass = log_probs[..., kept].logsumexp(-1).sum().item()
    assert kept_mass < 0
    assert result["total_nll"] == pytest.approx(dense["total_nll"] + kept_mass, rel=1e-6)
    assert result["bits_per_byte"] < dense["bits_per_byte"]
    assert result["bits_per_byte"] == pytest.approx(result["total_nll"] / math.log(2) / result["bytes"])
    rate = f"{result['bits_per_byte']:.3f}** bits per byte (the dense model {dense['bits_per_byte']:.3f})"
    assert rate in (out / "README.md").read_text()
    assert rate.replace("**", "") in stream.getvalue() and "done: perplexity (dense)" in stream.getvalue()
    # the same call again writes nothing and evaluates only what it did not: zero-shot accuracy, kept too
    weights, task_dir = (out / "model.safetensors").stat().st_mtime_ns, toy_task(tmp_path / "tasks", 6)[0]
    for run in range(2):
        again = io.StringIO()
        evaluation = prune_model(
            pruned["dense"], "thanos", "vocab:0.15", out=out, calibration=text, nsamples=4, seqlen=32,
            device="cpu", evaluate="ppl,zeroshot", ppl_source=text, ppl_seqlen=16, tasks=[tasks.TASK_NAME],
            include_path=task_dir, stream=again,
        )["evaluation"]  # fmt: skip
        shown = again.getvalue()
        assert "done: choose the tokens" not in shown and "done: perplexity" not in shown, shown
        assert ("nothing to do: every step finished in an earlier run" in shown) == (run == 1), shown
        assert ("done: zero-shot tasks (dense)" in shown) == (run == 0), shown
        assert rate.replace("**", "") in shown and "zero-shot mean accuracy" in shown
    assert (out / "model.safetensors").stat().st_mtime_ns == weights
    assert evaluation["zeroshot"]["tasks"][tasks.TASK_NAME] and evaluation["dense"]["zeroshot"]["tasks"]
    assert tasks.TASK_NAME in (out / "README.md").read_text()


@pytest.mark.slow
def test_vllm_parses_the_config_and_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """vLLM's config parser (``ModelConfig``) reads each kind's pruned model as the dense one's architecture
    with the kept vocabulary, and its tokenizer loader gives that many tokens and the renumbered eos id (one
    vLLM process reads the four models: its import is most of its seconds)."""
    cases = [pruned_case(kind, tmp_path_factory) for kind in KINDS]
    reads = vllm_reads(*(case[name] for case in cases for name in ("out", "dense")))
    for case, read, dense_read in zip(cases, reads[::2], reads[1::2], strict=True):
        report = case["report"]
        config = json.loads((case["out"] / "config.json").read_text())
        assert read == {
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": report["tokens_kept"],
            "tokenizer": report["tokens_kept"],
            "eos": config["eos_token_id"],
        }, case["kind"]
        dense = json.loads((case["dense"] / "config.json").read_text())["vocab_size"]
        assert dense_read["vocab_size"] == dense > report["tokens_kept"], case["kind"]


@pytest.mark.slow
def test_llama_cpp_converts_or_the_card_says_why(pruned: dict[str, Any], tmp_path: Path) -> None:
    """llama.cpp's converter at ``--outtype q8_0``: the byte-fallback vocabulary converts, every 2-D weight
    in the type the dense model's conversion gives it, the embedding with the kept rows; the byte-level one
    stops at its pre-tokenizer check with the hash the card and the report name (the line to add)."""

    report = json.loads((pruned["out"] / "vocabulary.json").read_text())
    if pruned["kind"] == "byte-fallback":
        types, shapes = {}, {}
        for name in ("dense", "out"):
            with converted_to_gguf(pruned[name], tmp_path / f"{name}.gguf", "--outtype", "q8_0") as (
                _,
                reader,
            ):
                weights = [t for t in reader.tensors if len(t.shape) == 2]
                types[name] = {t.name: t.tensor_type.name for t in weights}
                shapes[name] = {t.name: [int(d) for d in t.shape] for t in weights}
        assert types["out"] == types["dense"] and set(types["dense"].values()) == {"Q8_0"}
        assert shapes["out"]["token_embd.weight"] == [32, report["tokens_kept"]]
        assert "llama_cpp_hash" not in report
        return
    run = run_llama_cpp_converter(pruned["out"], tmp_path / "out.gguf", "--outtype", "q8_0")
    pruned_hash = report["llama_cpp_hash"]["pruned"]
    assert run.returncode != 0 and "BPE pre-tokenizer was not recognized" in run.stderr
    assert f"chkhsh:  {pruned_hash}" in run.stderr
    line = f'`if chkhsh == "{pruned_hash}": res = NAME`'
    assert line in (pruned["out"] / "README.md").read_text()
    dense_run = run_llama_cpp_converter(pruned["dense"], tmp_path / "dense.gguf", "--vocab-only")
    assert f"chkhsh:  {report['llama_cpp_hash']['dense']}" in dense_run.stderr  # unknown for a tiny model


def test_a_vocabulary_pruned_twice_names_the_dense_models_hash(tmp_path: Path) -> None:
    """The card of a byte-level vocabulary pruned again tells llama.cpp to treat its pre-tokenizer as the
    dense model's: by the dense model's hash (the one llama.cpp knows), not the once-pruned model's."""
    dense = build_model(tmp_path / "dense", "byte-level")
    once = prune_vocabulary(dense, tmp_path / "once", parse_sparsity("vocab:0.15"), CHOOSING, "prose")
    again = prune_vocabulary(
        tmp_path / "once", tmp_path / "again", parse_sparsity("vocab:0.1"), CHOOSING, "x"
    )
    dense_hash = once["llama_cpp_hash"]["dense"]
    assert again["llama_cpp_hash"]["dense"] == dense_hash != once["llama_cpp_hash"]["pruned"]
    assert again["llama_cpp_hash"]["pruned"] != once["llama_cpp_hash"]["pruned"]
    assert f"the dense model's hash `{dense_hash}`" in (tmp_path / "again" / "README.md").read_text()
