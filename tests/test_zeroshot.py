"""Zero-shot: real lm-eval, offline, on a local toy multiple-choice task and a tiny random Llama."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from helpers.tasks import toy_task

from thanos.cli import main
from thanos.demo import tasks


def _hand_accuracy(model_dir: Path, docs: list[dict]) -> tuple[float, float]:
    """acc and acc_norm computed by hand: sum of log p(choice tokens | <s>) per choice; argmax
    (acc) and argmax of the sum divided by the choice's length in characters (acc_norm, lm-eval's rule)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hits = hits_norm = 0
    for doc in docs:
        context = [tokenizer.bos_token_id]  # the task has no context: lm-eval scores from BOS on
        scores = []
        for choice in doc["choices"]:
            cont = tokenizer(choice, add_special_tokens=False).input_ids
            ids = torch.tensor([context + cont])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
            scores.append(sum(float(logp[len(context) + j - 1, t]) for j, t in enumerate(cont)))
        norm = [s / len(c) for s, c in zip(scores, doc["choices"], strict=True)]
        hits += int(max(range(len(scores)), key=scores.__getitem__) == doc["label"])
        hits_norm += int(max(range(len(norm)), key=norm.__getitem__) == doc["label"])
    return hits / len(docs), hits_norm / len(docs)


