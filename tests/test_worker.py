"""The local job worker (``thanos.jobs.worker``): ``python -m thanos`` jobs forwarded to a warm process give
the same files, logs and exit status as run by themselves (real processes, a real Unix socket)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from thanos.jobs.worker import ENV, LocalWorker, killed_text


def thanos(*args: str | Path, cwd: Path, env: dict[str, str], log: Path) -> int:
    """``python -m thanos args > log 2>&1`` in ``cwd``, as a Snakemake job runs it; its exit status."""
    with log.open("w") as handle:
        return subprocess.run(
            [sys.executable, "-m", "thanos", *map(str, args)], cwd=cwd, env=env, stdout=handle, stderr=handle
        ).returncode


def test_forwarded_jobs_write_the_same_files_logs_and_status(tmp_path):
    plain = {k: v for k, v in os.environ.items() if k != ENV}
    model = ("make-tiny-model", "--hidden-size", "32", "--num-blocks", "1", "--out")

    worker = LocalWorker(threads=1)
    try:
        env = {**plain, **worker.env}
        assert thanos(*model, "forwarded", cwd=tmp_path, env=env, log=tmp_path / "forwarded.log") == 0
        failed = thanos(
            "model-info",
            "--model",
            "missing",
            "--out",
            "x.json",
            cwd=tmp_path,
            env=env,
            log=tmp_path / "failed.log",
        )
    finally:
        worker.stop()
    assert failed == 2  # the command's own exit status, and its one-line error in the job's log
    assert (tmp_path / "failed.log").read_text().strip().splitlines()[-1].startswith("ERROR: ")

    # a stopped worker: the command runs by itself, as without one, and writes what the forwarded one did
    assert not Path(worker.env[ENV]).exists()
    alone = thanos(*model, "alone", cwd=tmp_path, env={**plain, **worker.env}, log=tmp_path / "alone.log")
    assert alone == 0
    for name in ("config.json", "model.safetensors"):  # relative --out: the job's directory was used
        assert (tmp_path / "forwarded" / name).read_bytes() == (tmp_path / "alone" / name).read_bytes()


def test_a_snakemake_run_starts_a_worker_only_where_its_jobs_run_locally(monkeypatch):
    from thanos.jobs import worker

    monkeypatch.delenv(ENV, raising=False)
    assert "cluster run" in worker.for_this_run(local=False, threads=1)
    assert ENV not in os.environ  # a cluster job must never look for a socket on the submitting host
    monkeypatch.setenv(ENV, "off")
    assert "every job starts its own Python" in worker.for_this_run(local=True, threads=1)
    assert worker.forward(["--help"]) is None  # off: the command runs itself
    monkeypatch.setenv(ENV, "/some/socket")  # an enclosing run's worker: kept, no second one
    assert worker.for_this_run(local=True, threads=1).endswith("in use")
    assert os.environ[ENV] == "/some/socket" and not worker._RUN_WORKER


def test_a_job_killed_by_a_signal_is_said_so():
    """What the forwarding process writes to the job's log when the job died of a signal it could not
    answer (the out-of-memory killer's SIGKILL: the log ended in the job's last progress lines)."""
    assert killed_text(9) == "the job was killed by SIGKILL (the system's out-of-memory killer, or a kill -9)"
    assert killed_text(11) == "the job was killed by SIGSEGV"
