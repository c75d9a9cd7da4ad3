"""A workflow's Ctrl-C, said once: the Snakefile installs ``watch(logger)`` while Snakemake parses it.

Ctrl-C reaches Snakemake and every job at once (the terminal's process group): each job ends, keeping what
it finished and saying so in its log, and Snakemake stops scheduling, ends what still runs and fails the
run. Without this, each of those jobs is then reported as an error ("Error in rule ...", its command, its
``CalledProcessError``, the Snakefile's summary of its log: progress bars), the run ends in
``WorkflowError``, and a second Ctrl-C while Snakemake ends the jobs prints Snakemake's tracebacks.

With it: the first Ctrl-C interrupts Snakemake as before (its "Terminating processes on user request"); the
errors Snakemake logs from then on are not shown (they are the interrupted jobs'; the full log keeps
them), a second Ctrl-C is not passed on (the jobs are already ending), and the last line on the terminal
is ``LINE``.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
from typing import Any

LINE = "interrupted: the same command resumes (every finished job is kept)"


class Interrupt(logging.Filter):
    """Whether Ctrl-C reached this Snakemake; a filter of its logger that drops its errors from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def on_sigint(self, _signum: int, _frame: Any) -> None:
        if self.interrupted:  # Snakemake is already ending the jobs: let it finish (and release its lock)
            return
        self.interrupted = True
        raise KeyboardInterrupt

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.interrupted:
            return True
        return record.levelno < logging.WARNING and not record.getMessage().startswith(
            "Removing output files"
        )

    def say(self) -> None:
        if self.interrupted:
            print(LINE, file=sys.stderr, flush=True)


def watch(logger: logging.Logger) -> Interrupt:
    """Install the watch on Snakemake's ``logger`` and SIGINT (in the main thread only: elsewhere, as in
    a job's own parse of the Snakefile, Snakemake's behaviour is left as it is)."""
    interrupt = Interrupt()
    try:
        signal.signal(signal.SIGINT, interrupt.on_sigint)
    except ValueError:  # not the main thread
        return interrupt
    logger.addFilter(interrupt)
    atexit.register(interrupt.say)  # after Snakemake's last words (its log's path, the run time)
    return interrupt
