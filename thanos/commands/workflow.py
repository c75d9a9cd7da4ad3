"""Run the Snakemake workflow this package carries (``Snakefile`` and ``workflow/``: the repository's in a
clone, the wheel's copy in an installed package) in the current directory: ``thanos workflow --cores 2
--configfile my.yaml`` is ``snakemake -s <the Snakefile> --directory . --cores 2 --configfile my.yaml``. Every
argument after ``workflow`` goes to Snakemake; the results, logs and ``.snakemake/`` are written here."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

# every argument this command does not know is Snakemake's (``thanos.cli``)
PASSTHROUGH = True
TRACEBACK = False  # its own error (no config) names the fix

HELP = "run the packaged Snakemake workflow in this directory: thanos workflow --cores 2 --configfile C.yaml"

EPILOG = """\
examples:
  thanos workflow --cores 2 --configfile my-models.yaml     # your config (its keys: docs/configuration.md)
  thanos workflow --cores 2 --configfile "$(thanos workflow --where)/workflow/configs/smoke.yaml"
  thanos workflow --profile "$(thanos workflow --where)/workflow/profiles/slurm" --configfile my.yaml
  thanos workflow --where                                    # where the Snakefile and workflow/ are

A config.yaml in this directory is read when no --configfile is given. Without --profile or --workflow-profile
the packaged local profile is used (workflow/profiles/default: --rerun-incomplete among others), so a rerun of
the same command resumes, after Ctrl-C too.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--where", action="store_true", help="print the directory that holds the Snakefile and workflow/"
    )


def run(args: argparse.Namespace) -> None:
    from thanos.runner.workflow_files import workflow_root

    if args.where:
        print(workflow_root())
        return
    from thanos.workflow.config_file import read_config_file

    given = args._extra
    if not any(arg.startswith("--configfile") for arg in given) and not Path("config.yaml").is_file():
        raise ValueError(
            f"no config: {Path.cwd() / 'config.yaml'} does not exist and no --configfile was given; give "
            f"--configfile FILE (examples: {workflow_root() / 'workflow' / 'configs'}; keys: "
            "docs/configuration.md)"
        )
    for path in config_files(given):  # each read as the workflow reads it, its problem said with its line
        read_config_file(path)
    raise SystemExit(run_snakemake(snakemake_command(given)))


def config_files(given: list[str]) -> list[str]:
    """The files of ``--configfile A [B ...]`` (or ``--configfile=A``, ``--configfiles``) among Snakemake's
    arguments ``given``."""
    files, taking = [], False
    for arg in given:
        if arg.startswith("--configfile"):
            name, _, value = arg.partition("=")
            taking = not value and name in ("--configfile", "--configfiles")
            files += [value] if value else []
        elif taking and not arg.startswith("-"):
            files.append(arg)
        else:
            taking = False
    return files


def run_snakemake(command: list[str]) -> int:
    """Run ``command`` (Snakemake) and return its exit status (130 after a Ctrl-C, 143 after a SIGTERM).
    Snakemake runs in a process group of its own, its jobs and its worker with it, and an interruption of
    this process, a Ctrl-C from the terminal or a ``kill -INT`` or ``kill -TERM`` of its pid alone (a
    supervisor's), is passed to that whole group as SIGINT: Snakemake and every job stop as a Ctrl-C stops
    them (the jobs keep what they finished; Snakemake releases its lock and says how to resume) and this
    process waits for them. (A SIGTERM passed to Snakemake alone waited for its running jobs to finish, hours
    at scale, then said ``At least one job did not complete successfully``; a SIGINT to this pid alone was
    not passed on.)"""
    import signal

    stopped: list[int] = []
    child = subprocess.Popen(command, process_group=0)  # before the handlers: it keeps Python's defaults

    def stop(number: int, _frame: object) -> None:
        stopped.append(number)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGINT)

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 128 + stopped[0] if stopped and status else status


def snakemake_command(given: list[str]) -> list[str]:
    """``snakemake`` on the packaged Snakefile in this directory with the arguments ``given``, and the
    packaged local profile unless they name a profile (Snakemake finds a workflow profile by itself only
    in ``profiles/default`` beside the Snakefile or here, not in ``workflow/profiles/``)."""
    from thanos.runner.workflow_files import snakefile, workflow_root

    command = [sys.executable, "-m", "snakemake", "-s", str(snakefile()), "--directory", os.getcwd()]
    if not any(arg.startswith(("--profile", "--workflow-profile")) for arg in given):
        command += ["--workflow-profile", str(workflow_root() / "workflow" / "profiles" / "default")]
    return [*command, *given]
