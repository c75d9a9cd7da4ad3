"""Real Snakemake runs on tiny random models (CPU): end to end, kill and resume, dense chain, dry runs.

Process starts dominate on CPU, so one module-scoped run (Llama and OPT, granularity recipe) serves the
end-to-end assertions, the byte-identity reference of the kill/resume test (granularity layer), the
recipe-job resume test and the recipe-change dry run.
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import calibrated, run_snakemake, snakemake, snakemake_command, workflow_config

from thanos.files.layout import UNCALIBRATED, calibration_key

REPO = Path(__file__).resolve().parents[1]
TINY = {"hidden_size": 32, "num_blocks": 2, "num_heads": 4}
WORDS = (
    "the a model prunes weights layer block sparse dense matrix input output token sequence calibration "
    "hessian row column outlier update method paper result small large fast slow and of to in"
).split()


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    import random

    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "text.jsonl"
    with path.open("w") as handle:
        for _ in range(120):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 50)))
            handle.write(json.dumps({"text": words.capitalize() + "."}) + "\n")
    return path


RECIPES = {
    "thanos_u50": {"method": "thanos", "sparsity": 0.5},
    "thanos_2-4": {"method": "thanos", "sparsity": "2:4", "alpha": 0.0},
    "sparsegpt_s30": {"method": "sparsegpt", "sparsity": "structured:0.3"},
    "magnitude_u50": {"method": "magnitude", "sparsity": 0.5},
}


MODELS = {
    "llama": {"path": "models/llama", "tiny": {"family": "llama", **TINY}},
    "opt": {"path": "models/opt", "tiny": {"family": "opt", **TINY}},
}


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, text) -> Path:
    """One uninterrupted run: both families, every recipe, granularity recipe (one job per recipe)."""
    workdir = tmp_path_factory.mktemp("e2e")
    snakemake(workdir, workflow_config(text, MODELS, RECIPES))
    return workdir


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return {name: p.detach() for name, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama", "opt"])
def test_end_to_end_models(e2e, model):
    info = json.loads((e2e / "results" / model / "model_info.json").read_text())
    prefix = info["block_prefix"]
    for recipe, spec in RECIPES.items():
        out = e2e / "results" / model / recipe / "model"
        # one shard: a single model.safetensors, no index (as save_pretrained writes a small model)
        assert (out / "model.safetensors").is_file() and not (out / "model.safetensors.index.json").exists()
        weights = _weights(out)
        report = json.loads((out / "pruning_report.json").read_text())
        for key in (
            "recipe",
            "model",
            "layers",
            "overall_sparsity",
            "calibration",
            "versions",
            "intermediates_bytes",
        ):
            assert key in report, key
        assert report["recipe"]["name"] == recipe and report["recipe"]["method"] == spec["method"]
        assert len(report["layers"]) == info["num_blocks"] * len(info["layers"])
        assert (report["calibration"] is None) == (spec["method"] == "magnitude")
        for entry in report["layers"]:
            for key in ("block", "layer", "achieved_sparsity", "objective", "seconds", "device", "shape"):
                assert key in entry, key
        for block in range(info["num_blocks"]):
            for layer in info["layers"]:
                w = weights[prefix.format(i=block) + layer + ".weight"]
                zero = w == 0
                if spec["sparsity"] == 0.5:
                    assert int(zero.sum()) == w.numel() // 2, (recipe, block, layer)
                elif spec["sparsity"] == "2:4":
                    groups = zero.reshape(w.shape[0], -1, 4).sum(-1)
                    assert bool((groups >= 2).all()), (recipe, block, layer)
                else:
                    dead = int(zero.all(dim=0).sum())
                    assert dead == math.ceil(0.3 * w.shape[1]), (recipe, block, layer, dead)
    # block 0 inputs/Hessians are shared (dense chain dir); magnitude has no chain of its own
    calibration = calibrated(e2e / "results" / model)
    chains = calibration / "chains"
    assert (chains / "dense" / "hessians_0.zarr").is_dir()
    assert not (chains / "thanos_u50" / "hessians_0.zarr").exists()
    assert (chains / "thanos_u50" / "hessians_1.zarr").is_dir()
    assert (chains / "thanos_u50" / "inputs_1.zarr").is_dir()
    assert not (chains / "magnitude_u50").exists()
    for recipe in RECIPES:  # granularity recipe: the per-block layout of granularity block/layer
        key = UNCALIBRATED if RECIPES[recipe]["method"] == "magnitude" else calibration.name
        pruned = e2e / "results" / model / recipe / "pruned" / key
        assert json.loads((pruned / "chain.json").read_text())["num_blocks"] == info["num_blocks"]
        for block in range(info["num_blocks"]):
            for layer in info["layers"]:
                for ext in ("safetensors", "json"):
                    assert (pruned / f"block{block}" / f"{layer}.{ext}").is_file(), (recipe, block, layer)


def _tree_bytes(root: Path, pattern: str = "*") -> dict[str, bytes]:
    """Relative path -> bytes of the files under ``root`` (not Snakemake's timestamp files)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob(pattern))
        if p.is_file() and p.name != ".snakemake_timestamp"
    }


