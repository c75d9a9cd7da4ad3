"""The smoke config (workflow/configs/smoke.yaml) end to end with the real snakemake, as a user runs it:
demo data, a tiny random Llama, every method, perplexity, lm-eval zero-shot on the local demo task, the
tables with the paper's orderings printed at the end, the figures and ``snakemake --report``; then a second
run finds nothing to do. Its jobs run in the pytest process's warm worker (``shared_worker``), as the other
tests' runs do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import run_snakemake, shared_worker, snakemake_command

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "workflow" / "configs" / "smoke.yaml"

pytestmark = pytest.mark.slow


def _snakemake(workdir: Path, *extra: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = snakemake_command(workdir, "--configfile", SMOKE, "--cores", "2", "--nocolor", *extra)
    return run_snakemake(cmd, env)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, wheel) -> Path:
    import os

    workdir = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, THANOS_GENSIM_WHEEL=str(wheel), **shared_worker())
    proc = _snakemake(workdir, env=env)
    if proc.returncode != 0:
        pytest.fail(f"smoke run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    # the run that made the tables ends with the paper's orderings checked on its results
    assert "the paper's orderings:" in proc.stdout and "| 2:4: Thanos (α>0) best:" in proc.stdout
    report = _snakemake(workdir, "--report", "report.html", env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    again = _snakemake(workdir, "-n", env=env)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert "the paper's orderings:" not in again.stdout + again.stderr
    return workdir / "results" / "smoke"


def test_smoke_models_and_evaluations(smoke):
    recipes = ["magnitude_u50", "wanda_2-4", "sparsegpt_s30", "thanos_u50", "thanos_2-4"]
    for recipe in recipes:
        report = json.loads((smoke / "tiny-llama" / recipe / "model" / "pruning_report.json").read_text())
        assert report["recipe"]["name"] == recipe
        ppl = json.loads((smoke / "tiny-llama" / recipe / "eval" / "perplexity.json").read_text())
        assert ppl["ppl"] > 1 and ppl["seqlen"] == 64 and ppl["windows"] == ppl["max_windows"] == 64
        zs = json.loads((smoke / "tiny-llama" / recipe / "eval" / "zeroshot.json").read_text())
        assert 0 <= zs["mean_acc"] <= 1 and "demo_wordorder" in zs["tasks"]
    dense = json.loads((smoke / "tiny-llama" / "dense" / "eval" / "perplexity.json").read_text())
    assert dense["ppl"] > 1


def test_smoke_tables_figures_and_report(smoke):
    md = (smoke / "tables" / "perplexity.md").read_text()
    for label in ("Dense", "Magnitude", "Wanda", "SparseGPT", "Thanos"):
        assert f"| {label}" in md
    assert (smoke / "tables" / "zeroshot_avg.csv").is_file()
    figures = {p.name for p in (smoke / "figures").iterdir()}
    assert "pruning_time_vs_layer_size.png" in figures
    assert "objective_heatmap_tiny-llama_u50.pdf" in figures
    html = (smoke.parents[1] / "report.html").read_text(errors="replace")
    assert "pruning_time_vs_layer_size.png" in html and "perplexity.csv" in html


def test_smoke_distilled_recipe(smoke):
    """thanos_u50_kd (smoke.yaml: thanos_u50 with `distill`): its model is thanos_u50's distilled toward the
    dense model by the rule distill, with every zero kept; evaluated and tabled as a row of its own."""
    from thanos.files import digests

    pruned, distilled = smoke / "tiny-llama" / "thanos_u50", smoke / "tiny-llama" / "thanos_u50_kd"
    assert not (distilled / "pruned").exists()  # nothing of its own pruned: thanos_u50's model is the student
    report = json.loads((distilled / "model" / "pruning_report.json").read_text())
    record = report["distillation"]
    assert record["steps"] == 8 and record["tokens"] == 2048 and record["zeros_kept"] > 0
    assert record["best"]["kl"] < record["heldout"][0]["kl"]
    assert record["source"]["source"].endswith("train.jsonl") and len(record["source"]["checksum"]) == 64
    assert digests.edited(str(distilled / "model")) == []
    assert not (distilled / "distill").exists()  # retention.distill_checkpoints: false, deleted once written
    before = json.loads((pruned / "model" / "sparsity.json").read_text())
    after = json.loads((distilled / "model" / "sparsity.json").read_text())
    assert after["all_parameters"] == before["all_parameters"]  # the same zeros, counted again
    assert "## Distillation" in (distilled / "model" / "README.md").read_text()
    ppl = json.loads((distilled / "eval" / "perplexity.json").read_text())
    assert ppl["ppl"] > 1
    md = (smoke / "tables" / "perplexity.md").read_text()
    assert "| Thanos (α=0) + distillation |" in md and "| Thanos (α=0) |" in md
