"""Run the package's Snakemake workflow in this process, through Snakemake's Python API.

Used by ``thanos prune-model``: the same ``Snakefile`` and rules as a ``snakemake`` command line, so
finished jobs are never recomputed and a rerun resumes. What this adds for a one-command tool:

- Snakemake's full log goes to ``log_file``; the terminal gets ``thanos.runner.progress.Progress`` lines.
- Resuming needs no flags: a run always reruns incomplete jobs (``--rerun-incomplete``), and a lock left
  by a killed run is removed (``--unlock``) once it is certain that nothing else uses the working
  directory: an exclusive lock file is held for the whole run (``.thanos-run.lock``), and no other
  process may have its current directory inside it (a killed run's jobs would). Both are said on the
  terminal.
- Jobs run ``python -m thanos ...``: the directory of this interpreter is put first on ``PATH``, so they
  use this installation even when its environment is not activated.
- Those jobs run in forks of one warm worker (``thanos.jobs.worker``) that has imported torch and
  transformers once, instead of starting Python and importing them again per job (seconds each): same
  commands, same files, one child process per job.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from thanos.jobs.worker import LocalWorker
from thanos.runner.progress import Progress
from thanos.runner.workflow_files import snakefile

LOCK_NAME = ".thanos-run.lock"


class WorkflowFailed(RuntimeError):
    """The workflow stopped before its targets were built (a job failed, or it was interrupted)."""

    def __init__(self, message: str, interrupted: bool = False) -> None:
        super().__init__(message)
        self.interrupted = interrupted


@contextlib.contextmanager
def exclusive_workdir(workdir: Path) -> Iterator[None]:
    """Hold ``workdir/.thanos-run.lock`` (flock) for the duration; refuse if another run holds it."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_NAME
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise ValueError(
                f"working directory {workdir} is in use by {owner}; wait for it to finish, or give "
                "another --workdir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"thanos (pid {os.getpid()})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def processes_inside(workdir: Path) -> list[psutil.Process]:
    """Other processes whose current directory is ``workdir`` or below it (e.g. jobs of a killed run);
    not this process and its ancestors (the shell it was started from may sit there)."""
    root = str(workdir.resolve())
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for process in psutil.process_iter(["pid"]):
        if process.pid in mine:
            continue
        try:
            cwd = process.cwd()
        except (psutil.Error, OSError):
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(process)
    return found


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid}: {' '.join(process.cmdline())[:120]}"
    except (psutil.Error, OSError):
        return f"pid {process.pid}"


def _snakemake_lock_files(workdir: Path) -> list[Path]:
    locks = workdir / ".snakemake" / "locks"
    return sorted(locks.iterdir()) if locks.is_dir() else []


def _incomplete_markers(workdir: Path) -> list[Path]:
    markers = workdir / ".snakemake" / "incomplete"
    return sorted(markers.iterdir()) if markers.is_dir() else []


def _file_handler(log_file: Path) -> logging.Handler:
    from snakemake.logging import DefaultFilter, DefaultFormatter

    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(DefaultFormatter(quiet=set(), show_failed_logs=True))
    handler.addFilter(DefaultFilter(set(), False, False, False, True))
    handler.setLevel(logging.INFO)
    return handler


def _snakemake(
    workdir: Path,
    configfile: Path,
    cores: int,
    handlers: Sequence[logging.Handler],
    targets: Sequence[str] = (),
    unlock: bool = False,
) -> None:
    """One Snakemake API call: execute the workflow (rerunning incomplete jobs) or only unlock."""
    from snakemake.api import SnakemakeApi
    from snakemake.logging import logger as snakemake_logger
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
    )

    output = OutputSettings(
        printshellcmds=True, nocolor=True, show_failed_logs=True, enable_file_logging=False
    )
    sigterm = signal.getsignal(signal.SIGTERM)
    propagate = snakemake_logger.propagate
    with SnakemakeApi(output) as api:
        for handler in list(snakemake_logger.handlers):  # Snakemake's own terminal output
            snakemake_logger.removeHandler(handler)
        for handler in handlers:
            snakemake_logger.addHandler(handler)
        snakemake_logger.propagate = False
        try:
            workflow = api.workflow(
                resource_settings=ResourceSettings(cores=cores),
                config_settings=ConfigSettings(configfiles=[configfile]),
                snakefile=snakefile(),
                workdir=workdir,
            )
            dag = workflow.dag(dag_settings=DAGSettings(targets=frozenset(targets), force_incomplete=True))
            if unlock:
                dag.unlock()
            else:
                dag.execute_workflow(executor="local", execution_settings=ExecutionSettings())
        finally:
            snakemake_logger.propagate = propagate
            with contextlib.suppress(ValueError):  # only the main thread may; Snakemake's scheduler did
                signal.signal(signal.SIGTERM, sigterm)


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def run_workflow(
    workdir: str | Path,
    configfile: str | Path,
    progress: Progress,
    log_file: str | Path,
    worker: LocalWorker,
    cores: int | None = None,
    targets: Sequence[str] = (),
) -> None:
    """Build ``targets`` (default: the workflow's ``all``) in ``workdir`` with ``configfile``; the jobs
    run in ``worker`` (stopped on return).

    Raises ``WorkflowFailed`` when a job fails or the run is interrupted (finished jobs are kept: the
    same call resumes), ``ValueError`` when another run uses ``workdir``."""
    from snakemake.exceptions import WorkflowError

    workdir, configfile, log_file = Path(workdir).resolve(), Path(configfile).resolve(), Path(log_file)
    cores = cores or os.cpu_count() or 1
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    with exclusive_workdir(workdir), contextlib.ExitStack() as stack:
        if path.split(os.pathsep)[0] != bindir:
            os.environ["PATH"] = bindir + os.pathsep + path
            stack.callback(os.environ.__setitem__, "PATH", path)
        stack.callback(worker.stop)
        saved = {name: os.environ.get(name) for name in worker.env}
        os.environ.update(worker.env)
        stack.callback(_restore, saved)
        file_handler = _file_handler(log_file)
        stack.callback(file_handler.close)
        handlers = (file_handler, progress)
        if _snakemake_lock_files(workdir):
            busy = processes_inside(workdir)
            if busy:
                raise ValueError(
                    f"{workdir} is locked by a previous run and processes still run inside it (its jobs?): "
                    + "; ".join(_describe(p) for p in busy[:5])
                    + "; wait for them or stop them, then run the same command again"
                )
            progress.note(
                "a previous run was stopped before it could unlock the working directory and nothing "
                "is running in it: unlocking (snakemake --unlock)"
            )
            _snakemake(workdir, configfile, cores, handlers, unlock=True)
        incomplete = _incomplete_markers(workdir)
        if incomplete:
            progress.note(
                f"{len(incomplete)} output(s) of jobs that were interrupted last time are deleted and "
                "redone (snakemake --rerun-incomplete); everything finished is kept"
            )
        try:
            _snakemake(workdir, configfile, cores, handlers, targets=targets)
        except WorkflowError as err:
            interrupted = progress.interrupted is not None
            raise WorkflowFailed(str(err).strip() or type(err).__name__, interrupted=interrupted) from err
        except KeyboardInterrupt:
            raise WorkflowFailed("interrupted", interrupted=True) from None