def _incomplete(workdir: Path) -> set[Path]:
    marked = set()
    for marker in (workdir / ".snakemake" / "incomplete").glob("*"):
        try:
            marked.add((workdir / base64.b64decode(marker.name).decode()).resolve())
        except ValueError:
            continue
    return marked


def _finished_outputs(workdir: Path) -> dict[Path, int]:
    """mtime_ns of outputs of finished jobs (stores: their directory; files: themselves)."""
    results = workdir / "results"
    incomplete = _incomplete(workdir)
    found = {}
    for path in (
        list(results.rglob("*.zarr"))
        + list(results.rglob("pruned/*/block*/*"))
        + [
            *results.glob("*/model_info.json"),
            *results.glob("*/*/model"),
        ]
    ):
        if path.name.startswith(".") or path.resolve() in incomplete or not path.exists():
            continue
        if path.suffix == ".safetensors" and path.with_suffix(".json").resolve() in incomplete:
            continue
        found[path] = path.stat().st_mtime_ns
    return found


@pytest.mark.slow
def test_kill_and_resume_is_byte_identical(e2e, text, tmp_path):
    workdir = tmp_path / "resume"
    models = {"llama": MODELS["llama"]}
    config = workflow_config(text, models, {"thanos_u50": RECIPES["thanos_u50"]}, granularity="layer")
    proc = snakemake(workdir, config, popen=True)
    key = calibration_key({"text_field": "text", **config["calibration"]})  # the schema's default field
    block1 = workdir / "results" / "llama" / "thanos_u50" / "pruned" / key / "block1"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        done = [p for p in block1.glob("*.json") if p.resolve() not in _incomplete(workdir)]
        if len(done) >= 1:  # at least one job of block 1 finished, others still to run
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)
    finished = _finished_outputs(workdir)
    assert any("block1" in str(p) for p in finished)
    assert not (workdir / "results" / "llama" / "thanos_u50" / "model").exists()
    # the killed run's jobs ran in forks of the run's worker; the resume runs each job in its own Python,
    # and gives the same bytes as the uninterrupted run (worker) below
    (killed_log,) = (workdir / ".snakemake" / "log").glob("*.snakemake.log")
    assert "jobs run in forks of one warm worker" in killed_log.read_text()
    # the documented resume after SIGKILL: --unlock, then the same command with --rerun-incomplete
    snakemake(workdir, config, "--unlock")
    resumed_run = snakemake(workdir, config, "--rerun-incomplete", env={"THANOS_WORKER": "off"})
    assert "THANOS_WORKER=off: every job starts its own Python" in resumed_run.stdout + resumed_run.stderr
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime, f"finished output recomputed: {path}"
    # the uninterrupted run (same models, calibration and recipe; granularity recipe) gives the same bytes
    reference = e2e / "results" / "llama"
    resumed = workdir / "results" / "llama"
    shards = sorted((reference / "thanos_u50" / "model").glob("*.safetensors"))
    assert shards
    for shard in shards:
        assert (resumed / "thanos_u50" / "model" / shard.name).read_bytes() == shard.read_bytes(), shard.name
    assert _tree_bytes(resumed / "thanos_u50" / "pruned" / key, "*.safetensors") == _tree_bytes(
        reference / "thanos_u50" / "pruned" / key, "*.safetensors"
    )
    for store in ("dense/hessians_0.zarr", "thanos_u50/inputs_1.zarr", "thanos_u50/hessians_1.zarr"):
        chain_store = f"calib/{key}/chains/{store}"
        assert _tree_bytes(resumed / chain_store) == _tree_bytes(reference / chain_store), store
    # nothing left to do
    dry = snakemake(workdir, config, "-n")
    assert "Nothing to be done" in dry.stdout + dry.stderr