@pytest.fixture(autouse=True)
def _restore_offline_switches(monkeypatch):
    """``--offline`` flips process-wide switches; put them back after each test."""
    import sys

    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    for module, attrs in (
        ("huggingface_hub.constants", ["HF_HUB_OFFLINE"]),
        ("datasets.config", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"]),
    ):
        if module in sys.modules:
            for attr in attrs:
                monkeypatch.setattr(sys.modules[module], attr, getattr(sys.modules[module], attr))


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    root = tmp_path_factory.mktemp("zeroshot")
    task_dir, docs = toy_task(root / "tasks")
    return make_tiny_model(root, "llama"), task_dir, docs


def test_zeroshot_offline_local_task(setup, tmp_path):
    model, task_dir, docs = setup
    out = tmp_path / "eval" / "zeroshot.json"
    argv = ["zeroshot", "--model", str(model), "--tasks", tasks.TASK_NAME, "--include-path", str(task_dir)]
    rc = main([*argv, "--batch-size", "4", "--offline", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    task = result["tasks"][tasks.TASK_NAME]
    for key in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
        assert isinstance(task[key], float)
    assert task["samples"] == len(docs) and task["num_fewshot"] == 0
    acc, acc_norm = _hand_accuracy(model, docs)
    assert task["acc"] == pytest.approx(acc)
    assert task["acc_norm"] == pytest.approx(acc_norm)
    assert result["mean_acc"] == pytest.approx(acc)
    assert result["lm_eval_version"] and result["task_versions"] == {tasks.TASK_NAME: tasks.TASK_VERSION}

    limited = tmp_path / "limited.json"
    assert main([*argv, "--limit", "5", "--offline", "--out", str(limited)]) == 0
    assert json.loads(limited.read_text())["tasks"][tasks.TASK_NAME]["samples"] == 5


def test_nothing_of_lm_eval_reaches_the_terminal_past_the_log(setup, tmp_path):
    """In a directory outside any git repository, lm-eval's ``git describe`` wrote ``fatal: not a git
    repository`` to the process's stderr (a subprocess: past the redirection of the command's output)."""
    import os
    import subprocess
    import sys

    model, task_dir, _ = setup
    argv = ["zeroshot", "--model", str(model), "--tasks", tasks.TASK_NAME, "--include-path", str(task_dir)]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
    }
    command = [sys.executable, "-m", "thanos", *argv, "--limit", "2", "--offline", "--out", "z.json"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "not a git repository" not in run.stderr, run.stderr[-2000:]


def test_unknown_task_names_the_fix(setup, tmp_path, caplog):
    model, task_dir, _ = setup
    argv = [
        "zeroshot",
        "--model",
        str(model),
        "--tasks",
        f"{tasks.TASK_NAME},piqaa",
        "--include-path",
        str(task_dir),
    ]
    with caplog.at_level(logging.ERROR):
        rc = main([*argv, "--offline", "--out", str(tmp_path / "z.json")])
    assert rc == 2
    assert "unknown lm-eval task(s): 'piqaa'" in caplog.text
    assert "did you mean" in caplog.text and "piqa" in caplog.text
    assert "lm-eval ls tasks" in caplog.text and "--include-path" in caplog.text
    assert not (tmp_path / "z.json").exists()


def test_missing_include_path(setup, tmp_path):
    from thanos.evaluation.zeroshot import evaluate_zeroshot

    model, _, _ = setup
    with pytest.raises(FileNotFoundError, match="--include-path"):
        evaluate_zeroshot(str(model), tasks=tasks.TASK_NAME, include_path=str(tmp_path / "none"))


@pytest.mark.slow
def test_prune_model_evaluates_local_tasks(setup, tmp_path):
    """``prune-model --evaluate zeroshot --tasks T --include-path DIR``: a task defined in a local YAML, for
    the pruned and the dense model; a task found nowhere (a built-in task's name mistyped too) is refused
    before anything runs (the commands run in this process: ``thanos_here``)."""
    from conftest import thanos_here

    model, task_dir, _ = setup
    command = ["prune-model", "--model", str(model), "--method", "magnitude",
               "--sparsity", "0.5", "--device", "cpu", "--workdir", str(tmp_path / "work"),
               "--evaluate", "zeroshot", "--include-path", str(task_dir)]  # fmt: skip
    unknown = thanos_here(*command, "--tasks", "no_such_task", "--out", tmp_path / "x", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown lm-eval task(s): 'no_such_task'" in unknown.stderr
    # a built-in task's name mistyped, no local tasks: refused at the door too, not after the pruning
    typo = thanos_here(*command[:-2], "--tasks", "hellaswg", "--out", tmp_path / "x", cwd=tmp_path)
    assert typo.returncode == 2 and "'hellaswg' (did you mean hellaswag" in typo.stderr, typo.stderr[-2000:]
    assert not (tmp_path / "work").exists() and not (tmp_path / "x").exists()
    run = thanos_here(*command, "--tasks", tasks.TASK_NAME, "--out", tmp_path / "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "zero-shot mean accuracy" in run.stderr and "(the dense model " in run.stderr
    card = (tmp_path / "out" / "README.md").read_text()
    assert tasks.TASK_NAME in card


def test_task_names_checked_from_their_yamls_and_the_cached_index(tmp_path, monkeypatch):
    """``check_task_names`` (the workflow's config check, at every start) reads the names a local task
    directory's YAMLs define, and lm-eval's built-in names from this machine's cache, written once per
    lm-eval version; a misspelt one is refused with the closest names, as ``task_manager`` refuses it."""
    from thanos.errors import KeyWords, OptionError
    from thanos.evaluation import zeroshot

    task_dir = toy_task(tmp_path / "tasks", 4)[0]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    zeroshot.check_task_names([tasks.TASK_NAME], str(task_dir))  # its YAML: no cache, no index
    assert not (tmp_path / "cache").exists()
    zeroshot.check_task_names(["piqa", tasks.TASK_NAME], str(task_dir))  # a built-in name: the cache
    (cached,) = (tmp_path / "cache" / "thanos-prune").glob("lm-eval-*-tasks.json")
    assert "piqa" in json.loads(cached.read_text()) and "hellaswag" in json.loads(cached.read_text())
    cached.write_text(json.dumps(["piqa"]))  # read from the cache from now on, not indexed again
    with pytest.raises(OptionError) as refused:
        zeroshot.check_task_names(["hellaswag", tasks.TASK_NAME[:-1]], str(task_dir))
    said = refused.value.words(KeyWords("zeroshot"))
    assert said.startswith("zeroshot.tasks: unknown lm-eval task(s): 'hellaswag'; ")
    assert f"'{tasks.TASK_NAME[:-1]}' (did you mean {tasks.TASK_NAME}?)" in said
    assert f"or under zeroshot.include_path: {task_dir}" in said
