"""No silent wrong model: each fault a user can run into gives a clear error or a correct rerun, never a
published model built from the wrong inputs.

Real Snakemake runs on tiny models (CPU). One module-scoped run (a local model directory, a Thanos and a
magnitude recipe, granularity recipe) is copied by the tests that damage it: a missing pruned layer, a model
overwritten in place. The other cases are unit tests or runs that stop at the config or the first job.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import TINY_DEFAULTS, WORDS, calibrated, snakemake, workflow_config, write_corpus
from safetensors.torch import load_file, save_file

from thanos.demo.tiny import build_tiny_model
from thanos.pruning.layer import prune_layer
from thanos.recipes.fields import ConfigError
from thanos.workflow.config import expand

TINY = {"hidden_size": 32, "num_blocks": 2, "num_heads": 4}
LOCAL_MODEL = {
    k: v for k, v in TINY_DEFAULTS.items() if k != "max_shard_size"
} | TINY  # one model.safetensors
BASE_RECIPES = {
    "thanos_u50": {"method": "thanos", "sparsity": 0.5},
    "magnitude_u50": {"method": "magnitude", "sparsity": 0.5},
}


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


BASE_CONFIG = workflow_config("calib.jsonl", {"m": {"path": "model"}}, BASE_RECIPES)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run on a local model directory (not built by the workflow): ``model/`` in the workdir."""
    workdir = tmp_path_factory.mktemp("faults-base")
    build_tiny_model(workdir / "model", "llama", **LOCAL_MODEL)
    write_corpus(workdir / "calib.jsonl")
    snakemake(workdir, BASE_CONFIG)
    return workdir


def copy_run(base: Path, dest: Path) -> Path:
    """A copy of a finished run with the same modification times (Snakemake sees nothing new)."""
    shutil.copytree(base, dest, symlinks=True)
    return dest


# ---- 1. shell injection ------------------------------------------------------------------------------


def payload(marker: Path) -> str:
    return f"$(touch {marker})"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["paths", "max_shard_size", "tasks"])
def test_config_strings_never_reach_a_shell_unquoted(tmp_path: Path, case: str) -> None:
    """Free-form strings with a command substitution: the workflow runs with the literal value (results
    directory, a tiny model's path), or refuses it at config validation naming the key."""
    markers = tmp_path / "pwned"
    markers.mkdir()
    workdir = tmp_path / "work"
    models = {"m": {"path": "models/m", "tiny": {"family": "llama", **TINY}}}
    recipes = {"magnitude_u50": BASE_RECIPES["magnitude_u50"]}
    config = workflow_config("calib.jsonl", models, recipes)
    if case == "paths":
        config["results"] = f"out {payload(markers / 'results')}"
        models["m"]["path"] = f"models/{payload(markers / 'path')}m"
    elif case == "max_shard_size":
        config["assemble"] = {"max_shard_size": f"{payload(markers / 'shard')}2GB"}
    else:
        config["zeroshot"] = {"enabled": True, "tasks": [f"{payload(markers / 'tasks')}piqa"], "limit": 1}
        config["evaluate_dense"] = True
    proc = snakemake(workdir, config, check=False)
    assert not list(markers.iterdir()), f"a config string was executed by a shell:\n{output(proc)[-3000:]}"
    if case == "paths":
        assert proc.returncode == 0, output(proc)[-3000:]
        assert (workdir / models["m"]["path"] / "config.json").is_file()
        report = workdir / config["results"] / "m" / "magnitude_u50" / "model" / "pruning_report.json"
        assert report.is_file()
    else:
        assert proc.returncode != 0
        assert case in output(proc), output(proc)[-3000:]


# ---- 3. granularity recipe: a missing pruned layer --------------------------------------------------