@pytest.mark.slow
def test_ctrl_c_ends_the_workflow_in_one_line(e2e, text, tmp_path):
    """Ctrl-C (SIGINT to Snakemake, its worker and its jobs, as a terminal sends it) once a job of block 1
    finished: Snakemake stops, no job it ended is shown as an error (no "Error in rule", no
    ``WorkflowError``, no traceback), the last line says how to resume; the same command, without
    ``--unlock``, finishes the run to the bytes of the uninterrupted one."""
    from thanos.jobs.interrupt import LINE

    workdir = tmp_path / "interrupted"
    config = workflow_config(text, {"llama": MODELS["llama"]}, {"thanos_u50": RECIPES["thanos_u50"]},
                             granularity="layer")  # fmt: skip
    proc = snakemake(workdir, config, popen=True)
    key = calibration_key({"text_field": "text", **config["calibration"]})
    block1 = workdir / "results" / "llama" / "thanos_u50" / "pruned" / key / "block1"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if any(p.resolve() not in _incomplete(workdir) for p in block1.glob("*.json")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    terminal = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode != 0 and "Will exit after finishing currently running jobs" in terminal
    assert terminal.rstrip().splitlines()[-1] == LINE, terminal[-3000:]
    after = terminal.split("Will exit after finishing currently running jobs")[1]
    for shown in ("Error in rule", "WorkflowError", "Traceback", "RuleException", "failed;", "ERROR"):
        assert shown not in after, after[-3000:]
    assert not (workdir / "results" / "llama" / "thanos_u50" / "model").exists()
    snakemake(workdir, config)
    shards = sorted((e2e / "results" / "llama" / "thanos_u50" / "model").glob("*.safetensors"))
    resumed = workdir / "results" / "llama" / "thanos_u50" / "model"
    assert shards and all((resumed / s.name).read_bytes() == s.read_bytes() for s in shards)


@pytest.mark.slow
@pytest.mark.parametrize("number", ["SIGTERM", "SIGINT"])
def test_thanos_workflow_stops_on_a_signal_to_its_pid_alone(e2e, text, tmp_path, number):
    """``thanos workflow`` sent SIGTERM or SIGINT by pid (a supervisor's ``kill``, not a terminal's Ctrl-C to
    the process group): Snakemake and its jobs stop as on a Ctrl-C, at once, and the last line says how to
    resume, exit status 128 + the signal's number (a SIGTERM waited for the running jobs to finish, then
    said ``At least one job did not complete successfully``, exit status 1; a SIGINT was not passed on and
    the run went on to its end); the same command then finishes the run to the uninterrupted one's bytes."""
    import subprocess
    import sys

    from thanos.jobs.interrupt import LINE

    workdir = tmp_path / "stopped"
    workdir.mkdir()
    config = workflow_config(text, {"llama": MODELS["llama"]}, {"thanos_u50": RECIPES["thanos_u50"]},
                             granularity="layer")  # fmt: skip
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "thanos",
        "workflow",
        "--cores",
        "2",
        "--nocolor",
        "--configfile",
        "config.yaml",
    ]
    proc = subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    key = calibration_key({"text_field": "text", **config["calibration"]})
    block0 = workdir / "results" / "llama" / "thanos_u50" / "pruned" / key / "block0"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not list(block0.glob("*.json")):
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be stopped"
    os.kill(proc.pid, getattr(signal, number))
    terminal = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 128 + getattr(signal, number), terminal[-3000:]
    assert terminal.rstrip().splitlines()[-1] == LINE and "did not complete successfully" not in terminal
    assert not (workdir / "results" / "llama" / "thanos_u50" / "model").exists()
    again = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    shards = sorted((e2e / "results" / "llama" / "thanos_u50" / "model").glob("*.safetensors"))
    resumed = workdir / "results" / "llama" / "thanos_u50" / "model"
    assert shards and all((resumed / s.name).read_bytes() == s.read_bytes() for s in shards)


