"""Disk: the estimate ``prune_model`` prints and checks before it starts, against the bytes measured on
real runs (tiny dense and mixture-of-experts models and one of the demo model's shapes, real zarr stores);
the default retention (``--keep needed``): what a resume and a second recipe need is kept, nothing else,
and a rerun has nothing to do; a sequential chain whose own stores were deleted still resumes to the same
bytes; a run that does not fit is refused before anything is written; ``thanos workdirs`` lists and
deletes working directories."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_tiny_model, thanos_here, write_corpus

from thanos.files.layout import Layout
from thanos.recipes.recipe import Recipe
from thanos.runner.api import prune_model
from thanos.stages.describe.provenance import path_bytes
from thanos.stages.engine import Calibration, RecipeFiles, RunOptions, run_recipe

COMMON = {"nsamples": 16, "seqlen": 32, "device": "cpu", "cores": 2}


def _prune(model: Path, corpus: Path, root: Path, name: str, method: str = "thanos", **options):
    stream = io.StringIO()
    report = prune_model(
        model, method, options.pop("sparsity", 0.5), out=root / f"out-{name}", calibration=corpus,
        workdir=root / f"work-{name}", stream=stream, **COMMON | options,
    )  # fmt: skip
    return report, stream.getvalue()


def _estimate(terminal: str) -> tuple[float, float]:
    """(peak, after) in bytes from the header's disk line."""
    import re

    units = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
    found = re.search(r"disk: the workdir up to ([\d.]+) (\w+), ([\d.]+) (\w+) after the run", terminal)
    assert found is not None, terminal
    peak, peak_unit, after, after_unit = found.groups()
    return float(peak) * units[peak_unit], float(after) * units[after_unit]


def _demo_shaped(tmp_path: Path) -> Path:
    """A random model of the demo model's shapes (``thanos.demo.train.TrainOptions``: the stores' sizes
    depend on the shapes, not on the trained weights)."""
    from thanos.demo.train import TrainOptions

    demo = TrainOptions()
    return make_tiny_model(
        tmp_path, "llama", hidden_size=demo.hidden_size, intermediate_size=demo.intermediate_size,
        num_blocks=demo.num_layers, num_heads=demo.num_heads, num_kv_heads=demo.num_kv_heads,
        max_position_embeddings=demo.max_position_embeddings,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "demo-shaped"])
def test_the_estimate_is_within_20_percent_of_what_the_run_takes(tmp_path, family):
    if family == "demo-shaped":
        model = _demo_shaped(tmp_path)
    else:
        model = make_tiny_model(tmp_path, family, num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=60)
    # the demo shape checks the arithmetic on larger stores; --keep needed's deletions: the tiny models
    for keep in ("all",) if family == "demo-shaped" else ("all", "needed"):
        report, terminal = _prune(model, corpus, tmp_path, keep, keep=keep)
        peak, after = _estimate(terminal)
        measured = path_bytes(report["workdir"])
        assert abs(after / measured - 1) < 0.2, (keep, after, measured)
        if keep == "all":  # nothing is deleted: the peak is what is left
            assert abs(peak / measured - 1) < 0.2, (peak, measured)
        else:
            assert peak > after  # the stores of a block and the pruned layers are there for a while
        closing = terminal.splitlines()[-1]  # the sizes left on disk
        assert closing.startswith("  disk: --out ") and f"(--keep {keep};" in closing


