"""``thanos prune-model`` end to end on a tiny model (every stage in one process: real zarr stores,
real transformers): a run, a second run that does nothing, a run killed with SIGKILL after a block
finished and resumed (same bytes), a second recipe that reuses the calibration; and the checks made
before any step runs (bad arguments, unsupported architecture, a foreign --out). The first run, the killed
one and the interrupted one are processes of their own; the reruns and resumes run in this process
(``thanos_here``: the same ``thanos.cli.main``, without the process start).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import thanos_here
from helpers.terminal import thanos_as_terminal

from thanos.runner.recipe_options import RecipeOptions
from thanos.runner.workdirs import default_workdir, model_slug
from thanos.stages.outputs import store_complete

REPO = Path(__file__).resolve().parents[1]
WORDS = "the a model prunes weights layer block sparse dense matrix input output token row column".split()
RECIPE = "thanos_2-4"  # --method thanos --sparsity 2:4: n:m means every row n:m (alpha 0, the default)
CALIBRATION = ("--nsamples", "16", "--seqlen", "64")


def thanos(*args: str | Path, cwd: Path, popen: bool = False, env: dict[str, str] | None = None):
    cmd = [sys.executable, "-m", "thanos", *map(str, args)]
    if popen:
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny 6-block Llama (python -m thanos make-tiny-model) and a local jsonl calibration file."""
    import random

    root = tmp_path_factory.mktemp("inputs")
    model = root / "tiny-llama"
    built = thanos_here(
        "make-tiny-model", "--hidden-size", "64", "--num-blocks", "6", "--out", model, cwd=root
    )
    assert built.returncode == 0, built.stderr[-2000:]
    rng = random.Random(0)
    calib = root / "calib.jsonl"
    calib.write_text(
        "".join(
            json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(90))}) + "\n" for _ in range(60)
        )
    )
    return model, calib


