"""``python -m thanos``: every error is one line ``ERROR: <what> (<path>); <fix>``, last on stderr, exit 2;
the traceback goes to the job's log (stderr is a file under Snakemake) but not to a terminal. ``--help``
and one command's parser import no other command module (and no torch). A terminal, ``--help`` and the
imports are real processes; a job's log is written by the command run in this process as a new process
runs it (``thanos_here``)."""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import pkgutil
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, thanos_here
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import thanos.commands
from thanos.cli import describe
from thanos.data.storage import write_activations
from thanos.files.atomic import atomic_path

REPO = Path(__file__).resolve().parent.parent


def env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def run_thanos(*args: str | Path, log: Path) -> int:
    """``python -m thanos ARGS > log 2>&1`` as a Snakemake job runs it (stderr not a terminal), run in this
    process as a new one runs it (``thanos_here``: ~4 CPU-s of imports fewer per case); the exit status."""
    run = thanos_here(*args, cwd=log.parent)
    log.write_text(run.stdout + run.stderr)
    return run.returncode


def on_terminal(*args: str | Path) -> tuple[int, str]:
    """``python -m thanos ARGS`` with stderr on a pseudo-terminal; (exit status, what the terminal shows)."""
    main, secondary = pty.openpty()
    command = [sys.executable, "-m", "thanos", *map(str, args)]
    process = subprocess.Popen(command, stderr=secondary, stdout=subprocess.DEVNULL, env=env())
    os.close(secondary)
    shown = b""
    with contextlib.suppress(OSError):  # EIO once the process closed the terminal
        while chunk := os.read(main, 4096):
            shown += chunk
    os.close(main)
    return process.wait(), shown.decode().replace("\r\n", "\n")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("model"), "llama")


def damaged_inputs(model: Path, path: Path, damage: str) -> Path:
    hidden = json.loads((model / "config.json").read_text())["hidden_size"]
    with write_activations(path, 4, 16, hidden, torch.float32, block=0) as writer:
        writer.write(0, torch.randn(4, 16, hidden, generator=torch.Generator().manual_seed(0)))
    chunk = sorted(p for p in (path / "hidden").rglob("*") if p.is_file() and p.name != "zarr.json")[2]
    if damage == "deleted chunk":
        chunk.unlink()
    else:
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0x10
        chunk.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(("damage", "words"), [("deleted chunk", "chunk files"), ("flipped byte", "crc32c")])
def test_damaged_store_ends_the_log_with_one_error_line(
    model: Path, tmp_path: Path, damage: str, words: str
) -> None:
    inputs = damaged_inputs(model, tmp_path / "inputs_0.zarr", damage)
    log = tmp_path / "capture.log"
    out = tmp_path / "hessians_0.zarr"
    rc = run_thanos("capture", "--model", model, "--block", 0, "--inputs", inputs, "--out", out, log=log)
    lines = log.read_text().rstrip("\n").split("\n")
    assert rc == 2
    assert lines[-1].startswith("ERROR: activations store"), lines[-1]
    assert f"({inputs}); delete {inputs} and rerun" in lines[-1] and words in lines[-1], lines[-1]
    assert sum(line.startswith("ERROR:") for line in lines) == 1
    assert "Traceback (most recent call last)" in log.read_text()
    assert not out.exists() and not list(tmp_path.glob(".hessians_0.zarr.*"))


def test_terminal_shows_the_line_and_no_traceback(model: Path, tmp_path: Path) -> None:
    inputs = damaged_inputs(model, tmp_path / "inputs_0.zarr", "deleted chunk")
    args = ("capture", "--model", model, "--block", 0, "--inputs", inputs, "--out", tmp_path / "h.zarr")
    rc, shown = on_terminal(*args)
    assert rc == 2 and "Traceback" not in shown, shown
    assert shown.strip().split("\n")[-1].startswith("ERROR: activations store"), shown
    rc, shown = on_terminal("-v", *args)
    assert rc == 2 and "Traceback" in shown and shown.strip().split("\n")[-1].startswith("ERROR:"), shown