@pytest.mark.slow
def test_missing_pruned_layer_is_never_assembled_as_dense(base: Path, tmp_path: Path) -> None:
    """granularity recipe: a pruned layer deleted after its recipe's job finished. Assemble refuses to
    publish the model (it would copy that layer unpruned); the recipe's job, resumed, recomputes the layer
    and, in its sequential chain, the later blocks computed through it: the same bytes as before."""
    work = copy_run(base, tmp_path / "missing")
    recipe = work / "results" / "m" / "thanos_u50"
    key = calibrated(work / "results" / "m").name
    pruned = recipe / "pruned" / key
    for ext in ("safetensors", "json"):
        (pruned / "block0" / f"mlp.down_proj.{ext}").unlink()
    shutil.rmtree(recipe / "model")
    failed = snakemake(work, BASE_CONFIG, check=False)
    assert failed.returncode != 0, "assembled a model with a missing pruned layer"
    assert not (recipe / "model").exists()
    assert "block 0 mlp.down_proj (missing)" in output(failed), output(failed)[-3000:]
    assert "chain.json" in output(failed)  # the fix it names: delete the recipe job's summary
    (pruned / "chain.json").unlink()
    snakemake(work, BASE_CONFIG)
    log = (work / "results" / "logs" / "m" / "thanos_u50" / key / "prune_recipe.log").read_text()
    assert "recomputing 1 pruned layer(s): mlp.down_proj (missing)" in log
    summary = json.loads((pruned / "chain.json").read_text())
    assert summary["computed"] == {"capture": 1, "prune": 1 + 7, "recover": 0, "propagate": 1}
    reference = base / "results" / "m" / "thanos_u50" / "pruned" / key
    for block in ("block0", "block1"):
        for file in (reference / block).glob("*.safetensors"):
            assert (pruned / block / file.name).read_bytes() == file.read_bytes(), file
    report = json.loads((recipe / "model" / "pruning_report.json").read_text())
    assert len(report["layers"]) == 2 * 7
    assert report["calibration"]["distinct_windows"] == 8


# ---- 4. the input model changes in place -----------------------------------------------------------


@pytest.mark.slow
def test_model_overwritten_in_place_reruns_its_results(base: Path, tmp_path: Path) -> None:
    work = copy_run(base, tmp_path / "changed")
    weights = work / "model" / "model.safetensors"
    before = weights.stat().st_mtime_ns
    other = build_tiny_model(tmp_path / "other", "llama", **(LOCAL_MODEL | {"seed": 1}))
    shutil.copyfile(other / "model.safetensors", weights)
    # older than every result: only the fingerprint (size, mtime_ns of each file) can see the change
    os.utime(weights, ns=(before - 10**9, before - 10**9))
    proc = snakemake(work, BASE_CONFIG)
    assert "changed" in output(proc) and "model.safetensors" in output(proc), output(proc)[-3000:]
    info = json.loads((work / "results" / "m" / "model_info.json").read_text())
    assert info["fingerprint"]["model.safetensors"]["mtime_ns"] == before - 10**9
    new = load_file(other / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    for recipe in BASE_RECIPES:
        assembled = load_file(work / "results" / "m" / recipe / "model" / "model.safetensors")
        old = load_file(base / "results" / "m" / recipe / "model" / "model.safetensors")
        assert not torch.equal(assembled[name], old[name]), recipe
    kept = assembled[name] != 0  # magnitude: the kept weights are the new model's
    assert torch.equal(assembled[name][kept], new[name][kept])
    assert int((~kept).sum()) == new[name].numel() // 2
    dry = snakemake(work, BASE_CONFIG, "-n")
    assert "Nothing to be done" in output(dry), output(dry)[-3000:]


@pytest.mark.slow
def test_an_edited_result_model_stops_the_next_run_named(base: Path, tmp_path: Path) -> None:
    work = copy_run(base, tmp_path / "edited")
    model = work / "results" / "m" / "thanos_u50" / "model"
    computed = (model / "model.safetensors").read_bytes()
    with open(model / "model.safetensors", "r+b") as handle:  # edited in place, as a script would
        handle.seek(len(computed) - 64)
        handle.write(b"\x01" * 32)
    for extra in ((), ("-n",)):  # a run and a dry run alike
        proc = snakemake(work, BASE_CONFIG, *extra, check=False)
        assert proc.returncode != 0, output(proc)[-3000:]
        assert "results/m/thanos_u50/model is not what was computed: model.safetensors was changed" in output(
            proc
        ), output(proc)[-3000:]
        assert "and run again: it is reassembled from the pruned layers" in output(proc)
    shutil.rmtree(model)  # the fix: reassembled from the pruned layers, the same bytes
    proc = snakemake(work, BASE_CONFIG)
    assert "rule assemble" in output(proc) and "rule prune" not in output(proc), output(proc)[-3000:]
    assert (model / "model.safetensors").read_bytes() == computed


# ---- 5. a failed job's error on the terminal ---------------------------------------------------------


@pytest.mark.slow
def test_failed_job_error_reaches_the_terminal(tmp_path: Path) -> None:
    (tmp_path / "not-a-model").mkdir()  # a config the config check reads, but no weights: the job fails
    (tmp_path / "not-a-model" / "config.json").write_text('{"model_type": "llama"}')
    config = workflow_config(
        "calib.jsonl", {"m": {"path": "not-a-model"}}, {"magnitude_u50": BASE_RECIPES["magnitude_u50"]}
    )
    proc = snakemake(tmp_path, config, check=False)
    assert proc.returncode != 0
    assert "no safetensors weights in not-a-model" in output(proc), output(proc)[-3000:]
    assert "Traceback" not in output(proc)  # the job's ERROR line; its traceback stays in its log


# ---- smaller ones ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"recipes": {"t": {"method": "thanos", "sparsity": 0.5, "alpha": 0.1}}}, "recipes.t.alpha"),
        (
            {"recipe_grid": [{"methods": ["thanos"], "sparsities": ["2:4", "0.5"], "alpha": [0, 0.1]}]},
            "recipe_grid[0].alpha",
        ),
    ],
)
def test_alpha_with_unstructured_sparsity_is_a_config_error(config: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key) + ".*unstructured"):
        expand(config)
    ok = {"recipe_grid": [{"methods": ["thanos"], "sparsities": ["0.5"], "alpha": [0]}]}
    assert list(expand(ok)) == ["thanos_u50"]


