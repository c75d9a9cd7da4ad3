"""The pipeline on a real SLURM cluster (tests/slurm_cluster.py) through workflow/profiles/slurm.

The reference (module fixture): a local `--cores` run of a small config (tiny random Llama, 2 blocks, one
Thanos recipe, sequential chain, perplexity of the pruned model).

A cluster with (stand-in) GPUs, `device: auto`, in order:
1. the reference config through `snakemake --profile workflow/profiles/slurm` with the squeue status command:
   every rule job but the local ones (the model's facts and tokens) goes through sbatch (SLURM job ids in
   Snakemake's log, slurmctld's jobcomp record, the plugin's per-job SLURM logs); GPU rules ask for
   `--gpus=1` and get a (stand-in) GPU;
   one running job (capture of block 1) is cancelled with `scancel`, so that run fails (--retries 0);
2. the same command again finishes the run and resubmits none of the jobs that had finished (their
   outputs keep their mtimes; no new SLURM job for them);
3. the assembled model's safetensors are byte-identical to the local run's.

A CPU-only cluster (no GPU gres at all), `device: cpu`, granularity recipe: every job is accepted by
sbatch (no --gpus request), completes, and the model is byte-identical to the local run's; a depth recipe
(rule depth) and a combined one (a combined-part job per part) run there through sbatch like the others.

The file's time is mostly waiting (sbatch, the status checks, each job's Python start), so its three runs
overlap: the local reference run and the CPU-only cluster's run start in the background before the first
test (module fixtures), and each test waits for them only where it needs their results.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import calibrated, shared_worker, snakemake_command, thanos_here  # noqa: E402
from helpers.tools import SLURM_PLUGIN, slurm_plugin, with_slurm_plugin  # noqa: E402
from slurm_cluster import SlurmCluster, slurm_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"

pytestmark = pytest.mark.slow

RECIPE = "thanos_u50"
MODEL = "tiny"
DISTILLED = "thanos_u50_kd"
# whole blocks (rule depth, then assemble) and a combined recipe (one combined-part job per part), on the
# CPU-only cluster
STRUCTURES = {
    "depth1": {"method": "thanos", "sparsity": "depth:1"},
    "combo": {"method": "thanos", "sparsity": "depth:1+neurons:0.3"},
}
# the rules that run where Snakemake runs (localrules), never through sbatch
LOCAL_RULES = {"model_info", "calibrate", "tables", "figures"}
DISTILL = {"tokens": 512, "seqlen": 32, "batch_size": 2, "heldout": 2, "checkpoint_every": 4}


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = "the of a model block layer weight prune sparse dense hessian token sample calibration".split()
    return [" ".join(rng.choice(words) for _ in range(80)) for _ in range(n)]


def _write_config(tmp: Path, model: Path, results: Path, **overrides) -> Path:
    data = tmp / "data"
    if not data.exists():
        data.mkdir()
        for name, seed in (("calib", 0), ("test", 1)):
            with open(data / f"{name}.jsonl", "w") as f:
                for text in _texts(16, seed):
                    f.write(json.dumps({"text": text}) + "\n")
    config = {
        "results": str(results),
        "models": {MODEL: {"path": str(model)}},
        "calibration": {"source": str(data / "calib.jsonl"), "nsamples": 4, "seqlen": 32},
        "chain": "sequential",
        "granularity": "block",
        "device": "auto",
        "recipes": {RECIPE: {"method": "thanos", "sparsity": 0.5}},
        "perplexity": {"enabled": True, "source": str(data / "test.jsonl"), "seqlen": 32, "batch_size": 4},
        "zeroshot": {"enabled": False},
        "evaluate_dense": False,
        "report": False,
        **overrides,
    }
    path = results.parent / f"{results.name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


def _snakemake(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 480):
    cmd = snakemake_command(cwd, *args)
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _safetensors_digests(model_dir: Path) -> dict[str, str]:
    files = sorted(model_dir.glob("*.safetensors"))
    assert files, f"no safetensors in {model_dir}"
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _submitted(log: str) -> dict[str, str]:
    """SLURM job id -> rule, from Snakemake's 'submitted with SLURM jobid' lines."""
    jobs = {}
    for m in re.finditer(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_([A-Za-z0-9_]+)/", log):
        jobs[m.group(1)] = m.group(2)
    return jobs


def _slurm_env(cluster_env: dict[str, str]) -> dict[str, str]:
    return dict(
        with_slurm_plugin(cluster_env),
        THANOS_SLURM_PARTITION="debug",
        THANOS_SLURM_ACCOUNT="",  # the test cluster has no accounts
        THANOS_MODEL_B="0.001",  # smallest requests: the tiny model
    )


SLURM_ARGS = [
    "--profile",
    str(PROFILE),
    "--jobs",
    "2",  # the node has the machine's CPUs (2 on CI): no point queueing more
    "--slurm-status-command",
    "squeue",  # the test cluster has no accounting (sacct: "accounting storage is disabled")
    # The plugin checks the jobs' status this long after a check that found a job finished, and 10 s
    # longer after each check that found none (1 s: checks 1, 12, 33 s after a submission). A job here
    # takes 8-14 s (two Snakemake starts and one of `python -m thanos`): 5 s puts the second check after
    # it (15-20 s) instead of the third (33 s) on a busy machine.
    "--slurm-init-seconds-before-status-checks",
    "5",
    "--seconds-between-status-checks",
    "1",
    "--latency-wait",
    "5",
    "--retries",
    "0",  # a cancelled job fails the run (the profile would resubmit it)
    "--slurm-keep-successful-logs",
]


def _require_slurm() -> None:
    # In CI (root, PyPI reachable) a missing prerequisite is a failure, not a skip.
    if os.geteuid() != 0:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("starting slurmd needs root (CI runs as root)")
    slurm_plugin()  # the plugin, installed once per machine (fails on CI, skips here without PyPI)


class Background:
    """A snakemake run started now, in a process of its own (its output in ``log``); ``result()`` waits for
    it, fails the test if it failed, and returns its output."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        cmd = snakemake_command(cwd, *args)
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)

    def result(self, timeout: float = 600) -> str:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.stop()
        output = self.log.read_text()
        assert self.proc.returncode == 0, output[-4000:]
        return output

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """The tiny model of every run (``thanos make-tiny-model``, in this process: ``thanos_here``)."""
    _require_slurm()
    root = tmp_path_factory.mktemp("model")
    built = thanos_here(
        "make-tiny-model", "--family", "llama", "--hidden-size", "64", "--num-blocks", "2", "--num-heads",
        "4", "--seed", "0", "--out", root / "model", cwd=root,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return root / "model"


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory) -> Iterator[tuple[Path, Background]]:
    """(tiny model, the local --cores run of the reference config, started in the background; its
    results are under ``results/local`` of its directory once ``result()`` returns). Its jobs run in this
    pytest process's warm worker (``shared_worker``), as the other local runs of the tests do."""
    root = tmp_path_factory.mktemp("reference")
    local_cfg = _write_config(root, model, root / "local")
    env = dict(os.environ, **shared_worker())
    run = Background(["--cores", "2", "--configfile", str(local_cfg)], env, root, root / "local.log")
    yield model, run
    run.stop()


def _local(run: Background) -> Path:
    """The local run's results, once it has finished."""
    run.result()
    return run.log.parent / "local"


@pytest.fixture(scope="module")
def cpu_only(model, tmp_path_factory) -> Iterator[tuple[Path, SlurmCluster, Background]]:
    """(work directory, the CPU-only cluster, its run of the reference config with ``device: cpu``,
    granularity recipe), started in the background before the first test, so that its jobs run while the
    other cluster's do; the cluster lives until the file's tests are done."""
    root = tmp_path_factory.mktemp("cpu-only")
    # One job per recipe (granularity recipe) keeps the number of sbatch round trips small. The recipe is
    # also distilled (8 steps) by a job of two processes sharding the models (torchrun, FSDP over gloo).
    distilled = {
        "method": "thanos",
        "sparsity": 0.5,
        "distill": DISTILL | {"source": str(root / "data" / "calib.jsonl")},
    }
    cfg = _write_config(
        root, model, root / "slurm", device="cpu", granularity="recipe", distill_processes=2,
        distill_shard=True, recipes={RECIPE: {"method": "thanos", "sparsity": 0.5}, DISTILLED: distilled,
                                     **STRUCTURES},
    )  # fmt: skip
    with slurm_cluster(root / "cluster", gpus=0) as cluster:
        run = Background(
            [*SLURM_ARGS, "--configfile", str(cfg)], _slurm_env(cluster.env), root, root / "run.log"
        )
        try:
            yield root, cluster, run
        finally:
            run.stop()


def test_pipeline_on_slurm_matches_local_run_and_resumes_after_scancel(reference, cpu_only, tmp_path):
    # cpu_only: the other cluster's run starts before this test and goes on beside it
    model, local_run = reference

    # 1. Through SLURM, with one job cancelled mid-run.
    slurm_cfg = _write_config(tmp_path, model, tmp_path / "slurm")
    out = tmp_path / "slurm" / MODEL
    with slurm_cluster(tmp_path / "cluster") as cluster:
        env = _slurm_env(cluster.env)
        args = [*SLURM_ARGS, "--configfile", str(slurm_cfg)]
        cmd = snakemake_command(tmp_path, *args)
        first_log = tmp_path / "first_run.log"
        with open(first_log, "w") as log:
            proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
            cancelled = _cancel_when_running(
                cluster, proc, f"rule_capture_wildcards_{MODEL}_{RECIPE}_1", timeout=600
            )
            rc = proc.wait(timeout=300)
        first = first_log.read_text()
        assert rc != 0, "the run with a cancelled job should fail\n" + first[-3000:]
        assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in first, first[-3000:]
        submitted_first = _submitted(first)
        assert submitted_first[cancelled] == "capture"

        # Outputs of the jobs that finished before the cancel, and their mtimes.
        calibration = calibrated(out)  # the run's one calibration
        chains = calibration / "chains"
        finished = [
            out / "model_info.json",
            calibration / "tokens.zarr",
            chains / "dense" / "inputs_0.zarr",
            chains / "dense" / "hessians_0.zarr",
            out / RECIPE / "pruned" / calibration.name / "block0",
            chains / RECIPE / "inputs_1.zarr",
        ]
        for path in finished:
            assert path.exists(), f"{path} should exist before the cancel\n{first[-3000:]}"
        mtimes = {p: _tree_mtimes(p) for p in finished}
        assert not (chains / RECIPE / "hessians_1.zarr").exists()

        # 2. The same command again: finishes, recomputes nothing that had finished.
        res = _snakemake(args, env, tmp_path)
        second = res.stdout + res.stderr
        assert res.returncode == 0, second[-4000:]
        submitted_second = _submitted(second)
        rules_second = sorted(submitted_second.values())
        assert rules_second == ["assemble", "capture", "perplexity", "prune_block"], second[-4000:]
        assert not set(submitted_second) & set(submitted_first)
        for path in finished:
            assert _tree_mtimes(path) == mtimes[path], f"{path} was rewritten by the second run"

        # Every job really went through sbatch: slurmctld's job completion record lists each SLURM job id
        # Snakemake reported, with the plugin's run id as job name; GPU rules got a GPU.
        completed = {j["JobId"]: j for j in cluster.completed_jobs()}
        all_jobs = {**submitted_first, **submitted_second}
        assert set(all_jobs) <= set(completed), (all_jobs, completed)
        assert completed[cancelled]["JobState"] == "CANCELLED"
        for job_id, rule in all_jobs.items():
            if job_id != cancelled:
                assert completed[job_id]["JobState"] == "COMPLETED", (rule, completed[job_id])
            tres = cluster.job(job_id).get("TresPerJob", "")
            gpu_rule = rule in ("embed", "capture", "propagate", "prune_block", "perplexity")
            assert ("gpu:1" in tres) == gpu_rule, (rule, tres)
        assert {"embed", "capture", "prune_block", "propagate"} <= set(submitted_first.values())
        # the model's facts and tokens ran where Snakemake runs (localrules), not through sbatch
        assert not LOCAL_RULES & set(all_jobs.values()), all_jobs
        assert "localcheckpoint model_info:" in first and "localrule calibrate:" in first, first[-3000:]

    # 3. Byte-identical assembled model.
    local = _local(local_run)
    local_model = local / MODEL / RECIPE / "model"
    slurm_model = out / RECIPE / "model"
    assert _safetensors_digests(slurm_model) == _safetensors_digests(local_model)
    ppl_local = json.loads((local / MODEL / RECIPE / "eval" / "perplexity.json").read_text())
    ppl_slurm = json.loads((out / RECIPE / "eval" / "perplexity.json").read_text())
    assert ppl_slurm["ppl"] == ppl_local["ppl"]


def test_cpu_only_cluster_with_device_cpu_requests_no_gpu(reference, cpu_only, model):
    _, local_run = reference
    root, cluster, run = cpu_only
    assert "Gres=(null)" in cluster.run("scontrol", "show", "node").stdout
    log = run.result()
    assert "Invalid generic resource" not in log
    submitted = _submitted(log)
    rules = {
        "embed",
        "capture",
        "prune_recipe",
        "assemble",
        "perplexity",
        "distill",
        "depth",
        "combined_part",
        "combined_model",
    }
    assert rules <= set(submitted.values()) and not LOCAL_RULES & set(submitted.values()), submitted
    completed = {j["JobId"]: j for j in cluster.completed_jobs()}
    for job_id, rule in submitted.items():
        assert completed[job_id]["JobState"] == "COMPLETED", (rule, completed[job_id])
        assert "gpu" not in cluster.job(job_id).get("TresPerJob", ""), rule

    local = _local(local_run)
    slurm_model = root / "slurm" / MODEL / RECIPE / "model"
    assert _safetensors_digests(slurm_model) == _safetensors_digests(local / MODEL / RECIPE / "model")
    ppl_local = json.loads((local / MODEL / RECIPE / "eval" / "perplexity.json").read_text())
    ppl_slurm = json.loads((root / "slurm" / MODEL / RECIPE / "eval" / "perplexity.json").read_text())
    assert ppl_slurm["ppl"] == ppl_local["ppl"]
    # the distillation job: two processes in one SLURM job, sharded, its checkpoints deleted once written
    distilled = root / "slurm" / MODEL / DISTILLED
    record = json.loads((distilled / "model" / "distillation.json").read_text())
    assert record["processes"] == 2 and record["sharded"] is True and record["steps"] == 8
    assert not (distilled / "distill").exists()
    assert (distilled / "eval" / "perplexity.json").is_file()
    # the structures: a model of fewer blocks, and one of fewer blocks and neurons, each evaluated
    for recipe in STRUCTURES:
        written = json.loads((root / "slurm" / MODEL / recipe / "model" / "config.json").read_text())
        assert written["num_hidden_layers"] == 1, recipe
        assert (root / "slurm" / MODEL / recipe / "eval" / "perplexity.json").is_file(), recipe
    assert written["intermediate_size"] < json.loads((model / "config.json").read_text())["intermediate_size"]


def test_the_plugin_tested_is_one_the_slurm_extra_installs():
    """The SLURM executor plugin the runs above use (``SLURM_PLUGIN``) is in the range of the project's
    ``slurm`` extra, which users install; the jobstep plugin in the range the SLURM plugin asks for."""
    import tomllib
    from importlib.metadata import Distribution

    from packaging.requirements import Requirement

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["slurm"]
    pinned = {Requirement(pin).name: Requirement(pin) for pin in SLURM_PLUGIN}
    (wanted,) = [Requirement(r) for r in extra]
    version = next(iter(pinned[wanted.name].specifier)).version
    assert wanted.specifier.contains(version), (wanted, version)
    (found,) = Distribution.discover(name=wanted.name, path=[str(slurm_plugin())])
    assert found.version == version
    requires = [Requirement(r) for r in found.requires or []]
    (needed,) = [r for r in requires if r.name.startswith("snakemake-executor-plugin-slurm-")]
    assert needed.specifier.contains(next(iter(pinned[needed.name].specifier)).version), needed


def _tree_mtimes(path: Path) -> dict[str, int]:
    if path.is_file():
        return {path.name: path.stat().st_mtime_ns}
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in sorted(path.rglob("*"))}


def _cancel_when_running(cluster, proc: subprocess.Popen, comment_glob: str, timeout: float) -> str:
    """Wait until a job whose SLURM comment matches `comment_glob` is RUNNING, scancel it, return its id."""
    import fnmatch

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"snakemake exited ({proc.returncode}) before the job to cancel ran")
        res = cluster.run("squeue", "--noheader", "--states=RUNNING", "--format=%i|%k", check=False)
        for line in res.stdout.splitlines():
            job_id, _, comment = line.strip().partition("|")
            if fnmatch.fnmatch(comment, comment_glob):
                cluster.run("scancel", job_id)
                return job_id
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"no running job matching {comment_glob} within {timeout} s: {cluster.squeue()}")