@pytest.mark.slow
def test_the_default_keeps_what_a_resume_and_another_recipe_need_and_nothing_else(tmp_path):
    model = make_tiny_model(tmp_path, "llama", num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=60)
    report, _ = _prune(model, corpus, tmp_path, "a")
    results = Path(report["workdir"]) / "results" / model.name
    kept = {str(p.relative_to(results)) for p in results.rglob("*") if p.name.endswith(".zarr")}
    assert kept == {"calib/tokens.zarr", "chains/dense/inputs_0.zarr", "chains/dense/hessians_0.zarr"}
    recipe = results / "thanos_u50"
    assert not list((recipe / "model").glob("*.safetensors"))  # --out holds the only copy of the weights
    assert (recipe / "model" / "pruning_report.json").is_file()  # the recipe is done: a rerun does nothing
    assert not list((recipe / "pruned").glob("block*"))  # the layers are in the assembled model
    assert not list((results / "chains").glob("thanos_u50/*.zarr"))  # deleted as each block was done

    again = io.StringIO()
    prune_model(
        model, "thanos", 0.5, out=tmp_path / "out-a", calibration=corpus, workdir=report["workdir"],
        stream=again, **COMMON,
    )  # fmt: skip
    assert "nothing to do" in again.getvalue() and "done:" not in again.getvalue()

    second = io.StringIO()  # another recipe on the same calibration: the shared stores are reused
    prune_model(
        model, "sparsegpt", "2:4", out=tmp_path / "out-b", calibration=corpus, workdir=report["workdir"],
        stream=second, **COMMON,
    )  # fmt: skip
    lines = second.getvalue().splitlines()
    for step in ("sample calibration tokens", "Hessians of block 0"):  # named as reused, not run
        mentions = [line for line in lines if step in line]
        assert len(mentions) == 1 and "reused: " in mentions[0], second.getvalue()
    assert "written:" in second.getvalue()

    full, _ = _prune(model, corpus, tmp_path, "all", keep="all")  # the same weights whatever is kept
    for name in ("model.safetensors", "sparsity.json"):
        assert (tmp_path / "out-a" / name).read_bytes() == (Path(full["out"]) / name).read_bytes()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_chain_whose_own_stores_were_deleted_resumes_to_the_same_bytes(tmp_path):
    model = make_tiny_model(tmp_path, "llama", num_blocks=4)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    recipe = Recipe("thanos_u50", "thanos", 0.5)

    def run(root: Path, **options) -> RecipeFiles:
        files = RecipeFiles.of(Layout(str(root)), "tiny", recipe)
        run_recipe(model, recipe, files, Calibration(str(corpus), 8, 32), RunOptions("cpu", **options))
        return files

    reference = run(tmp_path / "keep")
    files = run(tmp_path / "drop", drop=("inputs", "hessians"))
    assert files.chain_dir is not None and not list(files.chain_dir.glob("*.zarr"))  # deleted block by block
    # a finished block's layer lost, its inputs deleted: propagated again from block 0, nothing else pruned
    layer = files.pruned_root / "block2" / "mlp.down_proj.safetensors"
    layer.unlink()
    files.summary.unlink()
    shutil.rmtree(files.model_dir)
    run(tmp_path / "drop", drop=("inputs", "hessians"))
    summary = json.loads(files.summary.read_text())
    assert summary["reused"]["prune"] == 2 * 7 + 6 and summary["computed"]["prune"] == 1 + 7
    weights = "model.safetensors"
    assert _digest(files.model_dir / weights) == _digest(reference.model_dir / weights)


@pytest.mark.slow
def test_a_run_that_does_not_fit_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    import thanos.runner.disk as disk

    model = make_tiny_model(tmp_path, "llama", num_blocks=2)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    full = shutil.disk_usage(tmp_path)._replace(free=100_000)  # a disk with 100 kB free
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: full)
    with pytest.raises(
        ValueError, match=r"not enough disk space: the run needs about .* 97.7 KiB free"
    ) as err:
        _prune(model, corpus, tmp_path, "x")
    assert "disk_check=False runs anyway" in str(err.value) and "thanos workdirs" in str(err.value)
    assert not (tmp_path / "work-x").exists() and not (tmp_path / "out-x").exists()
    refused = thanos_here(
        "prune-model", "--model", model, "--method", "magnitude", "--sparsity", "0.5",
        "--out", tmp_path / "o", "--keep", "some", cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2 and "--keep: invalid choice: 'some'" in refused.stderr


def test_a_combined_recipe_that_does_not_fit_is_refused_before_its_first_part(tmp_path, monkeypatch):
    """A combined recipe's parts checked together at its door (each estimated on the input model): where
    the first part alone fits and the whole does not, the refusal names the whole recipe and nothing is
    written (the first part checked alone wrote its model, then the second was refused)."""
    import thanos.runner.checks as checks
    import thanos.runner.disk as disk

    model = make_tiny_model(tmp_path, "llama", num_blocks=4)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    needs: list[tuple[int, int, int]] = []

    def recorded(workdir, out, need_workdir, need_out, need_together, *args):
        needs.append((need_workdir, need_out, need_together))
        return disk.check_free.__wrapped__(workdir, out, need_workdir, need_out, need_together, *args)

    recorded.__wrapped__ = disk.check_free  # type: ignore[attr-defined]
    monkeypatch.setattr(disk, "check_free", recorded)
    monkeypatch.setattr(checks, "check_free", recorded)
    _, said = _prune(model, corpus, tmp_path / "dry", "a", sparsity="depth:1+neurons:0.25", dry_run=True)
    assert "disk: the parts together up to " in said and not (tmp_path / "dry" / "work-a").exists(), said
    needs.clear()  # the dry run's own part check
    _prune(model, corpus, tmp_path / "fits", "a", sparsity="depth:1+neurons:0.25")
    whole, first, _ = needs  # the door's, then each part's own
    assert whole[2] > first[2]
    free = (disk.with_margin(first[2]) + disk.with_margin(whole[2])) // 2
    monkeypatch.setattr(disk, "free_bytes", lambda path: (free, 1))
    with pytest.raises(ValueError, match=r"not enough disk space: depth:1\+neurons:0.25, its parts together"):
        _prune(model, corpus, tmp_path / "short", "b", sparsity="depth:1+neurons:0.25")
    assert not (tmp_path / "short" / "work-b").exists() and not (tmp_path / "short" / "out-b").exists()


def test_a_size_point_refused_for_disk_names_the_working_directory_alone(tmp_path, monkeypatch):
    """A size's point keeps its model where it is assembled: a point that does not fit names the working
    directory and its free space, not the internal model directory as ``--out``."""
    import thanos.runner.disk as disk

    model = make_tiny_model(tmp_path, "llama", num_blocks=4)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=24)
    monkeypatch.setattr(disk, "free_bytes", lambda path: (1 << 20, 1))  # 1 MiB free
    with pytest.raises(ValueError) as err:
        _prune(model, corpus, tmp_path, "s", sparsity="params:0.2", disk_check=True)
    said = str(err.value)
    assert "needs about" in said and "workdir=" in said and "out=" not in said.split("; free")[0], said
    assert "candidates" not in said, said


