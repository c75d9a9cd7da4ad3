"""The project as a user installs it (a built wheel, not editable) ships its Snakemake workflow:
``thanos prune-model`` runs from a directory outside the repository, in a fresh virtual environment.

Cheap and offline: the wheel is built without build isolation, installed with ``--no-deps`` into a new
venv, and the dependencies are taken from the running interpreter's site-packages through a plain path
in a ``.pth`` file. ``.pth`` files inside that directory are not executed, so the editable install of
the development environment (a finder hook in such a file) stays invisible: only the wheel's ``thanos``
can be imported.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_SHIPPED = (".git", "results", ".snakemake", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(venv bin directory, environment) of a venv holding only the wheel of this project."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SHIPPED))
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            root / "dist",
            source,
        ]
    )
    (wheel,) = (root / "dist").glob("thanos_prune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("Snakefile", "workflow/rules/config.smk", "workflow/schemas/config.schema.yaml"):
        assert f"thanos/_workflow/{shipped}" in names, shipped
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])  # pip: this interpreter's (3 CPU-s less)
    bindir = venv / "bin"
    site = Path(
        run(
            [bindir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in paths))
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            bindir / "python",
            "install",
            "--no-deps",
            "--no-index",
            wheel,
        ]
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return bindir, env


@pytest.mark.slow
def test_the_wheel_is_what_runs(installed, tmp_path):
    bindir, env = installed
    code = "import thanos, thanos.runner.workflow_files as w; print(thanos.__file__); print(w.snakefile())"
    package, snakefile = run([bindir / "python", "-c", code], env=env, cwd=tmp_path).stdout.split()
    venv = bindir.parent
    assert Path(package).is_relative_to(venv) and Path(snakefile).is_relative_to(venv), (package, snakefile)
    assert Path(snakefile).parent.name == "_workflow"
    helped = run([bindir / "thanos", "prune-model", "--help"], env=env, cwd=tmp_path)
    assert "examples:" in helped.stdout and "thanos prune-model --model" in helped.stdout
    # the packaged workflow, run from a directory of the user's: its files, a dry run of a config there
    where = run([bindir / "thanos", "workflow", "--where"], env=env, cwd=tmp_path).stdout.strip()
    assert Path(where) == Path(snakefile).parent
    lost = subprocess.run(
        [bindir / "thanos", "workflow", "-n"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert lost.returncode == 2 and "no --configfile was given; give --configfile FILE" in lost.stderr
    config = {
        "models": {"tiny": {"path": "models/tiny", "tiny": {"family": "llama", "hidden_size": 32}}},
        "calibration": {"source": "calib.txt", "nsamples": 2, "seqlen": 16},
        "recipes": {"wanda_u50": {"method": "wanda", "sparsity": 0.5}},
        "perplexity": {"enabled": False},  # offline: no WikiText-2
        "zeroshot": {"enabled": False},
        "evaluate_dense": False,
        "report": False,
    }
    (tmp_path / "mine.yaml").write_text(json.dumps(config))
    (tmp_path / "calib.txt").write_text(" ".join(["the tiny model reads these words again"] * 40) + "\n")
    planned = run([bindir / "thanos", "workflow", "-n", "--configfile", "mine.yaml"], env=env, cwd=tmp_path)
    assert "make_tiny_model" in planned.stdout and "This was a dry-run" in planned.stdout, planned.stdout[
        -2000:
    ]
    # run for real, Ctrl-C (SIGINT to the process group) once the model is being assembled: the same
    # command again finishes it, without --rerun-incomplete (the packaged profile)
    command = [bindir / "thanos", "workflow", "--cores", "2", "--configfile", "mine.yaml"]
    proc = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    interrupted = False
    for line in proc.stdout:
        if "rule assemble" in line:
            time.sleep(0.3)  # the job started
            os.killpg(proc.pid, signal.SIGINT)
            interrupted = True
            break
    rest = proc.communicate()[0]
    # stopped (a non-zero status), or, on a busy machine, the assemble job had already finished when the
    # signal reached Snakemake: then it ended every step, and the rerun below has nothing left to do
    assert interrupted and (proc.returncode != 0 or "steps (100%) done" in rest), rest[-3000:]
    again = run(command, env=env, cwd=tmp_path)
    assert (tmp_path / "results" / "tiny" / "wanda_u50" / "model" / "config.json").is_file()
    said = again.stdout + again.stderr  # the rest run, with the closing summary; or nothing was left to run
    assert "results:" in said or "Nothing to be done" in said, said[-2000:]


@pytest.mark.slow
def test_prune_model_from_a_directory_outside_the_repository(installed, tmp_path):
    bindir, env = installed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run([bindir / "python", "-m", "thanos", "make-tiny-model", "--hidden-size", "32", "--out", "tiny"],
        env=env, cwd=elsewhere)  # fmt: skip
    # the venv is not activated and PATH has no `python` at all: bin/thanos is called by its path, and
    # runs every stage in its own process, from this installation
    bare = dict(env, PATH="/usr/bin:/bin")
    pruned = run(
        [bindir / "thanos", "prune-model", "--model", "tiny", "--method", "magnitude", "--sparsity", "0.5",
         "--out", "tiny-50", "--workdir", "work", "--device", "cpu", "--cores", "2"],
        env=bare, cwd=elsewhere,
    )  # fmt: skip
    assert f"written: {elsewhere / 'tiny-50'}" in pruned.stderr
    report = json.loads((elsewhere / "tiny-50" / "pruning_report.json").read_text())
    assert report["overall_sparsity"] == pytest.approx(0.5)
    assert (elsewhere / "tiny-50" / "README.md").is_file()
    log = (elsewhere / "work" / "logs" / "magnitude_u50.log").read_text()
    assert "read the model's structure: done" in log and "Traceback" not in log
    assert not (REPO / "work").exists() and not list(elsewhere.glob(".snakemake"))
