"""The user's side: every error about the user's data names the file and the fix, and a published model
owns its bytes (``thanos.stages.publish``, ``thanos.files.digests``). Unit level: real files, real tokenizers,
real lm-eval task loading; the end-to-end cases are in test_prune_model.py and test_faults.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import make_tiny_model, write_corpus

from thanos.cli import describe
from thanos.data.calibration import sample_windows
from thanos.data.textdata import check_files, read_documents
from thanos.errors import PathError
from thanos.evaluation.perplexity import load_eval_text, tokenize_windows
from thanos.evaluation.zeroshot import load_tasks, task_manager
from thanos.files import digests
from thanos.models import check_tokenizer_files, load_config, load_tokenizer
from thanos.stages.publish import publish


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models"), "llama")


def _line(err: pytest.ExceptionInfo) -> str:
    """What the CLI prints after ``ERROR:``."""
    return describe(err.value)


@pytest.mark.parametrize(
    ("name", "content", "message", "fix"),
    [
        ("bytes.txt", b"\x93\x94 not text" * 4, "not UTF-8 text: byte 0x93 at offset 0", "give UTF-8 text"),
        ("calib.jsonl", b'{"text": "a"}\n{"text": oops}\n', "line 2 is not JSON", "one JSON object per line"),
        ("calib.jsonl", b'{"body": "a"}\n', "line 1 has no 'text' field", "--text-field"),
        ("corpus.csv", b"text\nhello\n", "unsupported text file type '.csv'", "rename a plain text file"),
        ("data.parquet", b"not parquet", "cannot read as parquet", "give a parquet file"),
        ("empty.txt", b"\n\n\n", "holds no text", ".txt/.raw"),
    ],
)
def test_bad_text_data_names_the_file(tmp_path, name, content, message, fix):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(PathError) as err:
        read_documents(path)
    line = _line(err)
    assert message in line and f"({path})" in line and fix in line, line


def test_check_files_reads_only_the_head(tmp_path):
    good = tmp_path / "big.jsonl"
    good.write_text("".join(json.dumps({"text": "x" * 100}) + "\n" for _ in range(30_000)))  # 3 MB
    check_files(good, head=1 << 16)
    bad = tmp_path / "late.txt"
    bad.write_bytes(b"a" * 200 + b"\xff")
    check_files(bad, head=100)  # the bad byte lies beyond the head: only read_documents sees it
    with pytest.raises(PathError, match="offset 200"):
        check_files(bad)
    with pytest.raises(PathError, match="line 1 has no 'body' field"):
        check_files(good, field="body")


def test_a_directory_without_text_files_is_named(tmp_path):
    (tmp_path / "notes.md").write_text("words")
    with pytest.raises(PathError) as err:
        read_documents(tmp_path)
    assert "no text files in the directory (looked for .txt" in _line(err) and f"({tmp_path})" in _line(err)
    with pytest.raises(PathError) as err:  # it said "no text files in the directory"
        read_documents("/dev/null")
    assert _line(err).startswith("not a file nor a directory (/dev/null); give .txt"), _line(err)


def test_too_short_calibration_says_what_would_work(model_dir, tmp_path):
    tokenizer = load_tokenizer(model_dir)
    corpus = write_corpus(tmp_path / "short.jsonl", docs=3, words=10)
    documents = read_documents(corpus)
    lengths = [len(tokenizer(d)["input_ids"]) for d in documents]
    with pytest.raises(PathError) as err:
        sample_windows(documents, tokenizer, 4, 64, source=corpus)
    line = _line(err)
    assert f"3 document(s), {sum(lengths)} tokens in all, the longest {max(lengths)} ({corpus})" in line
    assert f"set seqlen to {max(lengths) - 1} or less" in line
    # the advice works: that seqlen samples windows
    assert sample_windows(documents, tokenizer, 4, max(lengths) - 1).shape == (4, max(lengths) - 1)


def test_perplexity_text_errors_name_the_file(model_dir, tmp_path):
    binary = tmp_path / "wiki.test.raw"
    binary.write_bytes(b"\xff\xfe\x00 binary")
    with pytest.raises(PathError, match=r"not UTF-8 text.*wiki\.test\.raw"):
        load_eval_text(str(binary))
    short = tmp_path / "short.txt"
    short.write_text("the cat\n")
    text = load_eval_text(str(short))
    with pytest.raises(PathError) as err:
        tokenize_windows(load_tokenizer(model_dir), text.text, 512, text.dataset)
    assert f"fewer than one window of seqlen=512 ({short}); use a longer text, or --seqlen" in _line(err)


def test_model_directory_errors_name_the_directory_and_the_files(model_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    for file in broken.glob("tokenizer*"):
        file.unlink()
    with pytest.raises(PathError, match="no tokenizer files in the model directory") as err:
        check_tokenizer_files(broken)
    assert f"({broken})" in _line(err) and "tokenizer.json or tokenizer.model" in _line(err)
    with pytest.raises(PathError, match="no tokenizer files"):
        load_tokenizer(broken)
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(PathError, match=r"tokenizer\.json is not valid JSON .*restore it from the original"):
        load_tokenizer(broken)
    (broken / "tokenizer.json").write_text('{"model": {"type": "no such model"}}')
    with pytest.raises(PathError, match=r"cannot load the tokenizer .*copy the base model's tokenizer"):
        load_tokenizer(broken)
    (broken / "config.json").write_bytes(b"\xff\x00")
    with pytest.raises(PathError, match=r"config\.json is not valid JSON"):
        load_config(broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"no config.json in the model directory \(the directory is empty"
    ):
        load_config(empty)


def test_zero_shot_task_files_are_named(tmp_path):
    (tmp_path / "broken.yaml").write_text("task: broken\n  bad: [\n")
    with pytest.raises(ValueError, match=r"task files that could not be read there: .*broken\.yaml"):
        task_manager(["broken"], str(tmp_path))
    (tmp_path / "broken.yaml").unlink()
    (tmp_path / "mytask.yaml").write_text(
        "task: mytask\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'missing.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{q}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: label\n"
    )
    manager = task_manager(["mytask"], str(tmp_path))
    with pytest.raises(PathError) as err:
        load_tasks(manager, ["mytask"])
    line = _line(err)
    assert "lm-eval task 'mytask' cannot load its documents" in line and "missing.jsonl" in line
    assert f"({tmp_path / 'mytask.yaml'})" in line


# --- publishing: a verified copy ------------------------------------------------------------------------


def _assembled(root: Path) -> Path:
    """A model directory as assemble leaves it: files, then the report with their digests."""
    model = root / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(os.urandom(300_000))
    (model / "config.json").write_text('{"model_type": "llama"}\n')
    (model / "README.md").write_text("card\n")
    (model / digests.REPORT).write_text(json.dumps({"files": digests.record(model)}))
    return model


def test_publish_copies_and_verifies(tmp_path):
    model = _assembled(tmp_path)
    out = tmp_path / "out"
    assert publish(model, out, {"README.md": "new card\n"}) == ["new"]
    assert os.stat(out / "model.safetensors").st_ino != os.stat(model / "model.safetensors").st_ino
    assert (out / "README.md").read_text() == "new card\n"
    assert publish(model, out, {"README.md": "new card\n"}) == []  # unchanged: left alone
    with open(out / "model.safetensors", "r+b") as handle:  # an edit of the output ...
        handle.write(b"\x00" * 16)
    assert digests.differences(model, digests.recorded(model)) == []  # ... does not reach the source
    assert publish(model, out, {"README.md": "new card\n"}) == [
        "model.safetensors was changed (sha256 differs from the one recorded when it was written)"
    ]
    assert (out / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()


def test_publish_keeps_the_users_files_beside_the_model_and_not_stray_weights(tmp_path):
    """What a user puts in --out beside the model (notes, evaluation results) is theirs: no difference, kept
    when the model is written again; weights not of the model are not kept (vLLM reads every
    ``*.safetensors`` of a directory)."""
    model = _assembled(tmp_path)
    out = tmp_path / "out"
    publish(model, out)
    (out / "notes.txt").write_text("mine\n")
    (out / "eval").mkdir()
    (out / "eval" / "ppl.json").write_text("{}\n")
    assert publish(model, out) == []  # left alone
    (out / "stray.safetensors").write_bytes(b"x")
    (out / "search.json").write_text("{}\n")  # a size's record: the tool's, not kept for another model
    assert publish(model, out) == ["search.json was added", "stray.safetensors was added"]
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "config.json", "eval", "model.safetensors", "notes.txt", digests.REPORT
    ]  # fmt: skip
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "eval" / "ppl.json").read_text() == "{}\n"


def test_publish_refuses_a_changed_source_and_writes_nothing(tmp_path):
    model = _assembled(tmp_path)
    with open(model / "model.safetensors", "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00" * 16)
    with pytest.raises(PathError) as err:
        publish(model, tmp_path / "out")
    assert f"({model / 'model.safetensors'}); delete {model} and run the same command again" in _line(err)
    assert not (tmp_path / "out").exists()
    (model / "extra.bin").write_bytes(b"x")
    with pytest.raises(PathError, match="extra.bin was added"):
        publish(model, tmp_path / "out")
    (model / digests.REPORT).write_text("{}")
    with pytest.raises(PathError, match="assembled without file digests"):
        publish(model, tmp_path / "out")


def test_edited_finds_changes_by_stat_then_sha256(tmp_path):
    model = _assembled(tmp_path)
    assert digests.edited(model) == []
    written = (model / digests.REPORT).stat().st_mtime_ns
    os.utime(model / "config.json", ns=(written + 10**9, written + 10**9))  # touched: same bytes
    assert digests.edited(model) == []
    (model / "config.json").write_text('{"model_type": "qwen2"}\n')  # same size, new content
    os.utime(model / "config.json", ns=(written + 10**9, written + 10**9))
    assert digests.edited(model) == [
        "config.json was changed (sha256 differs from the one recorded when it was written)"
    ]
    (model / "README.md").unlink()
    assert "README.md is missing" in digests.edited(model)
    assert digests.edited(tmp_path / "nowhere") == []  # not assembled yet: nothing to check