def test_each_filesystem_is_named_with_its_own_free_space(tmp_path, monkeypatch):
    """--workdir and --out on two filesystems: each need beside its own free space."""
    import thanos.runner.disk as disk

    monkeypatch.setattr(disk, "free_bytes", lambda path: (0, 1) if path.name == "w" else (10 * 2**30, 2))
    with pytest.raises(ValueError) as err:
        disk.check_free(tmp_path / "w", tmp_path / "o", 1000, 2000, 3000)
    assert "(0 B free) and 16 MiB for " in str(err.value), str(err.value)  # 2000 B and the margin
    assert "(10 GiB free) (each with 2 % and 16 MiB for the filesystem's blocks); free" in str(err.value)
    disk.check_free(tmp_path / "w", tmp_path / "o", 0, 2000, 2000)  # nothing more in the workdir: no margin
    monkeypatch.setattr(disk, "free_bytes", lambda path: (2**30, 1))  # one filesystem: 1 GiB free
    disk.check_free(tmp_path / "w", tmp_path / "o", 10**9 - 2**25, 1, 10**9 - 2**25)
    with pytest.raises(ValueError, match="the run needs about 1.03 GiB in"):  # fits by bytes, not with margin
        disk.check_free(tmp_path / "w", tmp_path / "o", 10**9, 1, 2**30 - 2**20)


def test_a_dry_run_says_the_disk_and_writes_nothing(tmp_path):
    model = make_tiny_model(tmp_path, "llama", num_blocks=2)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    result, terminal = _prune(model, corpus, tmp_path, "dry", dry_run=True)
    assert "dry run: everything above was checked; nothing was run or written" in terminal
    assert "a run writes its full log to" in terminal and "  full log" not in terminal  # none written
    peak, after = _estimate(terminal)
    assert result["disk"]["model"] > 0 and peak > 0
    for key, printed in (("peak", peak), ("after", after)):  # Python gets the totals the command prints
        assert abs(result["disk"][key] - printed) <= 0.01 * printed + 1024, (key, result["disk"], printed)
    assert not (tmp_path / "work-dry").exists() and not (tmp_path / "out-dry").exists()


def _workdirs(*args: str | Path, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "thanos", "workdirs", "--root", str(root), *map(str, args)],
        capture_output=True,
        text=True,
    )


def test_workdirs_says_what_deletes_a_search_and_a_given_workdir(tmp_path: Path) -> None:
    """An interrupted size's search is listed with the command that deletes it (the whole search, with
    ``--root`` where it was listed under one: ``--delete NAME/params:0.25`` freed nothing, and without
    ``--root`` named another directory); that command for the size alone is refused, saying why; a
    ``--workdir`` given to prune-model (which holds working directories) is named as such."""
    from thanos.runner.workdirs import record_run

    given = tmp_path / "mine"
    search = given / "search"
    record_run(search, "/m", {"source": "c.txt", "nsamples": 8, "seqlen": 32}, "params:0.25")
    (search / "candidates").mkdir()
    listed = thanos_here("workdirs", "--root", given, cwd=tmp_path)
    assert f"delete: thanos workdirs --root {given} --delete search)" in listed.stdout, listed.stdout
    alone = thanos_here("workdirs", "--root", given, "--delete", "search/params:0.25", cwd=tmp_path)
    assert alone.returncode == 2 and "is a size's search: its cost table serves every size" in alone.stderr
    whole = thanos_here("workdirs", "--delete", given, cwd=tmp_path)
    assert whole.returncode == 2 and "it holds working directories (search: a --workdir" in whole.stderr
    assert search.is_dir()
    deleted = thanos_here("workdirs", "--root", given, "--delete", "search", cwd=tmp_path)
    assert deleted.returncode == 0 and not search.exists(), deleted.stderr


