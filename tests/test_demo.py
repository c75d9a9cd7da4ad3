"""The embedded offline demo: data from the gensim wheel, the lm-eval task, the demo model trainer.

The wheel is fetched once per session with pip (PyPI) unless THANOS_GENSIM_WHEEL points at a local copy.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from helpers.terminal import thanos_as_terminal

from thanos.cli import main
from thanos.data.textdata import read_documents
from thanos.demo import splits, tasks, wikidump


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, wheel) -> Path:
    out = tmp_path_factory.mktemp("demo") / "data"
    assert main(["demo-data", "--out-dir", str(out), "--wheel", str(wheel), "--seed", "0"]) == 0
    return out


def test_wheel_is_pinned(wheel):
    assert wikidump.verify_wheel(wheel) in wikidump.KNOWN_WHEELS
    assert len(wikidump.read_dump(wheel)) == 1695871


def test_wheel_cache_is_reused(wheel, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / wikidump.WHEEL_NAME).write_bytes(Path(wheel).read_bytes())
    # a cached copy is verified, not downloaded again
    assert wikidump.fetch_wheel(cache) == cache / wikidump.WHEEL_NAME
    assert sorted(p.name for p in cache.iterdir()) == [wikidump.WHEEL_NAME]
    (cache / wikidump.WHEEL_NAME).write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="sha256"):
        wikidump.fetch_wheel(cache)


def test_wrong_wheel_is_refused(tmp_path):
    fake = tmp_path / "gensim-fake.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr(wikidump.DUMP_MEMBER, b"not the dump")
    with pytest.raises(ValueError, match="expected"):
        wikidump.read_dump(fake)
    assert main(["demo-data", "--out-dir", str(tmp_path / "out"), "--wheel", str(fake)]) == 2
    assert (
        main(["demo-data", "--out-dir", str(tmp_path / "out"), "--wheel", str(tmp_path / "missing.whl")]) == 2
    )
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_wikitext_to_text_removes_markup():
    wikitext = """{{Infobox thing|name=X}}
'''Alpha''' is a [[Greek alphabet|letter]] used in [[mathematics]].<ref>{{cite book|title=Y}}</ref> It has a
long history, described by many authors over several centuries.<!-- hidden -->

[[File:Alpha.png|thumb|A caption that must go]]
{| class="wikitable"
| cell one || cell two
|}
* a list item that is not prose at all
== See also ==
* [[Beta]] and more words to reach the paragraph minimum length
== History ==
The letter was adopted from the Phoenician aleph &amp; kept its form for a very long time.
[[Category:Letters]]
[[de:Alpha]]
"""
    text = wikidump.wikitext_to_text(wikitext)
    paragraphs = text.split("\n\n")
    assert paragraphs[0] == (
        "Alpha is a letter used in mathematics. It has a long history, described by many authors over "
        "several centuries."
    )
    assert (
        paragraphs[1]
        == "The letter was adopted from the Phoenician aleph & kept its form for a very long time."
    )
    assert len(paragraphs) == 2
    for junk in ("Infobox", "cite", "caption", "cell", "list item", "Beta", "Category", "de:", "hidden"):
        assert junk not in text


def test_demo_data_outputs(data_dir):
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert manifest["source"]["member_sha256"] == wikidump.DUMP_SHA256
    assert "CC BY-SA" in manifest["source"]["license"]
    counts = {name: manifest["splits"][name]["articles"] for name in splits.SPLITS}
    assert sum(counts.values()) == manifest["articles"] >= 90
    assert counts["train"] > counts["test"] >= 8 and counts["calib"] >= 8
    titles = [set(manifest["splits"][name]["titles"]) for name in splits.SPLITS]
    assert not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    for name in splits.SPLITS:
        path = data_dir / f"{name}.jsonl"
        docs = read_documents(path)
        assert len(docs) == counts[name]
        assert all("[[" not in d and "{{" not in d and "<ref" not in d for d in docs)
        record = json.loads(path.read_text().splitlines()[0])
        assert set(record) == {"title", "text"}
    assert manifest["splits"]["test"]["words"] > 20000
    assert manifest["task"]["docs"] >= 200


def test_demo_data_is_deterministic(data_dir, wheel, tmp_path):
    """Same split and task from the same wheel; another seed gives another split."""
    articles = wikidump.extract_articles(wikidump.read_dump(wheel))
    parts = splits.split_articles(articles, seed=0)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    for name in splits.SPLITS:
        splits.write_jsonl(tmp_path / f"{name}.jsonl", parts[name])
        assert (
            splits.split_stats(tmp_path / f"{name}.jsonl", parts[name])["sha256"]
            == (manifest["splits"][name]["sha256"])
        )
    docs = tasks.build_docs(parts["test"], seed=0)
    task_file = data_dir / "tasks" / tasks.TASK_NAME / f"{tasks.TASK_NAME}.jsonl"
    assert [json.loads(line) for line in task_file.read_text().splitlines()] == docs
    other = splits.split_articles(articles, seed=1)
    assert [a.title for a in other["test"]] != [a.title for a in parts["test"]]


def _same_words(gold: str, choice: str) -> bool:
    """The same words, and the gold's final punctuation at the end of both."""
    n = min(3, len(gold) - len(gold.rstrip(".!?\"')")))
    end = gold[len(gold) - n :]
    return choice.endswith(end) and sorted(choice[: len(choice) - n].split()) == sorted(
        gold[: len(gold) - n].split()
    )


