"""``thanos evaluate``: perplexity and zero-shot of one model loaded once give the files ``thanos perplexity``
and ``thanos zeroshot`` give; the workflow runs it as one job per evaluated model when both are enabled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_tiny_model, snakemake, workflow_config, write_corpus
from helpers.tasks import toy_task

from thanos.cli import main
from thanos.demo import tasks

TIMING = ("seconds",)


def _without_timing(path: Path) -> dict:
    return {key: value for key, value in json.loads(path.read_text()).items() if key not in TIMING}


def test_evaluate_equals_the_two_commands(tmp_path):
    model = make_tiny_model(tmp_path, "llama")
    task_dir = toy_task(tmp_path / "tasks", 12)[0]
    text = write_corpus(tmp_path / "heldout.jsonl")
    ppl = ["--model", str(model), "--source", str(text), "--seqlen", "32", "--device", "cpu"]
    zs = ["--tasks", tasks.TASK_NAME, "--include-path", str(task_dir)]
    assert (
        main(["perplexity", *ppl, "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "p.json")])
        == 0
    )
    z_args = ["--model", str(model), *zs, "--batch-size", "4", "--device", "cpu", "--offline"]
    assert main(["zeroshot", *z_args, "--out", str(tmp_path / "z.json")]) == 0
    both = [*ppl, "--ppl-batch-size", "2", *zs, "--zeroshot-batch-size", "4", "--offline"]
    out = ["--ppl-out", str(tmp_path / "p2.json"), "--zeroshot-out", str(tmp_path / "z2.json")]
    assert main(["evaluate", *both, *out]) == 0
    assert _without_timing(tmp_path / "p.json") == _without_timing(tmp_path / "p2.json")
    assert _without_timing(tmp_path / "z.json") == _without_timing(tmp_path / "z2.json")


@pytest.mark.slow
def test_workflow_evaluates_each_model_in_one_job(tmp_path):
    text = write_corpus(tmp_path / "text.jsonl", docs=60)
    task_dir = toy_task(tmp_path / "tasks", 12)[0]
    models = {
        "llama": {"path": "models/llama", "tiny": {"family": "llama", "hidden_size": 32, "num_blocks": 2}}
    }
    recipes = {"magnitude_u50": {"method": "magnitude", "sparsity": 0.5}}
    config = workflow_config(
        text,
        models,
        recipes,
        perplexity={"enabled": True, "source": str(text), "seqlen": 32, "batch_size": 2},
        zeroshot={
            "enabled": True,
            "tasks": [tasks.TASK_NAME],
            "include_path": str(task_dir),
            "offline": True,
        },
        evaluate_dense=True,
    )
    snakemake(tmp_path / "run", config)
    results = tmp_path / "run" / "results" / "llama"
    for variant in ("dense", "magnitude_u50"):
        assert json.loads((results / variant / "eval" / "perplexity.json").read_text())["ppl"] > 1
        assert (
            tasks.TASK_NAME in json.loads((results / variant / "eval" / "zeroshot.json").read_text())["tasks"]
        )
        assert (tmp_path / "run" / "results" / "logs" / "llama" / variant / "evaluate.log").is_file()
    dry = snakemake(tmp_path / "run", config, "-n")
    assert "Nothing to be done" in dry.stdout + dry.stderr
    # the batch sizes change no result: changed, no evaluation runs again (each reran every model's)
    faster = dict(config, perplexity=dict(config["perplexity"], batch_size=4))
    faster["zeroshot"] = dict(config["zeroshot"], batch_size=3)
    dry = snakemake(tmp_path / "run", faster, "-n")
    assert "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-2000:]
    # a misspelt task name is refused before any job: the evaluate jobs it would rerun had their outputs
    # (the perplexity's too) deleted by Snakemake before they failed on it
    finished = {path: path.read_bytes() for path in results.rglob("eval/*.json")}
    typo = dict(config, zeroshot=dict(config["zeroshot"], tasks=[tasks.TASK_NAME[:-1]]))
    refused = snakemake(tmp_path / "run", typo, check=False)
    said = refused.stdout + refused.stderr
    assert (
        refused.returncode != 0
        and f"zeroshot.tasks: unknown lm-eval task(s): '{tasks.TASK_NAME[:-1]}'" in said
    )
    assert f"(did you mean {tasks.TASK_NAME}" in said and "evaluate" not in said.split("ConfigError")[0], said
    assert {path: path.read_bytes() for path in results.rglob("eval/*.json")} == finished
