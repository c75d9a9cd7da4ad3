"""Recovery (``recover``): each pruned block's kept weights trained towards the dense model's outputs.

The training function on its own (zeros kept, loss down, a worse epoch not kept), then ``prune_model`` with
recovery on tiny models of several families (a mixture of experts among them): every pruned weight still
zero, the pattern (2:4, compact neurons) kept, the blocks' loss down, the same sparsity.json counts as the
unrecovered model, a model ``from_pretrained`` loads; a SIGKILL mid-recovery resumed to the same bytes;
the dense chain's blocks recovered independently; options that make no sense refused, named.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, thanos_here, write_corpus
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from thanos.jobs.granularity import choose_granularity
from thanos.pruning.recovery import recover_block, split_windows
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import Recipe
from thanos.runner.api import prune_model

REPO = Path(__file__).resolve().parents[1]
CALIBRATION = {"nsamples": 12, "seqlen": 32, "device": "cpu"}
RECOVER = {"epochs": 3, "lr": 1e-4, "batch_size": 2, "holdout": 0.25}


def toy(seed: int = 0) -> tuple[torch.nn.Module, dict, dict, list, list]:
    """Two linear layers, half of each weight pruned, and (X, Y) pairs from the dense pair."""
    torch.manual_seed(seed)
    dense = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    pruned = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    pruned.load_state_dict(dense.state_dict())
    weights, masks = {}, {}
    for name in ("0", "2"):
        W = pruned.get_submodule(name).weight
        masks[name] = (torch.rand(W.shape) > 0.5).float()
        W.data.mul_(masks[name])
        weights[name] = W
    X = [torch.randn(4, 8, 16) for _ in range(6)]
    with torch.no_grad():
        pairs = [(x, dense(x)) for x in X]
    return pruned, weights, masks, pairs[:4], pairs[4:]


def test_training_keeps_every_zero_and_lowers_the_validation_loss() -> None:
    pruned, weights, masks, train, val = toy()
    for W in weights.values():
        W.requires_grad_(True)
    log = recover_block(pruned, weights, masks, lambda epoch: iter(train), 4, lambda: iter(val), 5, 1e-2)
    assert log.best_epoch >= 1 and log.loss_after < 0.8 * log.loss_before
    assert len(log.val_losses) == 5 and log.loss_after == min(log.val_losses)
    for name, W in weights.items():
        assert torch.all(W[masks[name] == 0] == 0)


def test_an_epoch_that_makes_it_worse_is_not_kept() -> None:
    pruned, weights, masks, train, val = toy(1)
    for W in weights.values():
        W.requires_grad_(True)
    before = {name: W.detach().clone() for name, W in weights.items()}
    log = recover_block(pruned, weights, masks, lambda epoch: iter(train), 4, lambda: iter(val), 2, 50.0)
    assert log.best_epoch == 0 and log.loss_after == log.loss_before  # a learning rate that diverges
    for name, W in weights.items():
        assert torch.equal(W.detach(), before[name])


def test_options_that_make_no_sense_are_refused_naming_them(tmp_path: Path) -> None:
    for options, message in (
        ({"epochs": -1}, "recover.epochs: expected a whole number >= 1"),
        ({"lr": 0}, "recover.lr: expected a number > 0"),
        ({"holdout": 1.5}, "recover.holdout: expected a number > 0 and < 1"),
        ({"target": "x"}, "recover.target: 'x' is not one of dense, block"),
    ):
        with pytest.raises(ConfigError, match=message):
            Recipe(None, "thanos", 0.5, recover=options)
    with pytest.raises(ConfigError, match="method magnitude uses none"):
        Recipe(None, "magnitude", 0.5, recover=True)
    with pytest.raises(ConfigError, match="none left for training"):
        Recipe(None, "thanos", 0.5, recover={"holdout": 0.9}).recover.held_out(4)
    assert split_windows(8, 1) == ([0, 1, 2, 3, 4, 5, 6], [7])
    with pytest.raises(ValueError, match="recipes with recover .* set granularity: recipe"):
        choose_granularity("layer", cluster=True, gpus=0, recovered=["thanos_u50_rec"])
    assert choose_granularity("auto", cluster=True, gpus=0, recovered=["r"])[0] == "recipe"
    model = make_tiny_model(tmp_path, "llama")
    corpus = write_corpus(tmp_path / "calib.jsonl")
    common = {"calibration": corpus, "workdir": tmp_path / "wd", "stream": io.StringIO(), **CALIBRATION}
    for recover, flag in (  # prune_model names its parameters, the command its flags (below)
        ({"epochs": 0}, r"recover\['epochs'\]=0"),
        ({"holdout": 0.95}, r"recover\['holdout'\]=0.95"),
    ):
        with pytest.raises(ValueError, match=flag):
            prune_model(model, "thanos", 0.5, out=tmp_path / "out", recover=recover, **common)
    assert not (tmp_path / "wd").exists()  # refused before any step
    run = thanos_here(
        "prune-model", "--model", model, "--method", "thanos", "--sparsity", "0.5", "--recover-lr", "0",
        "--out", tmp_path / "o", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "--recover-lr" in run.stderr and "Traceback" not in run.stderr


def run_pair(
    tmp_path: Path, family: str, method: str, sparsity: str, dtype: str = "float32"
) -> tuple[Path, Path, Path]:
    """The same recipe without and with recovery on a tiny ``family`` model: (plain, recovered, workdir)."""
    model = make_tiny_model(tmp_path, family, num_blocks=2, dtype=dtype)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=40, words=120)
    common = {"calibration": corpus, "workdir": tmp_path / "wd", "stream": io.StringIO(), **CALIBRATION}
    common["keep"] = "all"  # the tests compare the pruned layers with the recovered ones
    prune_model(model, method, sparsity, out=tmp_path / "plain", **common)
    common["stream"] = stream = io.StringIO()
    # neurons: every layer of the block is trained, and the tiny random model's pruned block is within
    # ~1e-8 of the dense one: Adam's steps of about lr per weight must be smaller than at the other cases'
    recover = RECOVER | {"lr": 1e-5} if sparsity.startswith("neurons") else RECOVER
    prune_model(model, method, sparsity, out=tmp_path / "rec", recover=recover, **common)
    (tmp_path / "rec.out").write_text(stream.getvalue())
    return tmp_path / "plain", tmp_path / "rec", tmp_path / "wd"


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors |= load_file(file)
    return tensors


@pytest.mark.parametrize(
    ("family", "method", "sparsity", "dtype"),
    [("llama", "thanos", "0.5", "float32"), ("qwen2", "sparsegpt", "2:4", "float32"),
     ("mixtral", "wanda", "0.5", "float32"), ("llama", "thanos", "neurons:0.25", "float32"),
     ("mistral", "sparsegpt", "0.5", "bfloat16")],
)  # fmt: skip
def test_recovered_model_keeps_the_pattern_and_loads(
    tmp_path: Path, family: str, method: str, sparsity: str, dtype: str
) -> None:
    """A bf16 model trains in the compute dtype (autocast on a CPU with bf16 instructions), fp32 master
    weights, and writes bf16 weights."""
    plain, rec, workdir = run_pair(tmp_path, family, method, sparsity, dtype)
    before, after = weights(plain), weights(rec)
    assert before.keys() == after.keys()
    report = json.loads((rec / "pruning_report.json").read_text())
    (root,) = workdir.glob(f"results/*/{report['recipe']['name']}/pruned")
    kept = {b["block"]: b["epochs_kept"] for b in report["recovery"]["blocks"]}
    for layer in report["layers"]:
        block, name = layer["block"], layer["layer"]
        pruned = load_file(root / f"block{block}" / f"{name}.safetensors")["weight"]
        recovered = load_file(root / "recovered" / f"block{block}" / f"{name}.safetensors")["weight"]
        if not report.get("compact"):  # compact: the assembled weight lacks the removed neurons' columns
            assert torch.equal(recovered, after[layer["tensor"]])  # what was assembled
        assert recovered.dtype == pruned.dtype
        assert torch.equal(pruned == 0, recovered == 0), name  # every zero kept, no other weight zeroed
        # trained where an epoch was kept (it lowered the validation loss), else as pruning left it
        assert torch.equal(pruned, recovered) == (kept[block] == 0), name
    trained = {layer["tensor"] for layer in report["layers"]}
    if report.get("compact"):  # neurons: the layers the recipe leaves dense are trained too
        dense = [n for n in before if n.endswith("proj.weight") and n not in trained]
        for name in dense:
            if "self_attn" in name:  # (the MLP's feeders lose the removed neurons' rows)
                block = int(name.split("layers.")[1].split(".")[0])
                assert torch.equal(before[name], after[name]) == (kept[block] == 0), name
        trained |= set(dense)
    for name in set(before) - trained:
        assert torch.equal(before[name], after[name]), name  # norms, embeddings, routers: as they were
    pruned = [layer["tensor"] for layer in report["layers"]]
    if sparsity == "2:4":
        for name in pruned:
            groups = after[name].reshape(after[name].shape[0], -1, 4)
            assert bool(((groups == 0).sum(-1) >= 2).all()), name
    sidecars = [json.loads((d / "sparsity.json").read_text()) for d in (plain, rec)]
    assert sidecars[0]["layers"] == sidecars[1]["layers"]  # the counts per layer are the unrecovered ones
    assert sidecars[1]["recovered"] is True and sidecars[1]["recovery"]["epochs"] == RECOVER["epochs"]
    blocks = report["recovery"]["blocks"]
    assert len(blocks) == 2 and all(b["loss_after"] <= b["loss_before"] for b in blocks)
    assert any(b["loss_after"] < b["loss_before"] and b["epochs_kept"] >= 1 for b in blocks)
    assert all(len(b["val_losses"]) == RECOVER["epochs"] and b["seconds"] > 0 for b in blocks)
    assert all(b["peak_rss_mib"] > 0 for b in blocks)
    assert "## Recovery" in (rec / "README.md").read_text()
    epochs = f"--recover --recover-epochs {RECOVER['epochs']} --recover-lr "  # its command rebuilds it
    assert epochs in (rec / "README.md").read_text() and epochs not in (plain / "README.md").read_text()
    improved = sum(1 for b in blocks if b["epochs_kept"])
    assert f"recovery: {improved} of 2 blocks improved" in (tmp_path / "rec.out").read_text()
    config = json.loads((rec / "config.json").read_text())
    assert config == json.loads((plain / "config.json").read_text())  # neurons: compact as the plain one
    AutoModelForCausalLM.from_pretrained(rec)  # loads without extras


def test_dense_chain_blocks_are_recovered_independently(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path, "llama", num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=40)
    from thanos.files.layout import Layout
    from thanos.stages.engine import Calibration, RecipeFiles, RunOptions, run_recipe

    recipe = Recipe(None, "sparsegpt", 0.5, recover=RECOVER, chain="dense")
    layout = Layout(str(tmp_path / "results"), sequential=False)
    files = RecipeFiles.of(layout, "m", recipe)
    calibration = Calibration(str(corpus), 12, 32)
    run_recipe(model, recipe, files, calibration, RunOptions("cpu"))
    recovered = files.pruned_root / "recovered"
    stamps = {b: (recovered / f"block{b}" / "recovery.json").stat().st_mtime_ns for b in range(3)}
    first = weights(files.model_dir)
    # block 1 lost: only block 1 is recovered again (it reads the dense chain's stores alone)
    import shutil

    shutil.rmtree(recovered / "block1")
    shutil.rmtree(files.model_dir)
    (files.summary).unlink()
    run_recipe(model, recipe, files, calibration, RunOptions("cpu"))
    summary = json.loads(files.summary.read_text())
    assert summary["computed"]["recover"] == 1 and summary["reused"]["recover"] == 2
    assert (recovered / "block0" / "recovery.json").stat().st_mtime_ns == stamps[0]
    assert (recovered / "block2" / "recovery.json").stat().st_mtime_ns == stamps[2]
    again = weights(files.model_dir)
    assert all(torch.equal(first[name], again[name]) for name in first)


@pytest.mark.slow
def test_killed_mid_recovery_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path, "llama", num_blocks=3, hidden_size=64)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=60)

    def command(out: str, workdir: str) -> list[str]:
        return [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", "thanos",
                "--sparsity", "0.5", "--calibration", str(corpus), "--nsamples", "16", "--seqlen", "32",
                "--device", "cpu", "--cores", "2", "--recover", "--recover-epochs", "12",
                "--workdir", str(tmp_path / workdir), "--out", str(tmp_path / out)]  # fmt: skip

    # the reference and the resume in this process (thanos_here); the killed run is a process of its own
    reference = thanos_here(*command("reference", "wd-ref")[3:], cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    terminal = reference.stdout + reference.stderr
    assert "then recovery of every block: 12 epochs, lr 0.003, towards the dense model" in terminal
    assert "(recovery: validation loss" in terminal  # each block's line says what recovery did
    recipe = "thanos_u50_rec-e12"
    pruned = tmp_path / "wd" / "results" / model.name / recipe / "pruned"
    log = tmp_path / "wd" / "logs" / f"{recipe}.log"
    proc = subprocess.Popen(
        command("out", "wd"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if log.is_file() and "recover: block 1 epoch 1/12" in log.read_text():
            break  # block 0 recovered, block 1 in flight: 11 epochs left (the poll can lag under load)
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (pruned / "recovered" / "block0" / "recovery.json").is_file()
    assert not (pruned / "recovered" / "block1").exists()  # the block in flight left nothing
    resumed = thanos_here(*command("out", "wd")[3:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((pruned / "chain.json").read_text())
    assert summary["reused"]["recover"] == 1 and summary["computed"]["recover"] == 2  # block 0 was kept
    for name in ("model.safetensors", "sparsity.json"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name


@pytest.mark.slow
def test_the_workflow_recovers_a_recipe_in_its_job(tmp_path: Path) -> None:
    from conftest import snakemake, workflow_config

    model = make_tiny_model(tmp_path, "llama", num_blocks=2)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=40)
    recipes = {"thanos_u50_rec": {"method": "thanos", "sparsity": 0.5, "recover": {"epochs": 1, "lr": 1e-4}}}
    config = workflow_config(corpus, {"tiny": {"path": str(model)}}, recipes, granularity="auto")
    snakemake(tmp_path / "run", config)
    out = tmp_path / "run" / "results" / "tiny" / "thanos_u50_rec" / "model"
    sidecar = json.loads((out / "sparsity.json").read_text())
    assert sidecar["recovered"] is True and sidecar["recovery"]["epochs"] == 1
    report = json.loads((out / "pruning_report.json").read_text())
    assert report["workflow"]["granularity"] == "recipe" and len(report["recovery"]["blocks"]) == 2
    AutoModelForCausalLM.from_pretrained(out)
    refused = snakemake(tmp_path / "layer", {**config, "granularity": "layer"}, "-n", check=False)
    assert refused.returncode != 0
    assert "recipes with recover (thanos_u50_rec)" in refused.stdout + refused.stderr