def test_task_documents(data_dir):
    """Every document: four distinct choices, exactly one of them a sentence of a test article, the three
    others the same words in another order; no sentence from the train split."""
    task_file = data_dir / "tasks" / tasks.TASK_NAME / f"{tasks.TASK_NAME}.jsonl"
    docs = [json.loads(line) for line in task_file.read_text().splitlines()]
    assert len(docs) == 300  # the default --task-docs
    test_text = "\n".join(read_documents(data_dir / "test.jsonl"))
    labels = [doc["label"] for doc in docs]
    assert set(labels) == {0, 1, 2, 3}
    for doc in docs:
        assert set(doc) == {"id", "title", "choices", "label"}
        assert len(doc["choices"]) == 4 and len(set(doc["choices"])) == 4
        gold = doc["choices"][doc["label"]]
        assert [c for c in doc["choices"] if c in test_text] == [gold], doc
        assert all(_same_words(gold, c) for c in doc["choices"]), doc
    train_text = "\n".join(read_documents(data_dir / "train.jsonl"))
    assert sum(doc["choices"][doc["label"]] in train_text for doc in docs) == 0


def test_word_order_task_builder():
    """Deterministic for a seed, another seed gives other documents; the distractors (two distant words
    swapped, two shuffles) keep the words and the final punctuation."""
    text = "\n\n".join(
        " ".join(f"Sentence {i} of paragraph {p} tells of the river town and its old mill." for i in range(5))
        for p in range(6)
    )
    articles = [wikidump.Article(title=f"A{k}", text=text.replace("river", f"river{k}")) for k in range(3)]
    docs = tasks.build_docs(articles, seed=0)
    assert docs == tasks.build_docs(articles, seed=0)
    assert docs != tasks.build_docs(articles, seed=1)
    assert len(docs) == 3 * 6 * 5  # every sentence
    for doc in docs:
        gold = doc["choices"][doc["label"]]
        assert gold.startswith("Sentence ") and gold.endswith("old mill.")
        others = [c for i, c in enumerate(doc["choices"]) if i != doc["label"]]
        assert len(set(others)) == 3 and gold not in others
        words = gold[:-1].split()
        for c in others:
            assert c.endswith(".") and sorted(c[:-1].split()) == sorted(words)
        moved = [
            [k for k, (a, b) in enumerate(zip(words, c[:-1].split(), strict=True)) if a != b] for c in others
        ]
        assert any(len(m) == 2 and m[1] - m[0] >= 2 for m in moved)  # two distant words swapped
    # a sentence with too few distinct words yields no document rather than a duplicate choice
    assert tasks._word_order_variants("yes yes yes yes yes yes.", random.Random(0)) is None


def test_split_sentences_keeps_abbreviations():
    text = 'Dr. Smith met J. R. Doe in St. Louis in 1901. They talked. "It works." Then it ended (c. 1910).'
    assert tasks.split_sentences(text) == [
        "Dr. Smith met J. R. Doe in St. Louis in 1901.",
        "They talked.",
        '"It works."',
        "Then it ended (c. 1910).",
    ]


def _tiny_train_args(data_dir: Path, out: Path, steps: int = 12) -> list[str]:
    return [
        "train-demo",
        *("--data-dir", str(data_dir), "--out", str(out), "--steps", str(steps), "--device", "cpu"),
        *("--vocab-size", "512", "--hidden-size", "64", "--intermediate-size", "128", "--num-layers", "4"),
        *("--num-heads", "4", "--num-kv-heads", "2", "--max-position-embeddings", "128"),
        *("--seq-len", "64", "--batch-size", "4", "--warmup-steps", "2", "--log-every", "2"),
        *("--eval-batch-size", "64"),
    ]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, data_dir) -> Path:
    out = tmp_path_factory.mktemp("model") / "model"
    assert main(_tiny_train_args(data_dir, out)) == 0
    return out