@pytest.mark.slow
def test_recipe_job_resumes_at_the_last_finished_block(e2e, text, tmp_path):
    """A recipe's job (granularity recipe) that died after block 0 (pruned, propagated) keeps that work
    and finishes the rest; a changed recipe discards the previous per-block outputs."""
    workdir = tmp_path / "chain"
    shutil.copytree(e2e, workdir, symlinks=True)  # copystat: the same mtimes, so Snakemake sees no change
    config = workflow_config(text, MODELS, RECIPES)
    results = workdir / "results" / "llama"
    chain = calibrated(results) / "chains" / "thanos_u50"
    pruned = results / "thanos_u50" / "pruned" / chain.parents[1].name
    reference = _tree_bytes(pruned, "*.safetensors") | _tree_bytes(chain)
    (pruned / "chain.json").unlink()  # the state of a chain job killed after block 0: no summary, no model
    shutil.rmtree(results / "thanos_u50" / "model")
    shutil.rmtree(pruned / "block1")
    shutil.rmtree(chain / "hessians_1.zarr")
    kept = {p: p.stat().st_mtime_ns for p in [*(pruned / "block0").iterdir(), chain / "inputs_1.zarr"]}
    out = snakemake(workdir, config, "--quiet", "rules")
    ran = out.stdout + out.stderr
    assert "prune_recipe" in ran and "assemble" in ran, ran[-2000:]
    assert "capture" not in ran and "calibrate" not in ran and "embed" not in ran, ran[-2000:]
    for path, mtime in kept.items():
        assert path.stat().st_mtime_ns == mtime, f"finished block output recomputed: {path}"
    summary = json.loads((pruned / "chain.json").read_text())
    layers = len(summary["layers"])
    assert summary["computed"] == {"capture": 1, "prune": layers, "recover": 0, "propagate": 0}
    assert _tree_bytes(pruned, "*.safetensors") | _tree_bytes(chain) == reference
    # another damp for the same recipe name: every block is recomputed, nothing stale is reused
    changed = dict(RECIPES, thanos_u50=dict(RECIPES["thanos_u50"], damp=0.02))
    snakemake(workdir, workflow_config(text, MODELS, changed))
    summary = json.loads((pruned / "chain.json").read_text())
    assert summary["reused"] == {"capture": 0, "prune": 0, "recover": 0, "propagate": 0}
    assert all(p.stat().st_mtime_ns != mtime for p, mtime in kept.items() if p.exists())