def prune(inputs, out: Path, workdir: Path, *extra: str, popen: bool = False, process: bool = False):
    """The run of ``inputs`` into ``out``: in a process of its own (``popen``: running, ``process``:
    finished), else in this process as a new one runs it (``thanos_here``: a rerun is not about the
    process, and the process start is most of a rerun's seconds)."""
    model, calib = inputs
    args = ["prune-model", "--model", model, "--method", "thanos", "--sparsity", "2:4"]
    args += ["--calibration", calib, *CALIBRATION, "--device", "cpu", "--cores", "2"]
    args += ["--workdir", workdir, "--out", out, *extra]
    if popen or process:
        return thanos(*args, cwd=out.parent, popen=popen)
    return thanos_here(*args, cwd=out.parent)


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def first(inputs, tmp_path_factory) -> tuple[Path, Path, str]:
    """One complete run, in a process of its own as a user starts it: (out, workdir, terminal output)."""
    root = tmp_path_factory.mktemp("first")
    run = prune(inputs, root / "out", root / "work", process=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    return root / "out", root / "work", run.stdout + run.stderr


@pytest.mark.slow
def test_prune_model_writes_a_loadable_self_describing_model(first, inputs):
    from transformers import AutoModelForCausalLM

    from thanos.stages.describe.sparsity import summarize

    out, workdir, terminal = first
    for line in ("recipe thanos_2-4", "every row of every pruned layer is 2:4", "block 6/6 done"):
        assert line in terminal, terminal
    assert f"written: {out}" in terminal
    log = (workdir / "logs" / f"{RECIPE}.log").read_text()
    assert "INFO thanos" not in terminal and "capture block" not in terminal  # the stages' log lines and
    assert "thanos.stages.chain: chain: block 6/6 done" in log and "capture block" in log  # bars: the file
    report = json.loads((out / "pruning_report.json").read_text())
    assert report["recipe"]["name"] == RECIPE and report["calibration"]["nsamples"] == 16

    model = AutoModelForCausalLM.from_pretrained(out)
    weights = dict(model.named_parameters())
    assert len(report["layers"]) == 6 * 7
    for entry in report["layers"]:  # 2:4 holds in every group of every row of every pruned layer
        w = weights[entry["tensor"]]
        zeros_per_group = (w == 0).reshape(w.shape[0], -1, 4).sum(-1)
        assert bool((zeros_per_group >= 2).all()), entry["tensor"]
        assert entry["outlier_rows"] == 0
    original = AutoModelForCausalLM.from_pretrained(inputs[0])
    for name, p in original.named_parameters():
        if name not in {entry["tensor"] for entry in report["layers"]}:
            assert torch.equal(weights[name], p), name

    assert (out / "config.json").read_bytes() == (inputs[0] / "config.json").read_bytes()
    facts = json.loads((out / "sparsity.json").read_text())
    assert facts["structure"] == "2:4" and facts["dense_linear"] == ["lm_head"]
    total = sum(p.numel() for p in model.parameters())
    zeros = sum(int((p == 0).sum()) for p in model.parameters())
    assert facts["all_parameters"] == {"parameters": total, "zeros": zeros, "sparsity": zeros / total}
    # the command reads the counts from sparsity.json; counted again on the weights: the same
    assert summarize(out, report, described=True) == summarize(out, report)

    card = (out / "README.md").read_text()
    assert "# tiny-llama: Thanos 2:4" in card and "dense rows" not in card.split("\n## ")[0].split("\n\n")[0]
    assert "Every row of every pruned layer is 2:4: n:m sparse kernels" in card
    assert "| achieved sparsity | 50.00 % of the" in card
    assert "| self_attn.q_proj | 6 |" in card
    assert f"16 x 64 tokens from `{inputs[1].name}`" in card
    assert f"--sparsity 2:4 --alpha 0 --blocksize 512 --calibration {inputs[1].name}" in card
    assert f"--out {out.name}" in card and "@article{ilin2025thanos" in card and "arXiv:2504.05346" in card
    assert "/" + str(out.parent).strip("/") not in card and str(inputs[0].parent) not in card  # uploadable
    assert "Not evaluated" in card


@pytest.mark.slow
def test_second_run_does_nothing(first, inputs):
    out, workdir, _ = first
    before = _files(out)
    again = prune(inputs, out, workdir)
    terminal = again.stdout + again.stderr
    assert again.returncode == 0, terminal[-3000:]
    assert "nothing to do" in terminal and "done:" not in terminal
    assert f"unchanged (it already holds this model): {out}" in terminal
    assert _files(out) == before


@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does(inputs, tmp_path):
    """SIGTERM (a shell's kill, a scheduler's cancel) once block 0's Hessians are computed: the run ends with
    the resume line last on its terminal and exit status 143, nothing published; the same command resumes
    it and writes the bytes of an uninterrupted run. 64 windows: the blocks after the signal take seconds,
    so that a busy machine delivering it late still finds the run in them."""
    longer = ("--nsamples", "64")
    out, workdir = tmp_path / "out", tmp_path / "work"
    proc = prune(inputs, out, workdir, *longer, popen=True)
    lines = []
    for line in iter(proc.stdout.readline, b""):
        lines.append(line.decode())
        if "done: Hessians of block 0" in lines[-1]:
            proc.send_signal(signal.SIGTERM)
    terminal = "".join(lines)
    assert proc.wait() == 143, terminal[-3000:]
    last = lines[-1]
    assert last.startswith("terminated (SIGTERM) after ") and "run the same command to resume" in last, last
    assert "Traceback" not in terminal and "ERROR" not in terminal and not out.exists()
    resumed = prune(inputs, out, workdir, *longer)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert "resumed: 4 steps" in resumed.stderr and "sample calibration tokens" not in resumed.stderr
    reference = prune(inputs, tmp_path / "reference", tmp_path / "reference-work", *longer)
    assert reference.returncode == 0, reference.stderr[-3000:]
    for name in ("model.safetensors", "config.json"):
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_bytes(first, inputs, tmp_path):
    reference = first[0]
    out, workdir = tmp_path / "out", tmp_path / "work"
    pruned = workdir / "results" / "tiny-llama" / RECIPE / "pruned"
    chain_dir = workdir / "results" / "tiny-llama" / "chains" / RECIPE
    proc = prune(inputs, out, workdir, popen=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        propagated = any(store_complete(chain_dir / f"inputs_{b}.zarr") for b in range(1, 6))
        if propagated and not (pruned / "block5").exists():
            break  # a block propagated, blocks left (--keep needed deletes each block's inputs once done)
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the command, as a lost session would
    proc.wait()
    killed = proc.stdout.read().decode()
    assert not out.exists() and "written" not in killed
    finished = sum(1 for b in range(6) if len(list((pruned / f"block{b}").glob("*.json"))) == 7)
    # k: the blocks propagated before the kill (the last block whose inputs are written; --keep needed has
    # deleted the earlier blocks' own stores)
    k = max((b for b in range(1, 6) if store_complete(chain_dir / f"inputs_{b}.zarr")), default=0)
    assert k >= 1 and not any(store_complete(chain_dir / f"inputs_{b}.zarr") for b in range(1, k))

    resumed = prune(inputs, out, workdir)
    terminal = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, terminal[-4000:]
    done = "block 1" if k == 1 else f"blocks 1-{k}"
    assert f"resuming: {done} of 6 done, starting at block {k + 1}" in terminal, terminal[-3000:]
    assert "resumed: " in terminal and "finished in an earlier run of this recipe were kept" in terminal
    assert "sample calibration tokens" not in terminal  # finished before the kill: kept
    assert all(f"block {b}/6 done" in terminal for b in range(k + 1, 7)), terminal[-3000:]  # none missing
    summary = json.loads((pruned / "chain.json").read_text())
    # only the blocks not finished before the kill: at most 6 - k captures and 6 - k - 1 propagations
    assert summary["computed"]["capture"] <= 6 - k and summary["computed"]["propagate"] <= 6 - k - 1, summary
    assert summary["reused"]["prune"] >= 7 * finished and summary["computed"]["prune"] <= 7 * (6 - finished)
    assert not (pruned / "block0").exists()  # --keep needed: the layers are in the assembled model
    for name in ("model.safetensors", "config.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    files = [json.loads((d / "pruning_report.json").read_text())["files"] for d in (out, reference)]
    files[0].pop("README.md"), files[1].pop("README.md")  # the card names its --out
    assert files[0] == files[1]  # every other file of the model has the same digest
    card = (out / "README.md").read_text().replace(str(out), "OUT")
    assert card == (reference / "README.md").read_text().replace(str(reference), "OUT")


@pytest.mark.slow
def test_another_recipe_reuses_calibration_and_block0(first, inputs):
    out, workdir, _ = first
    results = workdir / "results" / "tiny-llama"
    shared = [results / "calib" / "tokens.zarr", results / "chains" / "dense" / "hessians_0.zarr"]
    before = {p: p.stat().st_mtime_ns for p in shared}
    model, calib = inputs
    other = out.parent / "sparsegpt-50"
    run = thanos_here(
        "prune-model", "--model", model, "--method", "thanos", "--sparsity", "4:8", "--alpha", "0.1",
        "--calibration", calib,
        *CALIBRATION, "--device", "cpu", "--cores", "2", "--workdir", workdir, "--out", other,
        "--evaluate", "ppl", "--ppl-source", calib, cwd=out.parent,
    )  # fmt: skip
    terminal = run.stdout + run.stderr
    assert run.returncode == 0, terminal[-4000:]
    lines = terminal.splitlines()
    for job in ("sample calibration tokens", "embed the calibration", "Hessians of block 0"):
        mentions = [line for line in lines if job in line]  # reused, not run: named once, by the note
        assert len(mentions) == 1 and "reused: " in mentions[0], terminal
    assert {p: p.stat().st_mtime_ns for p in shared} == before
    assert "perplexity" in terminal
    report = json.loads((other / "pruning_report.json").read_text())
    assert report["recipe"]["alpha"] == 0.1  # the paper's Thanos n:m: 10 % of the rows kept dense
    dense_rows = sum(entry["outlier_rows"] for entry in report["layers"])
    assert dense_rows > 0
    facts = json.loads((other / "sparsity.json").read_text())
    assert facts["structure"] == "unstructured"  # 4:8 does not hold in the dense rows
    card = (other / "README.md").read_text()
    assert "Thanos 4:8 + 10 % dense rows" in card and f"{dense_rows} of " in card
    assert "n:m sparse kernels cannot run it as is; alpha 0 gives exact 4:8" in card
    ppl = json.loads(
        (workdir / "results" / "tiny-llama" / "thanos_4-8_a0.1" / "eval" / "perplexity.json").read_text()
    )
    assert f"perplexity **{ppl['ppl']:.2f}**" in card
    # the dense model on the same text, once per model and text: beside the pruned number
    dense = json.loads(
        (workdir / "results" / "tiny-llama" / "dense" / "eval" / "perplexity.json").read_text()
    )
    assert (
        f"the dense model: {dense['ppl']:.2f})" in card and f"the dense model {dense['ppl']:.2f})" in terminal
    )
    assert dense["model"] == str(model) and "perplexity (dense)" in terminal
    assert (out / "model.safetensors").is_file()  # the first recipe's output is untouched


def _same_model(out: Path, expected: dict[str, bytes]) -> bool:
    """``out`` holds the files of ``expected`` ({name: bytes}), the report's record of them included (a
    model computed again: its report's per-layer seconds differ)."""
    files, before = {p.name: p.read_bytes() for p in out.iterdir()}, dict(expected)
    records = [json.loads(f.pop("pruning_report.json"))["files"] for f in (files, before)]
    return records[0] == records[1] and files == before


def _overwrite_tail(path: Path) -> None:
    """Overwrite the last bytes of a file in place, as a script writing into an existing file does."""
    with open(path, "r+b") as handle:
        handle.seek(path.stat().st_size - 64)
        handle.write(b"\x01" * 32)


@pytest.mark.slow
def test_the_published_model_owns_its_bytes(first, inputs):
    """--out is the only full copy of the weights a finished run leaves (--keep needed): the working
    directory keeps the assembled model's small files and a record of the published weights, nothing linked.
    An edit of --out never reaches the cache: the same command assembles the model again."""
    out, workdir, _ = first
    cached = workdir / "results" / "tiny-llama" / RECIPE / "model"
    expected = {p.name: p.read_bytes() for p in out.iterdir()}
    assert not list(cached.glob("*.safetensors")) and (cached / ".published.json").is_file()  # one copy
    report = json.loads((cached / "pruning_report.json").read_text())
    written = {p.name for p in cached.iterdir() if not p.name.startswith(".")}  # no record of inputs
    assert set(report["files"]) == (written - {"pruning_report.json"}) | {"model.safetensors"}
    assert (
        not (cached / "train_report.json").exists() and not (cached / "model.safetensors.index.json").exists()
    )

    # a small file lost: put back from the working directory's copy, nothing computed again
    (out / "tokenizer.json").unlink()
    again = prune(inputs, out, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "written again" in again.stderr and "tokenizer.json is missing" in again.stderr
    assert "nothing to do: every step finished" in again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == expected
    # the published weights edited in place: they are not what was computed: assembled again
    _overwrite_tail(out / "model.safetensors")
    again = prune(inputs, out, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "no longer holds the weights published there" in again.stderr
    assert "prune every block" in again.stderr
    assert "had changed: model.safetensors was changed" in again.stderr  # the file, not "another recipe"
    assert _same_model(out, expected)  # computed again: the same bytes (the report's timings aside)

    # another --out while --out is edited again: assembled again, never copied from the edited one; --keep
    # all keeps the working copy; that copy edited: nothing is published, the file and the fix named
    _overwrite_tail(out / "model.safetensors")
    kept = prune(inputs, out.parent / "third-out", workdir, "--keep", "all")
    assert kept.returncode == 0 and (cached / "model.safetensors").is_file(), kept.stderr[-3000:]
    assert (out.parent / "third-out" / "model.safetensors").read_bytes() == expected["model.safetensors"]
    _overwrite_tail(cached / "model.safetensors")
    refused = prune(inputs, out.parent / "fourth-out", workdir, "--keep", "all")
    assert refused.returncode == 2 and not (out.parent / "fourth-out").exists()
    line = refused.stderr.splitlines()[-1]
    assert line.startswith("ERROR: ") and "model.safetensors" in line and f"delete {cached} " in line, line
    shutil.rmtree(cached)  # the fix: assembled again from the pruned layers --keep all kept
    fixed = prune(inputs, out.parent / "fourth-out", workdir)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "assemble the pruned model" in fixed.stderr
    assert (out.parent / "fourth-out" / "model.safetensors").read_bytes() == expected["model.safetensors"]

    # the user's notes beside the published model: kept, not a change; a stray weights file: not kept
    fourth = out.parent / "fourth-out"
    (fourth / "notes.txt").write_text("mine\n")
    (fourth / "stray.safetensors").write_bytes(b"x")
    again = prune(inputs, fourth, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "notes.txt" not in again.stderr, again.stderr  # (the stray weights: the model assembled again)
    assert (fourth / "notes.txt").read_text() == "mine\n" and not (fourth / "stray.safetensors").exists()


@pytest.mark.slow
def test_a_failing_step_names_its_error_and_the_fixed_rerun_resumes(inputs, tmp_path):
    model, calib = inputs
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"text": "too short"}) + "\n")
    args = ["prune-model", "--model", model, "--method", "wanda", "--sparsity", "0.5", "--calibration", text]
    args += [
        *CALIBRATION,
        "--device",
        "cpu",
        "--cores",
        "2",
        "--workdir",
        tmp_path / "w",
        "--out",
        tmp_path / "o",
    ]
    failed = thanos_here(*args, cwd=tmp_path)
    assert failed.returncode == 1
    assert "FAILED after" in failed.stderr and "sample calibration tokens" in failed.stderr
    assert f"the traceback and the full log: {tmp_path / 'w' / 'logs' / 'wanda_u50.log'}" in failed.stderr
    assert "Traceback" in (tmp_path / "w" / "logs" / "wanda_u50.log").read_text()
    # the ERROR line names the file, the tokens found and a seqlen that works; no traceback
    error = "ERROR: no calibration document is longer than seqlen=64 tokens: 1 document(s), 9 tokens in all"
    assert error in failed.stderr and f"({text}); set seqlen to 8 or less" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert "run the same command again" in failed.stderr and not (tmp_path / "o").exists()
    text.write_text(calib.read_text())  # the fix
    fixed = thanos_here(*args, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "read the model's structure" not in fixed.stderr  # finished before the failure: kept
    assert "sample calibration tokens" in fixed.stderr and (tmp_path / "o" / "model.safetensors").is_file()


# --- checks made before any step runs (fast) ----------------------------------------------------------


def test_unsupported_architecture_is_refused_before_anything_runs(tmp_path, cli):
    from transformers import GPT2Config

    GPT2Config(n_layer=2, n_embd=32, n_head=4).save_pretrained(tmp_path / "gpt2")
    run = cli(
        "prune-model", "--model", tmp_path / "gpt2", "--method", "thanos", "--sparsity", "2:4",
        "--out", tmp_path / "out", "--workdir", tmp_path / "work", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2
    assert "model_type 'gpt2': block 0 calls no nn.Linear to prune: its projections are" in run.stderr
    assert "; supported: decoder-only causal LMs" in run.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sparsity", "3:2"], "--sparsity '3:2'"),
        (["--evaluate", "bleu"], "--evaluate bleu"),
        (["--calibration", "missing.jsonl"], "--calibration missing.jsonl: no such file"),
        (["--model", "./nowhere"], "--model ./nowhere: no such directory"),
        (["--alpha", "1.5"], "--alpha 1.5: outlier-row fraction alpha must lie in [0, 1), got 1.5"),
        (["--damp", "0"], "--damp 0.0: expected a number > 0"),
        (["--sparsity", "0"], "--sparsity '0': prunes nothing; give a fraction above 0"),
        (
            ["--method", "wanda", "--damp", "0.1"],
            "--damp: wanda 2:4 does not use it; leave it out",
        ),
        (
            ["--method", "wanda", "--blocksize", "64", "--sparsity", "0.5"],
            "--blocksize: wanda 0.5 does not use it",
        ),
        (["--device", "cuda:7"], "--device cuda:7: "),
        (["--out", "m"], "the input model"),
        (["--out", "m/sub"], "is inside the input model"),
    ],
)
def test_bad_arguments_name_the_option(tmp_path, args, message, cli):
    from thanos.demo.tiny import build_tiny_model

    build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    base = {"--model": str(tmp_path / "m"), "--method": "thanos", "--sparsity": "2:4", "--out": "out"}
    base |= dict(zip(args[::2], args[1::2], strict=True))
    flat = [x for pair in base.items() for x in pair]
    run = cli("prune-model", *flat, "--workdir", tmp_path / "w", cwd=tmp_path)
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr  # piped, as in CI or under nohup: the one line alone
    assert not (tmp_path / "w").exists() and not (tmp_path / "m" / "sub").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("tokenizer", "no tokenizer files in the model directory (expected tokenizer.json or"),
        ("config", "config.json is not valid JSON"),
        ("config type", "config.json is not a valid config of its model type (Validation error for field"),
        ("weights", "no safetensors weights in"),
        ("empty", "no config.json in the model directory (the directory is empty)"),
    ],
)
def test_a_broken_model_directory_is_named_before_anything_runs(tmp_path, damage, message, cli):
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    if damage == "tokenizer":
        for file in model.glob("tokenizer*"):
            file.unlink()
    elif damage == "config":
        (model / "config.json").write_text('{"model_type": "llama",')
    elif damage == "config type":
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps(config | {"num_hidden_layers": "two"}))
    elif damage == "weights":
        for file in model.glob("*.safetensors*"):
            file.unlink()
    else:
        shutil.rmtree(model)
        model.mkdir()
    run = cli(
        "prune-model", "--model", model, "--method", "wanda", "--sparsity", "0.5",
        "--out", tmp_path / "out", "--workdir", tmp_path / "w", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
    assert str(model) in run.stderr.splitlines()[-1]
    assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists()


def test_bad_text_data_is_named_before_any_step(tmp_path, cli):
    from thanos.demo.tiny import build_tiny_model

    build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    (tmp_path / "calib.txt").write_bytes(b"\x93 smart quotes from another encoding \x94")
    (tmp_path / "wiki.txt").write_text("fine text\n")
    (tmp_path / "texts").mkdir()
    (tmp_path / "empty.jsonl").write_text("\n")
    common = ["--model", tmp_path / "m", "--method", "wanda", "--sparsity", "0.5", "--out", tmp_path / "o"]
    for args, message in (
        (
            ["--calibration", tmp_path / "calib.txt"],
            "not UTF-8 text: byte 0x93 at offset 0 cannot be decoded",
        ),
        (["--calibration", tmp_path / "texts"], "no text files in the directory"),
        (["--calibration", tmp_path / "empty.jsonl"], "no text: the file is empty"),
        (
            ["--calibration", tmp_path / "wiki.txt", "--evaluate", "ppl", "--ppl-source", tmp_path / "texts"],
            "no text files",
        ),
    ):
        run = cli("prune-model", *common, *args, "--workdir", tmp_path / "w", cwd=tmp_path)
        assert run.returncode == 2 and message in run.stderr.splitlines()[-1], run.stderr[-2000:]
        assert run.stderr.splitlines()[-1].startswith(f"ERROR: {args[-2]} {args[-1]}: "), run.stderr[-2000:]
        assert not (tmp_path / "w").exists()


def test_texts_too_short_are_refused_before_anything_runs(tmp_path, cli):
    """A perplexity or distillation text too short for its windows (or empty, or missing) is one ERROR line
    with exit status 2 before any step runs, for a combined recipe too (its last part reads them): not a
    failure after the pruning."""
    from thanos.demo.tiny import build_tiny_model
    from thanos.models import load_tokenizer

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=2, max_position_embeddings=64)
    (tmp_path / "c.txt").write_text("a calibration text of a few words . " * 40)
    short = tmp_path / "short.txt"
    short.write_text("too short a text .")
    (tmp_path / "empty.txt").write_text("\n")
    base = ["prune-model", "--model", model, "--method", "thanos", "--out", tmp_path / "o"]
    base += ["--calibration", tmp_path / "c.txt", "--nsamples", "4", "--seqlen", "16"]
    ppl = ["--evaluate", "ppl", "--ppl-seqlen", "32", "--ppl-source"]
    distill = ["--distill-tokens", "64", "--distill-seqlen", "16", "--distill-source"]
    tokens = len(load_tokenizer(model)(short.read_text()).input_ids)  # fewer than 32
    too_short = f"--ppl-source {short} has {tokens} tokens, fewer than one window of 32 (--ppl-seqlen)"
    windows = (tokens + 1) // 16  # with its end-of-text token: not more than the 8 held out
    for sparsity, extra, message in (
        ("0.5", [*ppl, short], too_short),
        ("0.5", [*ppl, tmp_path / "empty.txt"], "no text: the file is empty"),
        ("0.5", [*ppl, tmp_path / "gone.txt"], "gone.txt: no such file or directory"),
        ("neurons:0.3", [*distill, short], f"gives {windows} window(s) of 16 tokens, not more than the 8"),
        ("depth:1+neurons:0.3", [*ppl, short], too_short),
    ):
        run = cli(*base, "--sparsity", sparsity, *extra, "--workdir", tmp_path / "w", cwd=tmp_path)
        lines = run.stderr.splitlines()
        assert run.returncode == 2 and message in lines[-1], run.stderr[-2000:]
        assert [line for line in lines if "ERROR" in line] == lines[-1:] and "Traceback" not in run.stderr
        assert not (tmp_path / "w").exists() and not (tmp_path / "o").exists()
    assert f"give a longer text, or {tokens} or less as --ppl-seqlen" in lines[-1]