def test_train_demo_writes_loadable_model(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = json.loads((tiny_model / "train_report.json").read_text())
    assert report["steps"] == 12 and len(report["loss_curve"]) == 6
    assert report["held_out"]["seqlen"] == 128 and report["held_out"]["ppl"] > 1
    assert report["model"]["num_key_value_heads"] < report["model"]["num_attention_heads"]
    assert (tiny_model / "model.safetensors").is_file()
    # no temporary left, nor the training's state (kept every 20 steps by default: none in 12)
    assert [p.name for p in tiny_model.parent.iterdir()] == ["model"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 4
    assert sum(p.numel() for p in model.parameters()) == report["model"]["parameters"]
    ids = tokenizer("Anarchism is a political philosophy.", return_tensors="pt")["input_ids"]
    assert ids[0, 0].item() == tokenizer.bos_token_id
    assert tokenizer.decode(ids[0], skip_special_tokens=True) == "Anarchism is a political philosophy."
    assert tokenizer.pad_token is not None and tokenizer.eos_token is not None
    with torch.no_grad():
        assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tokenizer))


def test_train_demo_is_deterministic(tiny_model, data_dir, tmp_path):
    """The same options train the same weights; --no-held-out (the workflow's: it evaluates the model in
    its own job) only leaves the final held-out perplexity out of the report."""
    from safetensors.torch import load_file

    out = tmp_path / "again"
    assert main([*_tiny_train_args(data_dir, out), "--no-held-out"]) == 0
    first, second = load_file(tiny_model / "model.safetensors"), load_file(out / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    a = json.loads((tiny_model / "train_report.json").read_text())
    b = json.loads((out / "train_report.json").read_text())
    assert a["loss_curve"] == b["loss_curve"]
    assert a["held_out"]["ppl"] > 1 and b["held_out"] is None


def test_train_demo_stopped_resumes_to_the_same_bytes(tiny_model, data_dir, tmp_path, caplog):
    """A training stopped by Ctrl-C keeps its state (every ``--save-every`` steps) beside ``--out`` and says
    so; the same command resumes there and writes the model and loss curve of the uninterrupted run
    (``tiny_model``), then deletes the state; a state of other options is said and not resumed."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "stopped"
    state = tmp_path / "stopped.train-state"
    args = [*_tiny_train_args(data_dir, out), "--save-every", "2"]
    proc = subprocess.Popen(thanos_as_terminal(*args), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not (state / "run.json").is_file():
        time.sleep(0.01)
    assert proc.poll() is None, "the training ended before it could be stopped"
    proc.send_signal(signal.SIGINT)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]  # the command's last line says what it kept, and nothing else
    assert last.startswith("ERROR: interrupted; the state after step "), stderr[-3000:]
    assert str(state) in last and "the same command resumes there" in last, last
    assert "what was finished is kept" not in stderr, stderr[-3000:]
    assert not out.exists() and (state / "state.pt").is_file()
    kept = torch.load(state / "state.pt", weights_only=True)["step"]
    assert kept % 2 == 0 and 2 <= kept < 12

    # another training's state (other steps) is not resumed: said, and that run starts over (on a few of the
    # documents: its tokenizer trained in a moment)
    few = tmp_path / "few"
    few.mkdir()
    for split in ("train.jsonl", "test.jsonl"):
        (few / split).write_text("".join((data_dir / split).read_text().splitlines(keepends=True)[:40]))
    other = tmp_path / "other"
    shutil.copytree(state, tmp_path / "other.train-state")
    with caplog.at_level(logging.INFO):
        assert main([*_tiny_train_args(few, other, steps=2), "--no-held-out"]) == 0
    assert "is not resumed (option steps 12 -> 2): started over" in caplog.text, caplog.text
    assert "resumed at step" not in caplog.text and not (tmp_path / "other.train-state").exists()

    run = subprocess.run([sys.executable, "-m", "thanos", *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"resumed at step {kept} of 12" in run.stderr, run.stderr[-3000:]
    assert (out / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()
    report = json.loads((out / "train_report.json").read_text())
    assert report["loss_curve"] == json.loads((tiny_model / "train_report.json").read_text())["loss_curve"]
    assert not state.exists()


def test_train_demo_rejects_bad_options(data_dir, tmp_path):
    out = tmp_path / "bad"
    assert main([*_tiny_train_args(data_dir, out), "--num-kv-heads", "3"]) == 2
    assert main([*_tiny_train_args(tmp_path / "nodata", out)]) == 2
    assert not out.exists()


def test_task_runs_in_lm_eval(data_dir, tiny_model):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # the local directory alone, as the zero-shot stage indexes it (the built-in tasks take seconds more)
    manager = TaskManager(include_path=str(data_dir / "tasks"), include_defaults=False)
    assert tasks.TASK_NAME in manager.all_tasks
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    lm = HFLM(
        pretrained=model, tokenizer=AutoTokenizer.from_pretrained(tiny_model), batch_size=8, device="cpu"
    )
    out = lm_eval.simple_evaluate(model=lm, tasks=[tasks.TASK_NAME], task_manager=manager, limit=8)
    result = out["results"][tasks.TASK_NAME]
    assert 0 <= result["acc,none"] <= 1 and 0 <= result["acc_norm,none"] <= 1
    assert out["versions"][tasks.TASK_NAME] == tasks.TASK_VERSION