def _files(root: Path) -> dict[str, int]:
    """Relative path -> mtime_ns of every file and directory under ``root``."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


@pytest.mark.slow
def test_an_unusable_calibration_is_refused_before_anything_is_deleted(e2e, text, tmp_path):
    """A finished run, then the same config with an empty calibration file: refused by `snakemake -n` and by
    the run, one line naming the key, the file and the fix, every result left as it was (Snakemake deletes a
    job's outputs before it reruns it: the config check runs before); the good config again: nothing to do."""
    workdir = tmp_path / "edited"
    shutil.copytree(e2e, workdir, symlinks=True)  # copystat: the same mtimes, so Snakemake sees no change
    finished = _files(workdir / "results")
    assert sum(name.endswith("/tokens.zarr") for name in finished) == 2  # one calibration, two models
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    for extra in (["-n"], []):
        proc = snakemake(workdir, workflow_config(empty, MODELS, RECIPES), *extra, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-2000:]
        assert f"calibration.source: {empty}: no text: the file is empty; give a file with text" in out, out[
            -2000:
        ]
        assert _files(workdir / "results") == finished
    dry = snakemake(workdir, workflow_config(text, MODELS, RECIPES), "-n")
    assert "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-2000:]
    # another calibration for one model (a real run), then the first again: what it computed is where it
    # left it (its tokens, chains and pruned layers under its key); only that model's assemblies (its
    # published models were the other calibration's) and nothing before them run again, magnitude's not
    # even that, and nothing of the other model
    other = workflow_config(text, {"llama": MODELS["llama"]}, RECIPES)
    other["calibration"]["seed"] = 1
    snakemake(workdir, other)
    again = snakemake(workdir, workflow_config(text, MODELS, RECIPES), "-n", "--quiet", "rules")
    jobs = _job_counts(again.stdout + again.stderr)
    assemblies = len(RECIPES) - 1  # every recipe but magnitude's, of llama
    expected = {"assemble": assemblies, "all": 1, "total": assemblies + 1}
    assert jobs == expected, (again.stdout + again.stderr)[-3000:]


def _job_counts(out: str) -> dict[str, int]:
    """The job counts of Snakemake's 'Job stats' table, its ``total`` included."""
    counts = {}
    for words in (line.split() for line in out.split("Job stats:", 1)[1].splitlines()):
        if len(words) == 2 and words[1].isdigit():
            counts[words[0]] = int(words[1])
        if words[:1] == ["total"]:
            break
    return counts


@pytest.mark.slow
def test_dense_chain_and_magnitude_without_calibration(text, tmp_path):
    workdir = tmp_path / "dense"
    model_dir = workdir / "models" / "llama"
    dense = workflow_config(
        text,
        {"llama": {"path": "models/llama", "tiny": {"family": "llama", **TINY}}},
        {"wanda_u50": {"method": "wanda", "sparsity": 0.5}, "thanos_2-4": RECIPES["thanos_2-4"]},
        chain="dense",
    )
    snakemake(workdir, dense)
    chains = calibrated(workdir / "results" / "llama") / "chains"
    assert sorted(p.name for p in chains.iterdir()) == ["dense"]
    assert {p.name for p in (chains / "dense").iterdir()} >= {
        "inputs_0.zarr",
        "inputs_1.zarr",
        "hessians_0.zarr",
        "hessians_1.zarr",
    }
    for recipe in ("wanda_u50", "thanos_2-4"):
        report = json.loads(
            (workdir / "results" / "llama" / recipe / "model" / "pruning_report.json").read_text()
        )
        assert report["recipe"]["chain"] == "dense"
        assert report["overall_sparsity"] == pytest.approx(0.5)
        assert len(report["layers"]) == 2 * 7

    magnitude = workflow_config(
        text, {"llama": {"path": str(model_dir)}}, {"magnitude_u50": RECIPES["magnitude_u50"]}
    )
    out = snakemake(tmp_path / "magnitude", magnitude)
    assert "rule calibrate" not in out.stdout + out.stderr
    results = tmp_path / "magnitude" / "results" / "llama"
    assert not (results / "calib").exists() and not (results / "chains").exists()
    assert (results / "magnitude_u50" / "model" / "pruning_report.json").is_file()


@pytest.mark.slow
def test_recipe_change_reruns_only_that_recipe(e2e, text):
    changed = dict(RECIPES, sparsegpt_s30={"method": "sparsegpt", "sparsity": "structured:0.3", "damp": 0.02})
    dry = snakemake(e2e, workflow_config(text, MODELS, changed), "-n", "--quiet", "rules")
    counts = _job_counts(dry.stdout + dry.stderr)
    # sparsegpt_s30 on 2 models: its chain job (capture, prune, propagate of every block) and assemble
    assert counts.get("prune_recipe") == 2 and counts.get("assemble") == 2, counts
    for rule in ("calibrate", "embed", "capture", "propagate", "make_tiny_model", "model_info"):
        assert rule not in counts, counts
    assert counts.get("total") == 5, counts  # + the `all` target


@pytest.mark.slow
def test_dry_run_default_config(tmp_path):
    config = REPO / "config.yaml"
    command = snakemake_command(tmp_path, "--configfile", config, "-n", "--cores", "2", "--nocolor")
    proc = run_snakemake(command)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "demo_data" in proc.stdout and "train_demo" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipes", "message"),
    [
        ({"bad": {"method": "obs", "sparsity": 0.5}}, "obs"),
        ({"bad": {"method": "thanos", "sparsity": 124}}, "sparsity"),
        ({"dense": {"method": "thanos", "sparsity": 0.5}}, "dense"),
    ],
)
def test_config_errors_name_the_key(tmp_path, text, recipes, message):
    config = workflow_config(text, {"m": {"path": "nowhere"}}, recipes)
    proc = snakemake(tmp_path, config, "-n", check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


@pytest.mark.slow
def test_recipe_name_made_twice_is_refused(tmp_path, text):
    grid = [{"methods": ["thanos"], "sparsities": ["0.5"]}]
    config = workflow_config(
        text,
        {"m": {"path": "nowhere"}},
        {"thanos_u50": {"method": "thanos", "sparsity": 0.6}},
        recipe_grid=grid,
    )
    proc = snakemake(tmp_path, config, "-n", check=False)
    assert proc.returncode != 0
    assert "recipes.thanos_u50: recipe_grid already makes a recipe of that name" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_granularity_chain_is_the_old_name_of_recipe(tmp_path, text):
    recipes = {"magnitude_u50": {"method": "magnitude", "sparsity": 0.5}}
    models = {"m": {"path": "models/m", "tiny": {"family": "llama", **TINY}}}
    config = workflow_config(text, models, recipes, granularity="chain")
    proc = snakemake(tmp_path, config, "-n")
    assert "granularity: 'chain' is the old name of 'recipe'" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_eval_gpus_needs_a_gpu_device(tmp_path, text):
    recipes = {"magnitude_u50": {"method": "magnitude", "sparsity": 0.5}}
    config = workflow_config(text, {"m": {"path": "nowhere"}}, recipes, eval_gpus=2)  # device: cpu
    proc = snakemake(tmp_path, config, "-n", check=False)
    assert proc.returncode != 0
    assert "eval_gpus: 2" in proc.stdout + proc.stderr and "device: cpu" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_device_cuda_without_a_gpu_is_refused_naming_the_key(tmp_path, text):
    """Refused at the config check, before any job: a job would fail on it with the CLI's --device flag."""
    recipes = {"magnitude_u50": {"method": "magnitude", "sparsity": 0.5}}
    config = workflow_config(text, {"m": {"path": "nowhere"}}, recipes, device="cuda")
    proc = snakemake(tmp_path, config, "-n", check=False, env={"CUDA_VISIBLE_DEVICES": ""})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "device: cuda, but the jobs of this machine would see no GPU" in output
    assert "--device" not in output
    given = snakemake(tmp_path, config, "-n", "--resources", "gpu=1", env={"CUDA_VISIBLE_DEVICES": ""})
    assert given.returncode == 0  # --resources gpu=K: the user says there are K


def test_thanos_workflow_uses_the_packaged_profile_unless_one_is_named():
    """`thanos workflow` resumes after Ctrl-C by itself: its Snakemake run loads the packaged local profile
    (rerun-incomplete), which Snakemake would not find by itself; a profile the user names is left alone."""
    from thanos.commands.workflow import snakemake_command

    command = snakemake_command(["--cores", "2"])
    profile = Path(command[command.index("--workflow-profile") + 1])
    assert "rerun-incomplete: true" in (profile / "config.yaml").read_text()
    assert command[-2:] == ["--cores", "2"]
    for named in (["--profile", "p"], ["--workflow-profile=w"]):
        assert "--workflow-profile" not in snakemake_command(named)  # (as one argument: ours)