def test_a_new_recipe_reuses_and_an_abandoned_one_is_named_and_deleted(tmp_path, cli, monkeypatch):
    """A run interrupted before its model is written leaves an unfinished recipe: the interruption says so,
    a run with another option (another recipe) names it, ``thanos workdirs`` lists it as unfinished with how
    to delete it, and deletes it alone. The first run of a new recipe says what it reused, never
    "resumed"; only a rerun of the same recipe does."""
    from thanos.demo.tiny import build_tiny_model
    from thanos.runner import one_recipe

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    base = ["prune-model", "--model", model, "--method", "magnitude", "--workdir", tmp_path / "w"]

    def interrupted(*args, **kwargs):  # Ctrl-C before the first step finished
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(one_recipe, "run_recipe", interrupted)
        stopped = thanos_here(*base, "--sparsity", "0.5", "--out", tmp_path / "o5", cwd=tmp_path)
    assert stopped.returncode == 130 and f"this one stays unfinished in {tmp_path / 'w'}" in stopped.stderr
    other = cli(*base, "--sparsity", "0.6", "--out", tmp_path / "o6", cwd=tmp_path)
    assert other.returncode == 0, other.stderr[-2000:]
    assert "w holds the unfinished recipe magnitude_u50 (" in other.stderr
    assert "`thanos workdirs --delete w/magnitude_u50` deletes it" in other.stderr
    third = cli(*base, "--sparsity", "0.7", "--out", tmp_path / "o7", cwd=tmp_path)
    assert (
        "reused: 1 step that other recipes' runs computed" in third.stderr and "resumed" not in third.stderr
    )
    listed = cli("workdirs", "--root", tmp_path, cwd=tmp_path)
    assert "recipes magnitude_u60, magnitude_u70; last run" in listed.stdout, listed.stdout
    assert "unfinished: magnitude_u50 (interrupted or abandoned;" in listed.stdout
    assert f"delete: thanos workdirs --root {tmp_path} --delete w/magnitude_u50)" in listed.stdout
    deleted = cli("workdirs", "--root", tmp_path, "--delete", "w/magnitude_u50", cwd=model)  # under --root
    assert (
        deleted.returncode == 0 and f"deleted what magnitude_u50 wrote in {tmp_path / 'w'}" in deleted.stdout
    )
    listed = cli("workdirs", "--root", tmp_path, cwd=tmp_path).stdout
    assert "unfinished" not in listed and "recipes magnitude_u60, magnitude_u70" in listed
    assert (tmp_path / "w" / "results" / "m" / "magnitude_u60" / "model" / "pruning_report.json").is_file()
    again = cli(*base, "--sparsity", "0.7", "--out", tmp_path / "o7", cwd=tmp_path)
    assert "nothing to do" in again.stderr and "unfinished" not in again.stderr


