"""The documented Snakemake commands, taken from README.md and the pages of docs/ themselves and run on a
tiny workflow: the report, the default profile and the resume after SIGKILL. Each documented command is
run as written, plus the options that point it at the test's config and working directory.

One tiny run serves the three: it is killed after its first job and resumed with the documented commands
(the resume test checks each step), and the report and profile commands then run on its finished results.
"""

from __future__ import annotations

import json
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import kill_once, run_snakemake

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # every page a command may be shown on
WORDS = "the a model prunes weights layer block sparse dense matrix input output token".split()


def readme_commands() -> list[str]:
    """Every command line of the bash blocks of README.md and docs/*.md (continuations joined, comments
    dropped)."""
    commands, block, pending = [], False, ""
    for raw in "\n".join(page.read_text() for page in DOCS).splitlines():
        line = raw.strip()
        if line.startswith("```"):
            block = line in ("```bash", "```sh") if not block else False
            continue
        if not block or not line or line.startswith("#"):
            continue
        line = line.split(" #", 1)[0].rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def readme_command(*needles: str) -> list[str]:
    """The one documented command that contains every needle, split like a shell would."""
    found = [c for c in readme_commands() if all(n in c for n in needles)]
    assert len(found) == 1, (needles, found)
    return shlex.split(found[0])


def run(argv: list[str], workdir: Path, config: Path, cwd: Path | None = None, popen: bool = False):
    """A documented snakemake command pointed at ``config`` and ``workdir``."""
    assert argv[0] == "snakemake"
    cmd = [sys.executable, "-m", "snakemake", *argv[1:], "--directory", str(workdir)]
    cmd += ["--configfile", str(config), "--nocolor"]
    if cwd is None:
        cmd += ["-s", str(REPO / "Snakefile")]
    if popen:
        return subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    return run_snakemake(cmd, cwd=cwd)


def tiny_config(root: Path) -> Path:
    rng = random.Random(0)
    text = root / "text.jsonl"
    docs = [" ".join(rng.choice(WORDS) for _ in range(80)) for _ in range(40)]
    text.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs))
    config = {
        "models": {"llama": {"path": "models/llama", "tiny": {"family": "llama", "hidden_size": 32}}},
        "calibration": {"source": str(text), "nsamples": 8, "seqlen": 32},
        "granularity": "chain",
        "device": "cpu",
        "recipes": {"magnitude_u50": {"method": "magnitude", "sparsity": 0.5}},
        "perplexity": {"enabled": True, "source": str(text), "seqlen": 32},
        "zeroshot": {"enabled": False},
        "evaluate_dense": False,
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    """A tiny run killed with SIGKILL after its first job, then run again as docs/resuming.md says: the
    same command (refused), the documented ``--unlock`` and ``--rerun-incomplete`` commands. Its working
    directory, config and each step's finished process; the resumed run leaves the finished results (tables
    and figures) that the report and profile commands are run on."""
    root = tmp_path_factory.mktemp("readme")
    config = tiny_config(root)
    workdir = root / "work"
    proc = run(["snakemake", "--cores", "2"], workdir, config, popen=True)
    kill_once(proc, workdir / "results" / "llama" / "model_info.json", poll=0.1)
    steps = {"again": run(["snakemake", "--cores", "2"], workdir, config)}  # what docs/resuming.md says
    steps["unlocked"] = run(readme_command("--unlock"), workdir, config)
    steps["resumed"] = run(readme_command("--rerun-incomplete"), workdir, config)
    return {"workdir": workdir, "config": config, **steps}


@pytest.fixture
def finished(resumed) -> tuple[Path, Path]:
    """(working directory, config) of the finished tiny run (the resumed one) with tables and figures."""
    done = resumed["resumed"]
    assert done.returncode == 0, done.stderr[-4000:]
    return resumed["workdir"], resumed["config"]


@pytest.mark.slow
def test_readme_report_command(finished, tmp_path):
    workdir, config = finished
    command = readme_command("--report", "report.html")
    made = run(command, workdir, config)
    assert made.returncode == 0, made.stderr[-3000:]
    assert "perplexity.csv" in (workdir / "report.html").read_text(errors="replace")
    # with the demo config the rule train_demo takes all the cores: without --cores the report cannot
    # even be planned, with the documented --cores it gets as far as the missing results
    demo, empty = REPO / "config.yaml", tmp_path / "empty"
    bare = run([c for c in command if c not in ("--cores", "1")], empty, demo)
    assert bare.returncode != 0 and "requires a total number of cores" in bare.stderr
    planned = run(command, empty, demo)
    assert "requires a total number of cores" not in planned.stderr
    assert "marked for report but does not exist" in planned.stderr


@pytest.mark.slow
def test_readme_profile_command(finished):
    workdir, config = finished
    plain = run(["snakemake"], workdir, config, cwd=REPO)  # a profile is not loaded by itself
    assert plain.returncode != 0 and "cores have to be specified" in plain.stderr
    profiled = run(readme_command("--workflow-profile"), workdir, config, cwd=REPO)
    output = profiled.stdout + profiled.stderr
    assert profiled.returncode == 0, output[-3000:]
    assert "Using workflow specific profile workflow/profiles/default" in output
    assert "Nothing to be done" in output  # cores: all came from the profile


@pytest.mark.slow
def test_readme_resume_after_sigkill(resumed):
    workdir, again = resumed["workdir"], resumed["again"]
    refused = again.stdout + again.stderr
    assert again.returncode != 0
    assert "Directory cannot be locked" in refused or "--rerun-incomplete" in refused, refused[-2000:]
    unlocked = resumed["unlocked"]
    assert unlocked.returncode == 0, unlocked.stderr[-3000:]
    resumed_run = resumed["resumed"]
    assert resumed_run.returncode == 0, resumed_run.stderr[-3000:]
    assert (workdir / "results" / "llama" / "magnitude_u50" / "eval" / "perplexity.json").is_file()
    assert (workdir / "results" / "tables" / "perplexity.md").is_file()