def test_a_directory_written_whole_is_never_one_of_the_users(tmp_path: Path) -> None:
    """The commands that write their --out whole (replacing what was there) refuse a non-empty directory
    that is not their own previous result, naming it, and leave it as it was: ``make-tiny-model --out
    proj`` deleted the user's files in ``proj``, as did ``real-model``, ``train-demo`` and ``assemble``."""
    mine = tmp_path / "proj"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    recipe = json.dumps({"method": "magnitude", "sparsity": 0.5})
    for args, said in (
        (("make-tiny-model", "--family", "llama"), "is not empty; give a new or empty directory"),
        (("real-model",), "is not empty and is not a previous result (no real_model.json)"),
        (("train-demo", "--data-dir", tmp_path), "is not empty and is not a previous result (no train_"),
        (("assemble", "--model", tmp_path, "--pruned-root", tmp_path, "--recipe", recipe), "(no pruning_"),
    ):
        run = thanos_here(*args, "--out", mine, cwd=tmp_path)  # (assemble, a job's command, logs it)
        assert run.returncode != 0 and f"--out {mine} is not empty" in run.stderr, run.stderr[-2000:]
        assert said in run.stderr, run.stderr[-2000:]
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]
    built = thanos_here("make-tiny-model", "--family", "llama", "--out", tmp_path / "new", cwd=tmp_path)
    assert built.returncode == 0 and (tmp_path / "new" / "config.json").is_file(), built.stderr[-2000:]


def test_a_stage_store_never_replaces_what_the_command_reads(model: Path, tmp_path: Path) -> None:
    """The stage commands that write a zarr store refuse an ``--out`` that is their input (``capture --out``
    its ``--inputs`` replaced the activations by Hessians, exit status 0), a directory holding it, or
    another stage's store (``calibrate --out hessians_0.zarr`` replaced the Hessians by tokens); each input
    is left as it was."""
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "one two three four five six seven " * 40}) + "\n")
    w = tmp_path / "w"
    steps = (
        ("calibrate", "--model", model, "--source", tmp_path / "c.jsonl", "--nsamples", 2, "--seqlen", 16),
        ("embed", "--model", model, "--tokens", w / "tokens.zarr"),
        ("capture", "--model", model, "--block", 0, "--inputs", w / "inputs_0.zarr"),
    )
    for args, out in zip(steps, ("tokens.zarr", "inputs_0.zarr", "hessians_0.zarr"), strict=True):
        assert thanos_here(*args, "--out", w / out, cwd=tmp_path).returncode == 0
    before = {path: path.read_bytes() for path in w.rglob("*") if path.is_file()}
    propagate = ("propagate", "--model", model, "--block", 0, "--inputs", w / "inputs_0.zarr")
    for args, out, said in (
        (
            steps[2],
            "inputs_0.zarr",
            f"--out {w}/inputs_0.zarr is --inputs {w}/inputs_0.zarr, which the command",
        ),
        (propagate, "inputs_0.zarr", "is --inputs"),
        (steps[1], "tokens.zarr", "is --tokens"),
        (propagate, ".", f"--out {w} holds --inputs {w}/inputs_0.zarr, which the command reads"),
        (steps[0], "hessians_0.zarr", "a Hessian store is there, and this tokens store would replace it"),
        (steps[2], "tokens.zarr", "a tokens store is there, and this Hessian store would replace it"),
    ):
        run = thanos_here(*args, "--out", w / out, cwd=tmp_path)
        assert run.returncode == 2 and said in run.stderr.strip().splitlines()[-1], run.stderr[-2000:]
    assert {path: path.read_bytes() for path in w.rglob("*") if path.is_file()} == before