def test_an_unreachable_hub_is_one_line_at_once(tmp_path, cli):
    """A hub id not in the local cache while the hub cannot be reached: one line naming --model, at once."""
    (tmp_path / "calib.txt").write_text("some text\n")
    args = ["prune-model", "--model", "someorg/some-model", "--method", "wanda", "--sparsity", "0.5"]
    args += ["--calibration", "calib.txt", "--out", "o", "--workdir", "w"]
    started = time.monotonic()
    run = cli(*args, cwd=tmp_path, env={"HF_ENDPOINT": "http://127.0.0.1:9"})  # nothing listens there
    assert run.returncode == 2 and time.monotonic() - started < 20, run.stderr[-2000:]
    line = run.stderr.splitlines()[-1]
    assert "--model someorg/some-model: not in the local cache, and the hub cannot be reached" in line
    assert "Retrying" not in run.stderr and not (tmp_path / "w").exists()


@pytest.mark.parametrize("sparsity", ["params:0.3", "vocab:0.3"])
def test_a_size_or_vocabulary_of_a_hub_id_names_how_to_get_a_local_copy(sparsity, tmp_path, cli):
    """A size reads the model's files to plan its search, a vocabulary rewrites its tokenizer files: on a
    hub id both are refused in one line before anything is written, giving the command that downloads it."""
    args = ["prune-model", "--model", "someorg/some-model", "--method", "thanos", "--sparsity", sparsity]
    run = cli(*args, "--out", "o", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    line = run.stderr.splitlines()[-1]
    assert line.startswith("ERROR: --model someorg/some-model is not a local directory; "), line
    assert "`hf download someorg/some-model --local-dir DIR`" in line, line
    assert not (tmp_path / "w").exists() and not (tmp_path / "o").exists()


def test_hub_sources_offline_are_refused_naming_the_flag_that_takes_a_file(tmp_path, cli):
    from thanos.demo.tiny import build_tiny_model

    build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    (tmp_path / "calib.txt").write_text("some text\n")
    common = ["prune-model", "--model", "m", "--method", "wanda", "--sparsity", "0.5", "--out", "o"]
    offline = {"HF_HUB_OFFLINE": "1"}
    for extra, flag in (
        ([], "--calibration c4"),
        (["--calibration", "calib.txt", "--evaluate", "ppl"], "--ppl-source wikitext2"),
    ):
        run = cli(*common, *extra, "--workdir", "w", cwd=tmp_path, env=offline)
        line = run.stderr.splitlines()[-1]
        assert run.returncode == 2 and line.startswith(
            f"ERROR: {flag}: the hub is not available (HF_HUB_OFFLINE=1)"
        )
        assert line.endswith(f"{flag.split()[0]} FILE") and not (tmp_path / "w").exists()
    magnitude = [*common[:4], "magnitude", *common[5:]]
    magnitude = cli(*magnitude, "--device", "cpu", "--workdir", "w", cwd=tmp_path, env=offline)
    assert magnitude.returncode == 0, magnitude.stderr[-2000:]  # no calibration: c4 is never asked for


def test_the_top_help_points_to_prune_model_and_the_version_is_printed(tmp_path):
    helped = thanos("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "thanos prune-model --help" in helped.stdout
    version = thanos("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("thanos-prune ")


def test_a_loaded_model_is_refused_saying_what_to_pass(tmp_path):
    from transformers import AutoModelForCausalLM

    from thanos import prune_model
    from thanos.demo.tiny import build_tiny_model

    loaded = AutoModelForCausalLM.from_pretrained(
        build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    )
    with pytest.raises(TypeError, match=r"not a loaded LlamaForCausalLM; save it with model.save_pretrained"):
        prune_model(loaded, "wanda", 0.5, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sparsity": "3:2"}, "sparsity='3:2': "),
        ({"alpha": 1.5}, "alpha=1.5: outlier-row fraction"),
        ({"recover": {"epochs": 0}}, "recover['epochs']=0: expected a whole number"),
        ({"method": "wanda", "damp": 0.1}, "damp: wanda 0.5 does not use it"),
        ({"seqlen": 100_000}, "seqlen=100000 exceeds the model's 512 positions; give seqlen=512 or less"),
        ({"keep": "some"}, "keep='some': choose needed or all"),
        ({"out": None}, "out: give the directory the pruned model is written to"),
    ],
)
def test_python_errors_name_the_parameters(tmp_path, options, message):
    """The same checks as the command's, in Python's words: ``prune_model``'s parameters, not the flags."""
    from thanos import prune_model
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    call = {"method": "thanos", "sparsity": 0.5, "calibration": str(model / "config.json")} | options
    with pytest.raises(ValueError) as err:
        out = call.pop("out", tmp_path / "out")
        prune_model(model, call.pop("method"), call.pop("sparsity"), out=out, **call)
    assert str(err.value).startswith(message) and "--" not in str(err.value), str(err.value)


class ClosedPipe(io.StringIO):
    """A terminal whose reader went away after the first line (``| head -1``)."""

    def write(self, text: str) -> int:
        if self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_reader_that_goes_away_stops_the_lines_not_the_run(tmp_path):
    from thanos import prune_model
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    stream = ClosedPipe()
    report = prune_model(model, "magnitude", 0.5, out=tmp_path / "o", workdir=tmp_path / "w", stream=stream)
    assert (
        report["overall_sparsity"] == pytest.approx(0.5, abs=0.01)
        and (tmp_path / "o" / "config.json").is_file()
    )
    assert stream.getvalue().count("\n") == 1  # the first line, then nothing: the log file has the rest
    assert (
        "written" not in stream.getvalue()
        and "done:" in (tmp_path / "w" / "logs" / "magnitude_u50.log").read_text()
    )


def test_a_recipe_object_stands_for_the_method_and_its_keywords(tmp_path):
    """``prune_model(model, Recipe(...))``: the recipe as built (the same plan as its keywords give); the
    recipe's keywords beside it are refused, named in Python's words."""
    from thanos import Recipe, prune_model
    from thanos.demo.tiny import build_tiny_model
    from thanos.errors import OptionError

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1)
    (tmp_path / "calib.txt").write_text("a few words of calibration text\n")
    common = {"calibration": tmp_path / "calib.txt", "dry_run": True, "stream": io.StringIO()}
    recipe = Recipe(None, "thanos", "2:4", alpha=0.1)
    planned = prune_model(model, recipe, out=tmp_path / "a", workdir=tmp_path / "w", **common)
    keywords = prune_model(
        model, "thanos", "2:4", alpha=0.1, out=tmp_path / "a", workdir=tmp_path / "w", **common
    )
    assert planned == keywords and planned["disk"]["model"] > 0
    with pytest.raises(OptionError) as mixed:
        prune_model(model, recipe, "2:4", alpha=0.2, out=tmp_path / "b", **common)
    assert (
        str(mixed.value)
        == "sparsity, alpha: the Recipe given as the method holds the recipe; set them in the Recipe"
    )
    assert not (tmp_path / "b").exists() and not (tmp_path / "w").exists()


@pytest.mark.slow
def test_another_models_result_is_replaced_only_with_overwrite(first, inputs, tmp_path):
    out, workdir, _ = first
    other = tmp_path / "other"
    shutil.copytree(out, other)
    report = json.loads((other / "pruning_report.json").read_text())
    report["recipe"]["name"] = "wanda_u50"
    (other / "pruning_report.json").write_text(json.dumps(report))
    refused = prune(inputs, other, workdir)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"--out {other} holds another pruned model (wanda_u50 of {inputs[0]})" in refused.stderr
    assert "--overwrite to replace it" in refused.stderr and (other / "README.md").is_file()
    replaced = prune(inputs, other, workdir, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert json.loads((other / "pruning_report.json").read_text())["recipe"]["name"] == RECIPE


def test_a_foreign_out_directory_is_refused(tmp_path, cli):
    from thanos.demo.tiny import build_tiny_model

    build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=2)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    run = cli(
        "prune-model", "--model", tmp_path / "m", "--method", "wanda", "--sparsity", "0.5",
        "--out", tmp_path / "out", "--workdir", tmp_path / "w", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "is not empty and is not a previous result" in run.stderr
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    # a path under a file, for --out or --workdir: refused before any work, naming the file
    paths = {"--out": tmp_path / "out" / "notes.txt" / "model", "--workdir": tmp_path / "out" / "notes.txt"}
    for option, path in paths.items():
        given = {"--out": tmp_path / "new", "--workdir": tmp_path / "w"} | {option: path}
        run = cli(
            "prune-model", "--model", tmp_path / "m", "--method", "wanda", "--sparsity", "0.5",
            "--out", given["--out"], "--workdir", given["--workdir"], cwd=tmp_path,
        )  # fmt: skip
        named = "is under" if option == "--out" else "is a file; give a directory"
        assert run.returncode == 2 and f"{option} {path} {named}" in run.stderr, run.stderr
    # a working directory that is --out or inside it: refused before any work (every step ran, then the
    # publish refused --out, which held the working directory)
    (tmp_path / "c.txt").write_text("a calibration text of a few words . " * 40)
    for workdir, named, sparsity in (
        (tmp_path / "new" / "w", "is inside", "0.5"),
        (tmp_path / "new", "is", "0.5"),
        (tmp_path / "new" / "w", "is inside", "depth:1+neurons:0.3"),  # before its first part runs
    ):
        run = cli(
            "prune-model", "--model", tmp_path / "m", "--method", "thanos", "--sparsity", sparsity,
            "--out", tmp_path / "new", "--workdir", workdir, "--calibration", tmp_path / "c.txt",
            cwd=tmp_path,
        )  # fmt: skip
        said = f"--workdir {workdir} {named} --out {tmp_path / 'new'}, where the model is published"
        assert run.returncode == 2 and said in run.stderr, run.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "new").exists()


def test_ignored_options_and_the_perplexity_window_are_refused_before_anything_runs(tmp_path, cli):
    """An option that would be ignored (an evaluation's option without the evaluation, --no-compact for
    depth) and a perplexity window the model cannot hold are refused, named, before anything is written."""
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_blocks=1, max_position_embeddings=64)
    (tmp_path / "c.txt").write_text("a calibration text of a few words " * 40)
    base = [
        "prune-model", "--model", model, "--method", "magnitude", "--sparsity", "0.5",
        "--out", tmp_path / "o", "--calibration", tmp_path / "c.txt",
    ]  # fmt: skip
    for extra, named in (
        (["--ppl-seqlen", "16"], "--ppl-seqlen is set without its evaluation; add --evaluate ppl"),
        (
            ["--evaluate", "ppl", "--ppl-seqlen", "65"],
            "--ppl-seqlen 65 is longer than the model's 64 positions",
        ),
        (
            ["--evaluate", "ppl", "--ppl-seqlen", "1"],
            "--ppl-seqlen 1: expected a whole number of tokens >= 2",
        ),
        (["--tasks", "piqa"], "--tasks is set without its evaluation; add --evaluate zeroshot"),
        (["--evaluate", "ppl", "--include-path", "."], "--include-path is set without its evaluation; add"),
        (
            ["--sparsity", "depth:1", "--no-compact"],
            "--no-compact: depth:1 removes whole blocks, which cannot",
        ),
    ):
        run = cli(*base, *extra, "--workdir", tmp_path / "w", cwd=tmp_path)
        assert run.returncode == 2 and named in run.stderr, run.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "o").exists()


