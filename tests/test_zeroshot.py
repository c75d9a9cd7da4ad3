"""Zero-shot: real lm-eval, offline, on a local toy multiple-choice task and a tiny random Llama."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
import torch

from thanos.cli import main

WORDS = [f"w{i}" for i in range(60)] + ["the", "of", "and", "=", ",", "."]
TASK_YAML = """task: toy_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 3.0
"""


def _tiny_model(root: Path) -> Path:
    """A tiny random LlamaForCausalLM + word-level tokenizer (BOS added like Llama's), saved to ``root``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def _toy_task(root: Path, n: int = 16) -> tuple[Path, list[dict]]:
    rng = random.Random(0)
    docs = []
    for i in range(n):
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
        choices = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for _ in range(3)]
        docs.append({"question": question, "choices": choices, "label": i % 3})
    root.mkdir(parents=True)
    data = root / "toy.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "toy_mc.yaml").write_text(TASK_YAML.format(data=data))
    return root, docs


def _hand_accuracy(model_dir: Path, docs: list[dict]) -> tuple[float, float]:
    """acc and acc_norm computed by hand: sum of log p(choice tokens | <s> question) per choice; argmax
    (acc) and argmax of the sum divided by the choice's length in characters (acc_norm, lm-eval's rule)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hits = hits_norm = 0
    for doc in docs:
        context = tokenizer(doc["question"]).input_ids
        scores = []
        for choice in doc["choices"]:
            cont = tokenizer(choice, add_special_tokens=False).input_ids
            ids = torch.tensor([context + cont])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
            scores.append(sum(float(logp[len(context) + j - 1, t]) for j, t in enumerate(cont)))
        norm = [s / len(" " + c) for s, c in zip(scores, doc["choices"], strict=True)]
        hits += int(max(range(3), key=scores.__getitem__) == doc["label"])
        hits_norm += int(max(range(3), key=norm.__getitem__) == doc["label"])
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
    tasks, docs = _toy_task(root / "tasks")
    return _tiny_model(root / "model"), tasks, docs


def test_zeroshot_offline_local_task(setup, tmp_path):
    model, tasks, docs = setup
    out = tmp_path / "eval" / "zeroshot.json"
    argv = ["zeroshot", "--model", str(model), "--tasks", "toy_mc", "--include-path", str(tasks)]
    rc = main([*argv, "--batch-size", "4", "--offline", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    task = result["tasks"]["toy_mc"]
    for key in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
        assert isinstance(task[key], float)
    assert task["samples"] == len(docs) and task["num_fewshot"] == 0
    acc, acc_norm = _hand_accuracy(model, docs)
    assert task["acc"] == pytest.approx(acc)
    assert task["acc_norm"] == pytest.approx(acc_norm)
    assert result["mean_acc"] == pytest.approx(acc)
    assert result["lm_eval_version"] and result["task_versions"] == {"toy_mc": 3.0}

    limited = tmp_path / "limited.json"
    assert main([*argv, "--limit", "5", "--offline", "--out", str(limited)]) == 0
    assert json.loads(limited.read_text())["tasks"]["toy_mc"]["samples"] == 5


def test_unknown_task_names_the_fix(setup, tmp_path, caplog):
    model, tasks, _ = setup
    argv = ["zeroshot", "--model", str(model), "--tasks", "toy_mc,piqaa", "--include-path", str(tasks)]
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
        evaluate_zeroshot(str(model), tasks="toy_mc", include_path=str(tmp_path / "none"))