def test_owl_takes_its_recipe_by_options_and_the_layer_commands_name_what_they_take(
    model: Path, tmp_path: Path
) -> None:
    """``thanos owl --method wanda --sparsity 0.6`` could never run (``recipe wanda_u60 has profile uniform,
    not owl``, and no option set the profile nor OWL's M and lambda): it takes them now. A combined recipe
    given to a command that prunes one structure said it cannot be parsed while listing it as allowed."""
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "one two three four five six seven " * 40}) + "\n")
    w = tmp_path / "w"
    steps = [
        ("calibrate", "--model", model, "--source", tmp_path / "c.jsonl", "--nsamples", 2, "--seqlen", 16,
         "--out", w / "tokens.zarr"),
        ("embed", "--model", model, "--tokens", w / "tokens.zarr", "--out", w / "inputs_0.zarr"),
    ]  # fmt: skip
    for block in (0, 1):
        steps.append(("capture", "--model", model, "--block", block, "--inputs", w / f"inputs_{block}.zarr",
                      "--out", w / f"hessians_{block}.zarr"))  # fmt: skip
        steps.append(("propagate", "--model", model, "--block", block, "--inputs", w / f"inputs_{block}.zarr",
                      "--out", w / f"inputs_{block + 1}.zarr"))  # fmt: skip
    for args in steps:
        assert thanos_here(*args, cwd=tmp_path).returncode == 0, args
    hessians = [w / "hessians_0.zarr", w / "hessians_1.zarr"]
    owl = ("owl", "--model", model, "--hessians", *hessians, "--method", "wanda", "--sparsity", 0.6)
    run = thanos_here(*owl, "--owl-lambda", 0.05, "--out", tmp_path / "owl.json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(json.loads((tmp_path / "owl.json").read_text())["blocks"]) == 2
    prune = ("prune", "--model", model, "--block", 0, "--hessians", hessians[0], "--method", "thanos")
    chain = thanos_here(
        *prune, "--sparsity", "depth:1+neurons:0.3", "--out-dir", tmp_path / "p", cwd=tmp_path
    )
    assert (
        chain.returncode == 2 and "is a combined recipe or a size, which `thanos prune-model`" in chain.stderr
    )


def test_an_output_json_is_checked_before_the_work(model: Path, tmp_path: Path) -> None:
    """The evaluations and ``model-info`` refuse at once an output JSON that their write at the end would
    fail on or that would destroy what is there, naming it, and leave everything as it was: ``perplexity
    --out DIR`` replaced the directory (a pruned model, the user's files) by the JSON with exit status 0,
    ``--out`` the text it read or a file of the model overwrote it, and a path under a file failed after
    the whole evaluation."""
    mine, text, blocker = tmp_path / "mine", tmp_path / "text.txt", tmp_path / "blocker"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    text.write_text("a text to score, long enough for a window " * 50)
    blocker.write_text("a file where a directory should be")
    ppl = ("perplexity", "--model", model, "--source", text)
    both = ("evaluate", "--model", model, "--source", text, "--tasks", "hellaswag")
    for args, said in (
        (
            (*ppl, "--out", mine),
            f"--out {mine} is a directory; give a file path, such as {mine}/perplexity.json",
        ),
        (("zeroshot", "--model", model, "--out", mine), f"such as {mine}/zeroshot.json"),
        (("model-info", "--model", model, "--out", "."), "--out .: give a file path, such as info.json"),
        ((*ppl, "--out", text), f"--out {text} is --source {text}, which the command reads"),
        ((*ppl, "--out", model / "config.json"), f"is inside --model {model}, a directory the command reads"),
        ((*ppl, "--out", blocker / "p.json"), f": {blocker} is a file, not a directory"),
        ((*ppl, "--out", blocker), f"--out {blocker} holds a file that is not a JSON result"),
        ((*both, "--ppl-out", mine, "--zeroshot-out", "z.json"), f"--ppl-out {mine} is a directory"),
        (
            (*both, "--ppl-out", "x.json", "--zeroshot-out", tmp_path / "x.json"),
            "would replace the perplexity's",
        ),
    ):
        before = {
            path: path.read_bytes() for path in (text, blocker, model / "config.json", mine / "notes.txt")
        }
        run = thanos_here(*args, cwd=tmp_path)
        assert run.returncode == 2 and said in run.stderr.splitlines()[-1], (args, run.stderr[-2000:])
        assert "INFO" not in run.stderr, run.stderr[-2000:]  # nothing began: no model loaded, no text read
        assert {path: path.read_bytes() for path in before} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["blocker", "mine", "text.txt"]


def test_evaluate_checks_its_numbers_before_loading_the_model(model: Path, tmp_path: Path) -> None:
    """``thanos evaluate`` refuses a bad number at once, by its own option's name: ``--limit -1`` ran the
    perplexity and wrote its JSON first, ``--zeroshot-batch-size 0`` was named ``--batch-size`` after the
    perplexity, ``--limit nan`` failed inside lm-eval, ``--limit 1.5`` scored 1 document, ``--num-fewshot -1``
    was recorded, and a window longer than the model's was refused once the model was loaded."""
    text = tmp_path / "text.txt"
    text.write_text("a text to score, long enough for a window " * 50)
    both = ("evaluate", "--model", model, "--source", text, "--tasks", "hellaswag", "--ppl-out", "p.json")
    for option, value, said in (
        ("--limit", "-1", "argument --limit: give a whole number of documents per task (50) or a fraction"),
        ("--limit", "nan", "argument --limit: give a whole number"),
        ("--limit", "1.5", "or a fraction below 1 of each task's (0.1), got 1.5"),
        ("--num-fewshot", "-1", "argument --num-fewshot: must be >= 0, got -1"),
        ("--zeroshot-batch-size", "0", "argument --zeroshot-batch-size: must be >= 1, got 0"),
        ("--ppl-batch-size", "0", "argument --ppl-batch-size: must be >= 1, got 0"),
        ("--max-windows", "0", "argument --max-windows: must be >= 1, got 0"),
        ("--seqlen", "99999", "--seqlen 99999 is longer than the model supports"),
    ):
        run = thanos_here(*both, "--zeroshot-out", "z.json", option, value, cwd=tmp_path)
        assert run.returncode == 2 and said in run.stderr.splitlines()[-1], (option, run.stderr[-2000:])
        assert "Loading" not in run.stderr and sorted(tmp_path.iterdir()) == [text], run.stderr[-2000:]


def test_a_workflow_config_file_is_read_strictly_before_snakemake_starts(tmp_path: Path) -> None:
    """``thanos workflow --configfile F`` refuses at once, naming the file and the line, a config file that
    is not there (Snakemake's traceback), not YAML (no line or column), empty, or that gives a key twice
    (YAML kept the last ``r1`` recipe and dropped the first, silently)."""
    (tmp_path / "twice.yaml").write_text(
        "recipes:\n  r1: {method: wanda, sparsity: 0.5}\n  r1: {method: thanos}\n"
    )
    (tmp_path / "tabs.yaml").write_text("calibration:\n\tnsamples: 4\n")
    (tmp_path / "empty.yaml").write_text("\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    for name, said in (
        (
            "twice.yaml",
            "twice.yaml: line 3: 'r1' is given twice, on line 2 and on line 3; YAML keeps the last",
        ),
        ("tabs.yaml", "tabs.yaml: line 2, column 1: not valid YAML (found character that cannot start any"),
        ("empty.yaml", "empty.yaml is empty; give the config's keys (docs/configuration.md lists the keys)"),
        ("list.yaml", "list.yaml: a YAML list, not a mapping of keys"),
        ("nope.yaml", "--configfile nope.yaml: no such file; give the path of a YAML config"),
    ):
        run = thanos_here("workflow", "--cores", "1", "-n", f"--configfile={name}", cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.splitlines()[-1].startswith(f"ERROR: {said}"), run.stderr
        assert "Traceback" not in run.stderr and not (tmp_path / ".snakemake").exists()


def test_an_evaluated_model_is_checked_before_its_weights_are_read(model: Path, tmp_path: Path) -> None:
    """``thanos perplexity`` names a model directory without weights (it said ``OSError: ...; unexpected
    error``), a file given as the model, a model without a tokenizer before its weights are read, and a loss
    that is NaN (it wrote ``"ppl": Infinity, "nll": NaN``, which JSON readers refuse), writing nothing."""
    text = tmp_path / "text.txt"
    text.write_text("a text to score, long enough for a window " * 50)
    bare, untokenized, broken = tmp_path / "bare", tmp_path / "untokenized", tmp_path / "nan"
    for copy in (bare, untokenized, broken):
        shutil.copytree(model, copy)
    for weights in bare.glob("*.safetensors"):
        weights.unlink()
    for tokenizer in untokenized.glob("tokenizer*"):
        tokenizer.unlink()
    shard = sorted(broken.glob("*.safetensors"))[0]  # the shard holding block 0 and the embeddings
    tensors = load_file(shard)
    tensors["model.embed_tokens.weight"][:, 0] = float("nan")
    save_file(tensors, shard, metadata={"format": "pt"})
    for given, said in (
        (bare, f"no weights (*.safetensors, pytorch_model*.bin) in the model directory ({bare})"),
        (model / "config.json", f"a file, not a model directory ({model / 'config.json'})"),
        (untokenized, "no tokenizer files in the model directory"),
        (broken, "the model's loss on the text is nan (computed in float32): its weights hold NaN or Inf"),
    ):
        run = thanos_here(
            "perplexity", "--model", given, "--source", text, "--seqlen", 16, "--out", "p.json", cwd=tmp_path
        )
        assert run.returncode == 2 and said in run.stderr.splitlines()[-1], run.stderr[-2000:]
        assert not (tmp_path / "p.json").exists()
        if given == untokenized:
            assert "loaded" not in run.stderr  # refused before the weights were read


def test_make_tiny_model_refuses_sizes_no_model_can_have(tmp_path: Path) -> None:
    """``make-tiny-model`` names a size that no model can have, by its option, before it builds anything
    (``--num-heads 0`` raised ZeroDivisionError, ``--hidden-size -64`` a torch error, ``--num-blocks 0`` wrote
    a model that ``prune-model`` then refused)."""
    for args, said in (
        (("--num-heads", "0"), "argument --num-heads: must be >= 1, got 0"),
        (("--hidden-size", "-64"), "argument --hidden-size: must be >= 1, got -64"),
        (("--num-blocks", "0"), "argument --num-blocks: must be >= 1, got 0"),
        (("--num-heads", "5"), "--num-heads 5 does not divide --hidden-size 64; give a divisor of it"),
        (("--num-kv-heads", "3"), "--num-kv-heads 3 does not divide --num-heads 4; give a divisor of it"),
        (
            ("--max-position-embeddings", "1"),
            "--max-position-embeddings 1: a model reads at least 2 positions",
        ),
    ):
        run = thanos_here("make-tiny-model", "--out", tmp_path / "tiny", *args, cwd=tmp_path)
        assert run.returncode == 2 and said in run.stderr.splitlines()[-1], run.stderr[-2000:]
        assert not (tmp_path / "tiny").exists()


def test_os_error_names_the_path(model: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file where a directory should be")
    log = tmp_path / "info.log"
    out = blocker / "p"
    args = ("--block", 0, "--method", "magnitude", "--sparsity", 0.5, "--out-dir", out)
    assert run_thanos("prune", "--model", model, *args, log=log) == 2
    last = log.read_text().rstrip("\n").split("\n")[-1]
    assert last.startswith("ERROR: ") and str(blocker) in last and "; check the path" in last, last


@pytest.mark.parametrize("command", ["model-info", "prune", "perplexity"])
def test_truncated_input_safetensors_is_named(model: Path, tmp_path: Path, command: str) -> None:
    truncated = tmp_path / "truncated"
    shutil.copytree(model, truncated)
    weights = sorted(truncated.glob("*.safetensors"))[0]  # the shard holding block 0 and the embeddings
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    log = tmp_path / f"{command}.log"
    args = {
        "model-info": ("--out", tmp_path / "info.json"),
        "prune": ("--block", 0, "--method", "magnitude", "--sparsity", 0.5, "--out-dir", tmp_path / "p"),
        "perplexity": ("--source", tmp_path / "text.txt", "--out", tmp_path / "ppl.json"),
    }[command]
    (tmp_path / "text.txt").write_text("a text to score, long enough for a window " * 50)
    assert run_thanos(command, "--model", truncated, *args, log=log) == 2
    last = log.read_text().rstrip("\n").split("\n")[-1]
    assert last.startswith("ERROR: ") and str(weights) in last and "truncated or damaged" in last, last


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_disk_full_names_the_output_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "model.safetensors"
    with pytest.raises(OSError) as info, atomic_path(out), open("/dev/full", "wb") as full:
        full.write(b"x" * 8192)
        full.flush()  # ENOSPC, an OSError that names no file
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(out)
    line = describe(info.value)
    assert line.startswith(f"No space left on device ({out}); disk full"), line
    # what safetensors 0.8 raises on a full filesystem (seen on a 64 KiB tmpfs; it writes a temporary file
    # and renames it, so /dev/full cannot be its target)
    full = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    with pytest.raises(OSError) as info, atomic_path(out):
        raise full
    assert info.value.errno == errno.ENOSPC and info.value.__cause__ is full
    assert describe(info.value).startswith(f"No space left on device ({out}); disk full")
    assert not list(tmp_path.iterdir())


def test_library_errors_say_what_is_damaged(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(Exception) as info:  # noqa: B017 - whatever safetensors raises
        load_file(bad)
    assert "a .safetensors file is truncated or damaged" in describe(info.value)
    assert describe(RuntimeError("boom\n  detail")).startswith("RuntimeError: boom detail; unexpected error")


def command_helps() -> dict[str, str]:
    names = [m.name for m in pkgutil.iter_modules(thanos.commands.__path__) if not m.name.startswith("_")]
    return {n.replace("_", "-"): importlib.import_module(f"thanos.commands.{n}").HELP for n in names}


def test_help_lists_every_command(tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "thanos", "--help"], capture_output=True, text=True, env=env(), check=True
    ).stdout
    flat = "".join(shown.split())
    helps = command_helps()
    assert len(helps) >= 10
    for command, text in helps.items():
        assert command in shown and "".join(text.split()) in flat, command


def test_one_command_imports_one_command_module_and_no_torch() -> None:
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "thanos", "prune", "--help"],
        capture_output=True,
        text=True,
        env=env(),
        check=True,
    )
    assert "--hessians" in timed.stdout
    imported = {line.split("|")[-1].strip() for line in timed.stderr.splitlines() if "|" in line}
    assert "thanos.cli" in imported and "torch" not in imported and "zarr" not in imported
    code = (
        "import sys; from thanos.cli import build_parser; build_parser('prune'); "
        "print(sorted(m for m in sys.modules if m.startswith('thanos.commands.') and '._' not in m))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True
    ).stdout
    assert loaded.strip() == "['thanos.commands.prune']"  # (and the shared argument helpers, _args)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_prune_imports_no_transformers(tmp_path, model_type: str) -> None:
    """A prune job reads tensors by name, the layers' names from model_info.json (as the workflow runs it),
    for every model type: its process start is torch's, not transformers' (seconds)."""
    from thanos.cli import main
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "model", model_type, hidden_size=32, num_blocks=1)
    assert main(["model-info", "--model", str(model), "--out", str(tmp_path / "info.json")]) == 0
    argv = ["prune", "--model", str(model), "--block", "0", "--method", "magnitude", "--sparsity", "0.5"]
    argv += ["--model-info", str(tmp_path / "info.json")]
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "thanos", *argv, "--out-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env(),
        check=True,
    )
    imported = {line.split("|")[-1].strip() for line in timed.stderr.splitlines() if "|" in line}
    assert "torch" in imported and "transformers" not in imported
    assert (tmp_path / "out" / "mlp.down_proj.safetensors").is_file()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["prune-model", "--model", "m", "--method", "thanoss", "--sparsity", "0.5", "--out", "o"],
            "ERROR: thanos prune-model: argument --method: invalid choice: 'thanoss' (choose from "
            "'magnitude', 'sparsegpt', 'wanda', 'thanos'); did you mean 'thanos'? (thanos prune-model --help",
        ),
        (["prune-modle"], "invalid choice: 'prune-modle' (choose from 'assemble', "),
        (
            ["prune-model", "--model", "m", "--method", "thanos", "--out", "o"],
            "ERROR: thanos prune-model: the following arguments are required: --sparsity (thanos prune-model",
        ),
        (
            ["perplexity", "--model", "m", "--out", "o", "--bogus", "1"],
            "ERROR: thanos perplexity: unrecognized arguments: --bogus 1 (thanos perplexity --help",
        ),
    ],
)
def test_a_mistyped_option_is_one_line_without_the_usage(args: list[str], line: str, tmp_path: Path) -> None:
    """argparse's errors are one line like every other (no 35 lines of usage first), exit status 2; a
    mistyped choice gets the closest one suggested."""
    from conftest import thanos_here

    run = thanos_here(*args, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.splitlines() == [run.stderr.strip()], run.stderr
    assert line in run.stderr and "usage:" not in run.stderr
    if "prune-modle" in args:
        assert "did you mean 'prune-model'?" in run.stderr


ABANDONED_WRITE = """
import asyncio, gc, logging, sys, threading
logging.basicConfig(stream=sys.stderr)  # as the command's: its records on stderr
loop, started = asyncio.new_event_loop(), threading.Event()
thread = threading.Thread(target=loop.run_forever, daemon=True)
thread.start()

async def write():  # a store's write, as zarr runs it in its event loop
    started.set()
    await asyncio.sleep(100)

future = asyncio.run_coroutine_threadsafe(write(), loop)
started.wait()
if sys.argv[1] == "handled":  # the interruption, handled as every command handles one
    from thanos.errors import interruption
    interruption(KeyboardInterrupt())
print("interrupted after 0:03: finished steps are kept; run the same command to resume", file=sys.stderr)
loop.call_soon_threadsafe(loop.stop)  # the exit: zarr's atexit stops and closes its loop
thread.join()
loop.close()
del future
gc.collect()
"""


def test_an_interruption_mid_write_ends_with_the_resume_line():
    """Ctrl-C during a zarr store's write leaves the write's task pending in zarr's event loop, and closing
    the loop at exit had asyncio report it ("Task was destroyed but it is pending!") after the resume line,
    the command's last. Once the interruption is handled (``thanos.errors.interruption``), nothing follows
    that line; unhandled, the same process says it."""
    for handled, reported in (("handled", False), ("unhandled", True)):
        run = subprocess.run([sys.executable, "-c", ABANDONED_WRITE, handled], capture_output=True, text=True)
        assert ("Task was destroyed but it is pending!" in run.stderr) == reported, run.stderr
        assert run.stderr.rstrip().endswith("run the same command to resume") != reported, run.stderr


SIGNAL_IN_A_FINALIZER = """
import os, signal, sys, time
from thanos.cli import _sigterm_as_interrupt
from thanos.errors import Terminated

class Collected:
    def __del__(self):  # the signal arrives while the garbage collector runs a finalizer
        os.kill(os.getpid(), {number})
        for _ in range(100):  # the handler runs here, in the finalizer: Python prints and drops its exception
            pass

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (`cmd &` starts it ignored)
with _sigterm_as_interrupt():
    try:
        Collected()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the command's work goes on
            time.sleep(0.001)
        print("not interrupted")
    except KeyboardInterrupt as err:
        print("interrupted:", type(err).__name__)
"""


@pytest.mark.parametrize(
    "number, raised", [("signal.SIGTERM", "Terminated"), ("signal.SIGINT", "KeyboardInterrupt")]
)
def test_a_signal_that_lands_in_a_finalizer_still_ends_the_command(number: str, raised: str) -> None:
    """SIGTERM or Ctrl-C handled while a finalizer runs (an object's ``__del__``): Python prints the
    interruption and drops it, and the command ran to its end with exit status 0 (a size's search, its
    SIGTERM landing in a regex object's ``__del__``, wrote its model). The signal is sent again and raised
    where the command is; nothing is printed of the dropped one."""
    code = SIGNAL_IN_A_FINALIZER.replace("{number}", number)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert run.stdout.strip() == f"interrupted: {raised}", run.stdout + run.stderr
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr


@pytest.mark.slow
def test_zero_shot_documents_the_hub_would_give_are_checked_before_the_pruning(
    model: Path, tmp_path: Path
) -> None:
    """``prune-model --evaluate zeroshot`` of a task whose documents are a hub dataset (a built-in task's
    are) where the hub cannot be reached and has not cached them: refused before any step, naming the task
    and the fix, no ``--out`` (it failed after the pruning, exit 1). The task is a local YAML naming a hub
    dataset: lm-eval's built-in index (seconds) is not built."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "hubtask.yaml").write_text(
        "task: hubtask\ndataset_path: someorg/some-dataset\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{q}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: label\n"
    )
    env = os.environ | {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    args = ["prune-model", "--model", model, "--method", "magnitude", "--sparsity", "0.5"]
    args += ["--out", tmp_path / "out", "--workdir", tmp_path / "w", "--evaluate", "zeroshot"]
    args += ["--tasks", "hubtask", "--include-path", tasks]
    run = subprocess.run(
        [sys.executable, "-m", "thanos", *map(str, args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    line = run.stderr.splitlines()[-1]
    assert run.returncode == 2 and "lm-eval task 'hubtask' cannot load its documents" in line, run.stderr
    assert "its dataset is on the hub" in line and "--include-path DIR" in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()


def test_an_evaluation_where_the_hub_cannot_be_reached_reads_its_cache_at_once(
    model: Path, tmp_path: Path
) -> None:
    """``thanos perplexity`` of the hub's WikiText-2 where the hub cannot be reached: its clients retried
    for half a minute (23 lines of ``Retrying in Ns``) before the error; the command finds it unreachable
    first, says so, and reads the cache alone (here empty: the error at once, naming the local file)."""
    env = os.environ | {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        env.pop(name, None)
    args = [
        sys.executable,
        "-m",
        "thanos",
        "perplexity",
        "--model",
        str(model),
        "--out",
        str(tmp_path / "p.json"),
    ]
    run = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "Retrying" not in run.stderr, run.stderr[-3000:]
    assert "the hub is not available (127.0.0.1:9 cannot be reached" in run.stderr
    assert "pass --source PATH" in run.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("sparsity", "said"),
    [
        ("nuerons:0.3", "cannot parse 'nuerons:0.3' (did you mean 'neurons:0.3'?); use a fraction"),
        ("param:0.25", "(did you mean 'params:0.25'?)"),
        (
            "depth:2+nuerons:0.3",
            "its part 'nuerons:0.3' is no structure (did you mean 'neurons:0.3'?); a combined",
        ),
        ("depth:1+neurons:2", "its part 'neurons:2': neurons fraction must lie in [0, 1), got 2.0"),
        ("2:4:8", "cannot parse '2:4:8'; use a fraction"),
    ],
)
def test_a_misspelt_sparsity_is_named_with_the_closest_form(tmp_path: Path, sparsity: str, said: str) -> None:
    """A sparsity of no known form: one line, the closest form suggested where the kind is misspelt, the
    forms listed once (they were listed twice: the parser's, then the recipe's)."""
    from conftest import make_tiny_model, thanos_here

    model = make_tiny_model(tmp_path, "llama")
    args = (
        "prune-model",
        "--model",
        model,
        "--method",
        "thanos",
        "--sparsity",
        sparsity,
        "--out",
        tmp_path / "o",
    )
    run = thanos_here(*args, cwd=tmp_path)
    assert run.returncode == 2 and said in run.stderr and run.stderr.count("'depth:4+neurons:0.3'") <= 1, (
        run.stderr
    )
    assert "allowed:" not in run.stderr and not (tmp_path / "o").exists()