def build_recipe(method, sparsity, **options):
    """The recipe ``prune_model`` builds of these keywords."""
    (recipe,) = RecipeOptions(method, sparsity, **options).recipes()
    return recipe


def test_the_recipe_is_built_once_and_named_by_what_differs_from_the_defaults():
    recipe = build_recipe("thanos", "2:4")  # n:m: exact n:m unless asked
    assert (recipe.name, recipe.alpha, recipe.blocksize) == ("thanos_2-4", 0.0, 512)
    assert build_recipe("thanos", "4:8", alpha=0.1).name == "thanos_4-8_a0.1"
    assert build_recipe("thanos", "structured:0.3").name == "thanos_s30"  # its default alpha 0.1
    assert build_recipe("sparsegpt", "structured:0.3", damp=0.02).name == "sparsegpt_s30_damp0.02"
    with pytest.raises(ValueError, match="--method 'obs'"):
        build_recipe("obs", "0.5")
    with pytest.raises(ValueError, match=r"--alpha 1.5: outlier-row fraction alpha must lie in \[0, 1\)"):
        build_recipe("thanos", "2:4", alpha=1.5)


def test_workdir_is_keyed_by_model_and_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("THANOS_WORKDIR", str(tmp_path))
    from dataclasses import replace

    from thanos.runner.workdirs import workdir_key
    from thanos.stages.engine import Calibration

    calib = Calibration("c4", 128, 2048)
    a = default_workdir("meta-llama/Llama-2-7b-hf", calib)
    assert a.parent == tmp_path and a.name.startswith("meta-llama--Llama-2-7b-hf-")
    assert default_workdir("meta-llama/Llama-2-7b-hf", calib) == a
    assert default_workdir("meta-llama/Llama-2-7b-hf", replace(calib, nsamples=64)) != a
    # the key of earlier versions (the checked calibration as a dict): their working directories are found
    record = {"source": "c4", "nsamples": 128, "seqlen": 2048, "seed": 0, "text_field": "text"}
    assert a.name.endswith(workdir_key("meta-llama/Llama-2-7b-hf", record))
    assert default_workdir("/models/llama", calib).name.startswith("llama-")
    assert model_slug("/models/my model") == "my-model"