def test_calibration_records_duplicate_windows(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from thanos.stages.calibrate import calibrate

    model = build_tiny_model(tmp_path / "model", "llama", **LOCAL_MODEL)
    source = tmp_path / "one.txt"
    source.write_text(" ".join(WORDS[:26]) + "\n")  # one document: <s> + 26 tokens, 3 windows of 24
    with caplog.at_level(logging.WARNING):
        attrs = calibrate(model, source, tmp_path / "tokens.zarr", nsamples=16, seqlen=24)
    assert 1 <= attrs["distinct_windows"] <= 3
    assert f"{attrs['distinct_windows']} distinct" in caplog.text and "nsamples" in caplog.text


def test_model_info_names_a_non_finite_tensor(tmp_path: Path) -> None:
    from thanos.cli import main
    from thanos.commands import model_info

    model = build_tiny_model(tmp_path / "model", "llama", **LOCAL_MODEL)
    tensors = load_file(model / "model.safetensors")
    tensors["model.norm.weight"][3] = math.inf
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.norm\.weight"):
        model_info.run(argparse.Namespace(model=str(model), out=str(tmp_path / "info.json")))
    assert main(["model-info", "--model", str(model), "--out", str(tmp_path / "info.json")]) == 2
    assert not (tmp_path / "info.json").exists()


def test_non_finite_weight_error_names_the_layer() -> None:
    W = torch.randn(8, 16)
    W[2, 3] = math.nan
    with pytest.raises(ValueError, match="block 1 mlp.down_proj"):
        prune_layer(W, None, "magnitude", 0.5, name="block 1 mlp.down_proj")
    H = torch.eye(16)
    H[0, 0] = math.inf
    with pytest.raises(ValueError, match="block 1 mlp.down_proj"):
        prune_layer(torch.randn(8, 16), H, "sparsegpt", 0.5, name="block 1 mlp.down_proj")


@pytest.mark.parametrize("sparsity", ["0.5", "structured:0.3", "2:4"])
def test_achieved_sparsity_counts_dead_columns(sparsity: str) -> None:
    """Columns whose input is always zero are zeroed before the update (SparseGPT's dead columns): they
    are removed weights, counted in the mask and the achieved sparsity."""
    torch.manual_seed(0)
    X = torch.randn(64, 32)
    X[:, :20] = 0  # 20 of 32 inputs never fire: more than any of the patterns removes
    H = 2 * X.T @ X / X.shape[0]
    for method in ("sparsegpt", "thanos"):
        result = prune_layer(torch.randn(16, 32), H, method, sparsity, alpha=0)
        zeros = int((result.weight == 0).sum())
        assert int(result.mask.sum()) == zeros, method
        assert result.stats.achieved_sparsity == pytest.approx(zeros / result.weight.numel()), method


@pytest.mark.slow
def test_models_sharing_a_tiny_path_with_different_specs_are_refused(tmp_path: Path) -> None:
    models = {
        "small": {"path": "models/tiny", "tiny": {"family": "llama", **TINY}},
        "large": {"path": "models/./tiny", "tiny": {"family": "llama", **TINY, "hidden_size": 64}},
    }
    proc = snakemake(
        tmp_path,
        workflow_config("calib.jsonl", models, {"magnitude_u50": BASE_RECIPES["magnitude_u50"]}),
        "-n",
        check=False,
    )
    assert proc.returncode != 0
    assert "models.small" in output(proc) and "models.large" in output(proc), output(proc)[-3000:]
