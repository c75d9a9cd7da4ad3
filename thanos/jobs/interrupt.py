"""A workflow's Ctrl-C, said once: the Snakefile installs ``watch(logger)`` while Snakemake parses it.

Ctrl-C reaches Snakemake and every job at once (the terminal's process group): each job ends, keeping what
it finished and saying so in its log, and Snakemake stops scheduling, ends what still runs and fails the
run. Without this, each of those jobs is then reported as an error ("Error in rule ...", its command, its
``CalledProcessError``, the Snakefile's summary of its log: progress bars), the run ends in
``WorkflowError``, and a second Ctrl-C while Snakemake ends the jobs prints Snakemake's tracebacks.

With it, the first Ctrl-C asks Snakemake to stop as its own SIGTERM does ("Will exit after finishing
currently running jobs": the jobs, which got the Ctrl-C too, end at once), not by an exception raised
wherever its main thread is (inside its asyncio file checks that exception escapes as a traceback); a run
on a cluster, whose jobs the Ctrl-C does not reach, is interrupted as before (Snakemake cancels its jobs).
The errors Snakemake logs from then on are not shown (they are the interrupted jobs'; its log file keeps
them), a second Ctrl-C only says that the jobs are ending, and the last line on the terminal is ``LINE``.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
from typing import Any

LINE = "interrupted: the same command resumes (every finished job is kept)"
STOPPING = "stopping: the running jobs are ending, each keeping what it finished"


class Interrupt(logging.Filter):
    """Whether Ctrl-C reached this Snakemake (``workflow``); a filter of its logger that drops its errors
    from then on."""

    def __init__(self, workflow: Any) -> None:
        super().__init__()
        self.workflow = workflow
        self.interrupted = False

    def on_sigint(self, _signum: int, _frame: Any) -> None:
        if self.interrupted:  # the jobs are ending: let Snakemake finish (and release its lock)
            print(STOPPING, file=sys.stderr, flush=True)
            return
        self.interrupted = True
        scheduler = getattr(self.workflow, "scheduler", None)
        local = getattr(self.workflow, "local_exec", False)
        if local and scheduler is not None and hasattr(scheduler, "exit_gracefully"):
            # in a thread of its own: the scheduler takes its lock, which this (main) thread may hold now
            threading.Thread(target=scheduler.exit_gracefully, daemon=True).start()
            return
        raise KeyboardInterrupt  # parsing, or a cluster's run: Snakemake cancels its jobs

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.interrupted:
            return True
        return record.levelno < logging.WARNING and not record.getMessage().startswith(
            "Removing output files"
        )

    def say(self) -> None:
        if self.interrupted:
            print(LINE, file=sys.stderr, flush=True)


def watch(logger: logging.Logger, workflow: Any) -> Interrupt:
    """Install the watch on Snakemake's ``logger`` and SIGINT (in the main thread only: elsewhere
    Snakemake's behaviour is left as it is)."""
    interrupt = Interrupt(workflow)
    try:
        signal.signal(signal.SIGINT, interrupt.on_sigint)
    except ValueError:  # not the main thread
        return interrupt
    logger.addFilter(interrupt)
    atexit.register(interrupt.say)  # after Snakemake's last words (its log's path, the run time)
    return interrupt
