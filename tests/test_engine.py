"""The engine (``thanos.stages.engine.run_recipe``): every stage of a recipe in one process on real tiny
models and real zarr stores; the same bytes as the workflow's jobs (a real Snakemake run, one job per
layer); a second call computes nothing; an edited input recomputes what depends on it and nothing else; a
killed step leaves nothing that is taken for finished; the workflow's recipe job never recomputes the
shared stores it is given."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import make_tiny_model, snakemake, workflow_config, write_corpus

from thanos.files.layout import Layout
from thanos.recipes.recipe import Recipe
from thanos.stages.engine import Calibration, RecipeFiles, RunOptions, run_recipe


def _digests(root: Path) -> dict[str, str]:
    """sha256 of every pruned layer file and of the assembled weights under ``root`` (a recipe's directory),
    by ``block{l}/{layer}`` and ``model/{file}`` (the workflow keeps its layers under the calibration's key,
    ``pruned/{key}/``; the engine's working directory, one calibration, under ``pruned/``)."""
    files = [*root.glob("pruned/block*/*.safetensors"), *root.glob("pruned/*/block*/*.safetensors")]
    files += root.glob("model/*.safetensors")
    return {f"{f.parent.name}/{f.name}": hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Recipe]:
    model = make_tiny_model(tmp_path, "llama", num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    return model, corpus, Recipe("thanos_u50", "thanos", 0.5)


def _run(model: Path, corpus: Path, recipe: Recipe, root: Path):
    files = RecipeFiles.of(Layout(str(root)), "tiny", recipe)
    steps = run_recipe(model, recipe, files, Calibration(str(corpus), 8, 32), RunOptions("cpu"))
    return files, steps


def test_a_recipe_leaves_the_collectors_frozen_objects_as_it_found_them(setup, tmp_path):
    """The engine freezes what is alive while its steps run (each step's collection skips the imports);
    after it, nothing stays frozen that was not, and what a caller froze (the warm worker, before its
    fork) is not thawed."""
    import gc

    model, corpus, _ = setup
    gc.unfreeze()
    _run(model, corpus, Recipe("magnitude_u50", "magnitude", 0.5), tmp_path / "thawed")
    assert gc.get_freeze_count() == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        _run(model, corpus, Recipe("magnitude_u25", "magnitude", 0.25), tmp_path / "thawed")
        assert gc.get_freeze_count() > frozen // 2  # not thawed (a few freed by their counts)
    finally:
        gc.unfreeze()


@pytest.mark.slow
def test_the_engine_writes_the_workflows_bytes_and_a_rerun_computes_nothing(setup, tmp_path):
    import torch

    model, corpus, recipe = setup
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the workflow's jobs below: the same threads, the same sums
    try:
        files, steps = _run(model, corpus, recipe, tmp_path / "engine")
    finally:
        torch.set_num_threads(threads)
    assert steps.computed == [
        "read the model's structure",
        "sample calibration tokens",
        "embed the calibration tokens (block 0 inputs)",
        "Hessians of block 0 (dense)",
        "prune every block (thanos_u50)",
        "assemble the pruned model (thanos_u50)",
    ]
    assert (files.model_dir / "pruning_report.json").is_file()

    # the workflow, one job per layer: the same pruned layers and the same assembled weights
    config = workflow_config(
        corpus, {"tiny": {"path": str(model)}}, {"thanos_u50": {"method": "thanos", "sparsity": 0.5}}
    )
    snakemake(tmp_path / "wf", config | {"granularity": "layer", "threads": 2})
    engine = _digests(tmp_path / "engine" / "tiny" / "thanos_u50")
    assert len(engine) == 3 * 7 + 1
    assert engine == _digests(tmp_path / "wf" / "results" / "tiny" / "thanos_u50")

    again = _run(model, corpus, recipe, tmp_path / "engine")[1]
    assert again.computed == [] and len(again.reused) == 6


def test_an_edited_input_recomputes_what_depends_on_it(setup, tmp_path):
    model, corpus, recipe = setup
    root = tmp_path / "results"
    files, _ = _run(model, corpus, recipe, root)
    info = (root / "tiny" / "model_info.json").stat().st_mtime_ns

    write_corpus(corpus, seed=7)  # new calibration text: every step from the tokens on
    steps = _run(model, corpus, recipe, root)[1]
    assert steps.reused == ["read the model's structure"]
    assert "sample calibration tokens" in steps.computed and len(steps.computed) == 5
    assert (root / "tiny" / "model_info.json").stat().st_mtime_ns == info

    other = Recipe("wanda_u50", "wanda", 0.5)  # another recipe reuses the shared stores
    steps = _run(model, corpus, other, root)[1]
    assert steps.computed == ["prune every block (wanda_u50)", "assemble the pruned model (wanda_u50)"]

    config = model / "config.json"  # the model changed (same bytes, new mtime): everything again
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    steps = _run(model, corpus, recipe, root)[1]
    assert steps.reused == [] and len(steps.computed) == 6


def test_an_unfinished_output_is_computed_again(setup, tmp_path):
    model, corpus, recipe = setup
    root = tmp_path / "results"
    files, _ = _run(model, corpus, recipe, root)
    report = json.loads((files.model_dir / "pruning_report.json").read_text())
    # a step killed after writing its output but before its record: not taken for finished
    (files.model_dir.parent / ".model.inputs.json").unlink()
    steps = _run(model, corpus, recipe, root)[1]
    assert steps.computed == ["assemble the pruned model (thanos_u50)"]
    assert json.loads((files.model_dir / "pruning_report.json").read_text())["layers"] == report["layers"]


def test_a_damaged_output_file_is_computed_again_not_read(setup, tmp_path):
    """A step's output file truncated or edited after it was recorded (``OUTPUT_STAMP``: its size and
    modification time) is computed again, said so, instead of failing every rerun on what it reads."""
    model, corpus, recipe = setup
    root = tmp_path / "results"
    _run(model, corpus, recipe, root)
    info = root / "tiny" / "model_info.json"
    content = info.read_text()
    info.write_text("")
    steps = _run(model, corpus, recipe, root)[1]
    assert steps.reruns == {"read the model's structure": "model_info.json changed since it was computed"}
    assert info.read_text() == content
    assert _run(model, corpus, recipe, root)[1].computed == []


def test_a_pruned_layer_edited_or_deleted_is_pruned_again(setup, tmp_path):
    """A pruned layer file edited in place (the same size: nothing but its stamp in the stats tells) or
    deleted after the chain finished: the chain runs again for it alone, and the model is assembled again,
    the same bytes as before; the report does not carry the stamp."""
    model, corpus, recipe = setup
    root = tmp_path / "results"
    files, _ = _run(model, corpus, recipe, root)
    before = _digests(root / "tiny" / recipe.name)
    layer = files.pruned_root / "block1" / "self_attn.q_proj.safetensors"
    os.utime(layer, ns=(layer.stat().st_atime_ns, layer.stat().st_mtime_ns + 10**9))  # touched: the same
    assert _run(model, corpus, recipe, root)[1].computed == []
    with open(layer, "r+b") as handle:
        handle.seek(layer.stat().st_size - 4)
        handle.write(b"\x00\x00\x80\x3f")  # 1.0
    steps = _run(model, corpus, recipe, root)[1]
    assert steps.reruns["prune every block (thanos_u50)"] == "not finished"
    assert steps.computed == ["prune every block (thanos_u50)", "assemble the pruned model (thanos_u50)"]
    assert json.loads(files.summary.read_text())["reused"]["prune"] >= 7  # block 0 at least: not all again
    assert _digests(root / "tiny" / recipe.name) == before
    report = json.loads((files.model_dir / "pruning_report.json").read_text())
    assert all("file" not in entry for entry in report["layers"])
    layer.unlink()
    assert _run(model, corpus, recipe, root)[1].reruns["prune every block (thanos_u50)"] == "not finished"
    assert _digests(root / "tiny" / recipe.name) == before


def test_the_recipe_job_is_given_the_shared_stores_and_never_computes_them(setup, tmp_path):
    model, corpus, recipe = setup
    root = tmp_path / "results"
    files = RecipeFiles.of(Layout(str(root)), "tiny", recipe)
    given = RecipeFiles(
        files.pruned_root, files.summary, dense_dir=files.dense_dir, chain_dir=files.chain_dir
    )
    with pytest.raises(FileNotFoundError, match=r"inputs_0\.zarr is missing or incomplete; run the job"):
        run_recipe(model, recipe, given, options=RunOptions("cpu"))
    assert not files.tokens.exists() and not files.pruned_root.exists()

    _run(model, corpus, recipe, root)
    summary = files.summary.read_bytes()
    files.summary.unlink()  # what Snakemake does to a job's output before it runs the job again
    steps = run_recipe(model, recipe, given, options=RunOptions("cpu"))
    assert steps.computed == ["prune every block (thanos_u50)"]
    assert json.loads(files.summary.read_bytes())["reused"]["prune"] == 3 * 7
    assert json.loads(summary)["computed"]["prune"] == 3 * 7


def test_each_step_computed_again_says_the_one_input_that_changed(setup, tmp_path):
    """The ledger (``thanos.files.ledger``): a step whose output is not current says why, in one reason
    naming the input that changed (``Steps.reruns``, what ``prune-model`` shows)."""
    model, corpus, recipe = setup
    root = tmp_path / "results"
    _run(model, corpus, recipe, root)

    write_corpus(corpus, seed=7)  # a new calibration text and another damping, at once
    steps = _run(model, corpus, Recipe("thanos_u50", "thanos", 0.5, damp=0.02), root)[1]
    assert steps.reruns == {
        "sample calibration tokens": "source file calib.jsonl changed",
        "embed the calibration tokens (block 0 inputs)": "tokens.zarr was written again",
        "Hessians of block 0 (dense)": "inputs_0.zarr was written again",
        "prune every block (thanos_u50)": "option damp 0.01 -> 0.02",
        "assemble the pruned model (thanos_u50)": "option damp 0.01 -> 0.02",
    }
    assert steps.reused == ["read the model's structure"]

    config = model / "config.json"  # the model's files: every step says so
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    steps = _run(model, corpus, recipe, root)[1]
    assert set(steps.reruns.values()) == {"model file config.json changed"}
    assert list(steps.reruns) == steps.computed and len(steps.computed) == 6


def test_a_source_directory_is_its_files_not_the_bytecode_python_writes_there(tmp_path):
    """An lm-eval task directory's ``utils.py`` is compiled into ``__pycache__`` when the task is first
    loaded: that leaves the directory's identity (what a rerun compares) as it was; an edited file does
    not."""
    from thanos.files.ledger import source_identity

    (tmp_path / "task.yaml").write_text("task: toy\n")
    (tmp_path / "utils.py").write_text("def doc_to_text(doc):\n    return doc['text']\n")
    before = source_identity(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"\x00" * 64)
    assert source_identity(tmp_path) == before and set(before) == {"task.yaml", "utils.py"}
    (tmp_path / "utils.py").write_text("def doc_to_text(doc):\n    return doc['title']\n")
    assert source_identity(tmp_path) != before


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_the_dense_chain_runs_each_block_once(tmp_path, monkeypatch, family):
    """A recipe on the dense chain captures each block's Hessians and writes the block's outputs (the next
    block's inputs) from the same pass: no block is propagated on its own, each store is what ``propagate``
    writes, byte for byte (a mixture of experts' too: its hooks read the routed tokens, change nothing),
    and a second call computes nothing."""
    import numpy as np
    import zarr

    from thanos.stages import capture

    model = make_tiny_model(tmp_path, family, num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    recipe = Recipe("sparsegpt_u50", "sparsegpt", 0.5)
    propagated: list[int] = []
    original = capture.propagate

    def counted(model: Path, block: int, *args, **kwargs) -> None:
        propagated.append(block)
        original(model, block, *args, **kwargs)

    monkeypatch.setattr(capture, "propagate", counted)

    def run() -> tuple[RecipeFiles, Any]:
        files = RecipeFiles.of(Layout(str(tmp_path / "w"), sequential=False), "tiny", recipe)
        return files, run_recipe(model, recipe, files, Calibration(str(corpus), 8, 32), RunOptions("cpu"))

    files, steps = run()
    assert propagated == []
    labels = [label for label in steps.computed if "(dense)" in label]
    assert labels == [
        "Hessians of block 0 (dense)",
        "inputs of block 1 (dense)",
        "Hessians of block 1 (dense)",
        "inputs of block 2 (dense)",
        "Hessians of block 2 (dense)",
    ]
    assert files.dense_dir is not None
    for block in (1, 2):
        fused = files.dense_dir / f"inputs_{block}.zarr"
        alone = tmp_path / f"alone_{block}.zarr"
        original(model, block - 1, files.dense_dir / f"inputs_{block - 1}.zarr", alone, device="cpu")
        a, b = zarr.open_group(str(fused), mode="r"), zarr.open_group(str(alone), mode="r")
        assert dict(a.attrs) == dict(b.attrs)
        assert np.array_equal(a["hidden"][:], b["hidden"][:])
    _, again = run()
    assert again.computed == [] and propagated == []