def test_importing_thanos_does_not_import_snakemake():
    code = (
        "import sys, thanos; assert 'snakemake' not in sys.modules; f = thanos.prune_model; print(f.__name__)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "prune_model", run.stderr


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume_and_the_rerun_keeps_what_was_finished(inputs, tmp_path):
    # 64 windows, as the SIGTERM test: the blocks after the signal take seconds, so that a busy machine
    # delivering it late still finds the run in them (with 16, the run could end before the signal arrived)
    longer = ("--nsamples", "64")
    model, calib = inputs
    args = ["prune-model", "--model", model, "--method", "thanos", "--sparsity", "2:4",
            "--calibration", calib, *CALIBRATION, "--device", "cpu", "--cores", "2",
            "--workdir", tmp_path / "work", "--out", tmp_path / "out", *longer]  # fmt: skip
    proc = subprocess.Popen(
        thanos_as_terminal(*args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    lines = []
    for line in iter(proc.stdout.readline, b""):
        lines.append(line.decode())
        if "done: Hessians of block 0" in lines[-1]:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    assert proc.wait() == 130, "".join(lines[-5:])
    assert "run the same command to resume" in lines[-1] and "Traceback" not in "".join(lines)
    resumed = prune(inputs, tmp_path / "out", tmp_path / "work", *longer)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "sample calibration tokens" not in resumed.stderr and "resumed: 4 steps" in resumed.stderr


@pytest.mark.slow
def test_a_failed_evaluation_leaves_the_published_model_and_a_rerun_adds_it(first, inputs, monkeypatch):
    from thanos.evaluation import perplexity

    out, workdir, _ = first
    model, calib = inputs
    evaluated = out.parent / "evaluated"

    def failing(*args, **kwargs):  # a failure no check before the run can see (the machine's, the text's)
        raise ValueError("the scoring failed")

    with monkeypatch.context() as patched:
        patched.setattr(perplexity, "window_nll", failing)
        failed = prune(
            inputs, evaluated, workdir, "--evaluate", "ppl", "--ppl-source", calib, "--ppl-seqlen", "16"
        )
    assert failed.returncode == 1
    assert "FAILED after" in failed.stderr and "perplexity (thanos_2-4)" in failed.stderr
    assert "ERROR: the scoring failed" in failed.stderr
    assert f"the pruned model is published without this evaluation: {evaluated}" in failed.stderr
    weights = (evaluated / "model.safetensors").stat().st_ino
    assert "Not evaluated" in (evaluated / "README.md").read_text()
    record = json.loads((evaluated / "pruning_report.json").read_text())["files"]["model.safetensors"]
    assert hashlib.sha256((evaluated / "model.safetensors").read_bytes()).hexdigest() == record["sha256"]

    fixed = prune(
        inputs, evaluated, workdir, "--evaluate", "ppl", "--ppl-source", calib, "--ppl-seqlen", "16"
    )
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "nothing to do" not in fixed.stderr and "perplexity" in fixed.stderr.splitlines()[-4]
    card = (evaluated / "README.md").read_text()
    ppl = json.loads((workdir / "results" / "tiny-llama" / RECIPE / "eval" / "perplexity.json").read_text())
    assert ppl["seqlen"] == 16  # --ppl-seqlen
    assert f"perplexity **{ppl['ppl']:.2f}**" in card
    assert (evaluated / "model.safetensors").stat().st_ino == weights  # the card alone was rewritten
    report = json.loads((evaluated / "pruning_report.json").read_text())
    assert report["files"]["README.md"]["bytes"] == len(card.encode())


def test_an_option_error_is_worded_by_each_front_and_crosses_processes():
    """One error, its parts kept: the command line's words, Python's, and the same after pickling."""
    import pickle

    from thanos.errors import Option, OptionError
    from thanos.runner.request import FLAGS, PYTHON

    err = OptionError(
        (Option("recover.holdout", "0.5"), Option("nsamples", "2")), "none left; give ", Option("disk_check")
    )
    assert err.words(FLAGS) == "--recover-holdout 0.5 with --nsamples 2: none left; give --no-disk-check"
    python = err.worded(PYTHON)
    assert str(python) == "recover['holdout']=0.5 with nsamples=2: none left; give disk_check=False"
    assert str(pickle.loads(pickle.dumps(python))) == str(python)
