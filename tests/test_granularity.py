"""granularity: auto picks per-layer jobs where they can run side by side, one job per recipe elsewhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_snakemake, snakemake_command
from helpers.tools import with_slurm_plugin

from thanos.jobs.granularity import choose_granularity

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("requested", "cluster", "gpus", "expected"),
    [
        ("auto", False, 0, "recipe"),
        ("auto", False, 1, "recipe"),
        ("auto", False, 2, "layer"),
        ("auto", True, 0, "layer"),
        ("layer", False, 0, "layer"),
        ("block", True, 8, "block"),
        ("recipe", True, 8, "recipe"),
        ("chain", False, 0, "recipe"),
    ],
)
def test_choose_granularity(requested, cluster, gpus, expected):
    granularity, reason = choose_granularity(requested, cluster=cluster, gpus=gpus)
    assert granularity == expected
    assert reason.startswith("auto:") == (requested == "auto")


def test_unknown_granularity_is_refused_by_name():
    with pytest.raises(ValueError, match="granularity: unknown 'job'"):
        choose_granularity("job", cluster=False, gpus=0)


def _dry_run(tmp_path: Path, config: dict, *args: str) -> str:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    cmd = snakemake_command(tmp_path, "-n", "--configfile", cfg, *args)
    env = with_slurm_plugin(dict(os.environ)) if "slurm" in args else None  # its executor: tests/helpers
    res = run_snakemake(cmd, env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("device", "args", "expected"),
    [
        ("cpu", ["--cores", "2"], "recipe"),
        ("cpu", ["--cores", "2", "--resources", "gpu=4"], "recipe"),  # device cpu: no GPU in use
        ("auto", ["--cores", "2", "--resources", "gpu=2"], "layer"),
        ("auto", ["--cores", "2", "--resources", "gpu=1"], "recipe"),
        ("cpu", ["--executor", "slurm", "--jobs", "4"], "layer"),  # a cluster (the dry run submits nothing)
    ],
)
def test_auto_is_resolved_when_the_workflow_is_parsed(tmp_path, device, args, expected):
    config = {
        "models": {"tiny": {"path": "models/tiny", "tiny": {}}},
        "recipes": {"m": {"method": "magnitude", "sparsity": 0.5}},
        "device": device,
        "perplexity": {"enabled": False},
        "zeroshot": {"enabled": False},
        "report": False,
        "evaluate_dense": False,
    }
    out = _dry_run(tmp_path, config, *args)
    assert f"granularity: {expected} (auto:" in out, out[-2000:]