@pytest.mark.slow
def test_workdirs_lists_and_deletes_the_working_directories(tmp_path, monkeypatch):
    from thanos.files.locks import exclusive_workdir

    root = tmp_path / "cache"
    monkeypatch.setenv("THANOS_WORKDIR", str(root))
    model = make_tiny_model(tmp_path, "llama", num_blocks=2)
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=40)
    reports = []
    for nsamples in (8, 16):  # two calibrations: two working directories
        reports.append(
            prune_model(
                model,
                "wanda",
                0.5,
                out=tmp_path / f"out{nsamples}",
                calibration=corpus,
                seqlen=32,
                nsamples=nsamples,
                device="cpu",
                stream=io.StringIO(),
            )  # fmt: skip
        )
    small, large = (Path(r["workdir"]) for r in reports)
    plain = tmp_path / "magnitude"  # a recipe that reads no text: none said (not the default's c4)
    prune_model(
        model, "magnitude", 0.5, out=tmp_path / "om", workdir=plain, device="cpu", stream=io.StringIO()
    )
    assert "calibration none (its recipes read no calibration text)" in _workdirs(root=tmp_path).stdout
    # a distillation's checkpoints (thanos distill's default --work is under root/distill)
    from thanos.stages.distill.files import prepare_work

    checkpoints = root / "distill" / "n30-0123456789"
    about = {"student": str(tmp_path / "n30"), "teacher": str(model), "out": str(tmp_path / "n30-kd")}
    prepare_work(checkpoints, {"options": {"tokens": 512}}, about)
    (checkpoints / "checkpoint").mkdir()
    (checkpoints / "checkpoint" / "state.pt").write_bytes(b"\0" * 4096)
    listed = _workdirs(root=root)
    assert f"distill/{checkpoints.name}" in listed.stdout, listed.stdout
    what = f"distillation checkpoints of {tmp_path / 'n30-kd'} (student {tmp_path / 'n30'}, teacher {model})"
    assert f"{what}, kept to resume it; last run" in listed.stdout, listed.stdout
    block = listed.stdout.split(f"distill/{checkpoints.name}")[1].split("\n")[1]  # its line: no recipes
    assert "recipes" not in block and "calibration" not in block
    with exclusive_workdir(checkpoints, "--work"):  # a distillation is running
        busy = _workdirs("--delete", f"distill/{checkpoints.name}", root=root)
    assert busy.returncode == 2 and "a run is using it now" in busy.stderr and checkpoints.is_dir()
    deleted = _workdirs("--delete", f"distill/{checkpoints.name}", root=root)
    assert deleted.returncode == 0 and not checkpoints.exists(), deleted.stderr
    listed = _workdirs(root=root)
    assert listed.returncode == 0, listed.stderr
    assert small.name in listed.stdout and large.name in listed.stdout
    assert f"model {model}; calibration 16 x 32 of {corpus}" in listed.stdout
    assert "recipes wanda_u50" in listed.stdout and "in all, under" in listed.stdout
    assert listed.stdout.index(large.name) < listed.stdout.index(small.name)  # largest first

    refused = _workdirs("--delete", tmp_path, root=root)  # not a working directory: nothing deleted
    assert refused.returncode == 2 and "not a working directory" in refused.stderr and model.is_dir()
    assert (
        "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1
    )  # stderr not a terminal
    missing = _workdirs("--delete", tmp_path / "nowhere", root=root)
    assert missing.returncode == 2 and "nowhere: no such directory" in missing.stderr
    with exclusive_workdir(small):  # a run is using it
        busy = _workdirs("--delete", small.name, large.name, root=root)
    assert busy.returncode == 2 and "a run is using it now" in busy.stderr and large.is_dir()
    deleted = _workdirs("--delete", small.name, root=root)
    assert deleted.returncode == 0 and f"deleted {root / small.name}" in deleted.stdout
    assert not small.exists() and large.is_dir() and (tmp_path / "out8" / "model.safetensors").is_file()
    with exclusive_workdir(large):  # --delete-all keeps one in use, and says so
        kept = _workdirs("--delete-all", root=root)
    assert kept.returncode == 0 and f"kept {large} (in use by pid" in kept.stdout and large.is_dir()
    everything = _workdirs("--delete-all", root=root)
    assert everything.returncode == 0 and not large.exists()
    wrong = _workdirs(root=tmp_path / "nowhere")  # it said "no working directories under" it
    assert wrong.returncode == 2 and f"--root {tmp_path / 'nowhere'}: no such directory" in wrong.stderr
    assert "no working directories" in _workdirs(root=root).stdout
