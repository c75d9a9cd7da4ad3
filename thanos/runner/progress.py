"""Compact terminal progress of a Snakemake run, for ``thanos prune-model``.

``Progress`` is a logging handler on Snakemake's logger: it reads the structured events (a job started,
finished or failed; jobs done of total) and prints one short line per finished job, prefixed by the
elapsed time. On a terminal it also keeps a status line up to date (jobs done, what runs, the block a
chain job has reached, read from the job's log). Snakemake's full log goes to a file, not here.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

# what each rule does, for the progress lines; {wildcards} are filled in, unknown rules show their name
JOB_LABELS = {
    "make_tiny_model": "build the tiny model",
    "model_info": "read the model's structure",
    "calibrate": "sample calibration tokens",
    "embed": "embed the calibration tokens (block 0 inputs)",
    "capture": "Hessians of block {l} ({chain})",
    "propagate": "inputs of block {l} ({chain})",
    "prune_layer": "prune block {l} {layer} ({recipe})",
    "prune_block": "prune block {l} ({recipe})",
    "prune_recipe": "prune every block ({recipe})",
    "assemble": "assemble the pruned model ({recipe})",
    "perplexity": "perplexity ({variant})",
    "zeroshot": "zero-shot tasks ({variant})",
    "evaluate": "perplexity and zero-shot tasks ({variant})",
    "owl": "OWL sparsity per block ({recipe})",
}
BLOCK_DONE = re.compile(r"block (\d+)/(\d+) done")
TAIL_BYTES = 4096


def job_label(rule: str, wildcards: dict[str, Any]) -> str:
    template = JOB_LABELS.get(rule)
    if template is None:
        return rule
    try:
        return template.format(**wildcards)
    except (KeyError, IndexError):
        return rule


def clock_text(seconds: float) -> str:
    """1:05, 1:02:03."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def last_block(log: Path) -> str:
    """``block 3/32`` from the last ``block i/n done`` line of a chain job's log, else ''."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    found = BLOCK_DONE.findall(text)
    return f"block {found[-1][0]}/{found[-1][1]} done" if found else ""


def log_tail(path: Path, lines: int = 25) -> str:
    """What a failed job's log says went wrong (``thanos.jobs.joblogs.error_lines``: its ERROR line, or its
    last ``lines`` lines), as the workflow's own failure summary shows it."""
    from thanos.jobs.joblogs import error_lines

    try:
        return "\n".join(error_lines(str(path), lines)[1])
    except OSError as err:
        return f"(cannot read {path}: {err})"


@dataclass
class RunningJob:
    rule: str
    label: str
    logs: list[str]
    started: float
    block: str = ""


@dataclass
class FailedJob:
    rule: str
    label: str
    logs: list[str] = field(default_factory=list)


class Progress(logging.Handler):
    """Snakemake log events -> compact progress lines on ``stream`` (stderr by default)."""

    def __init__(
        self,
        workdir: str | Path,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        super().__init__(level=logging.INFO)
        self.workdir = Path(workdir)
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.poll_seconds = poll_seconds
        self.started = time.monotonic()
        self.running: dict[int, RunningJob] = {}
        self.done = 0
        self.total: int | None = None
        self.finished: list[str] = []
        self.failed: list[FailedJob] = []
        self.nothing_to_do = False
        self.interrupted: str | None = None
        self._finished_job: RunningJob | None = None
        self._mutex = threading.RLock()
        self._status = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- output ----------------------------------------------------------------------------------

    def elapsed(self) -> str:
        return clock_text(time.monotonic() - self.started)

    def _write(self, text: str) -> None:
        with self._mutex:
            if self.interactive and self._status:
                self.stream.write("\r\x1b[K")
                self._status = ""
            self.stream.write(text + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A permanent line: ``[0:42] text``."""
        self._write(f"[{self.elapsed()}] {text}")

    def _jobs(self) -> str:
        return f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"

    def _refresh(self) -> None:
        if not self.interactive:
            return
        with self._mutex:
            now = time.monotonic()
            doing = "; ".join(
                f"{job.label}{': ' + job.block if job.block else ''} ({clock_text(now - job.started)})"
                for job in self.running.values()
            )
            status = f"[{self.elapsed()}] {self._jobs()} jobs done" + (f" | {doing}" if doing else "")
            width = shutil.get_terminal_size().columns - 1  # a wrapped line could not be redrawn
            self._status = status[:width]
            self.stream.write("\r\x1b[K" + self._status)
            self.stream.flush()

    def clear(self) -> None:
        """Remove the status line (before the caller prints its own lines)."""
        with self._mutex:
            if self.interactive and self._status:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._status = ""

    # --- Snakemake's events ----------------------------------------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        name = getattr(event, "value", event)
        with self._mutex:
            if name == "job_info":
                label = job_label(record.rule_name, dict(record.wildcards or {}))
                self.running[record.jobid] = RunningJob(
                    record.rule_name, label, list(record.log or []), time.monotonic()
                )
                if record.rule_name != "all":
                    self._refresh()
            elif name == "job_finished":  # Snakemake logs the new job count (progress) right after
                job = self.running.pop(record.job_id, None)
                if job is not None and job.rule != "all":
                    self._check_block(job)  # its last blocks may have finished between two polls
                    self.finished.append(job.rule)
                    self._finished_job = job
            elif name == "progress":
                self.done, self.total = int(record.done), int(record.total)
                job, self._finished_job = self._finished_job, None
                if job is not None:
                    seconds = clock_text(time.monotonic() - job.started)
                    self.note(f"{self._jobs()} jobs done: {job.label} ({seconds})")
                self._refresh()
            elif name == "run_info":
                stats = getattr(record, "stats", None) or {}
                if "total" in stats:
                    self.total = int(stats["total"])
            elif name == "job_error":
                rule = record.rule_name
                job = next((j for j in self.running.values() if j.rule == rule), None)
                label = job.label if job else rule
                self.failed.append(FailedJob(rule, label, list(record.log or [])))  # reported at the end
            elif name is None:
                message = str(record.msg)
                if "Nothing to be done" in message:
                    self.nothing_to_do = True
                elif message.startswith("Terminating processes on user request"):
                    self.interrupted = "interrupt"  # Ctrl-C: Snakemake stops the running jobs
                elif message.startswith("Will exit after finishing currently running jobs"):
                    self.interrupted = "terminate"  # SIGTERM: Snakemake lets the running jobs finish
                    self.note("SIGTERM: waiting for the running job(s) to finish, then stopping")

    # --- chain jobs: poll their logs for the block they reached ----------------------------------

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            with self._mutex:
                jobs = list(self.running.values())
            for job in jobs:
                self._check_block(job)
            self._refresh()

    def _check_block(self, job: RunningJob) -> None:
        """Note the block a chain job's log says it reached, if it moved on since last looked at."""
        if not job.logs:
            return
        block = last_block(self.workdir / job.logs[0])
        if block and block != job.block:
            job.block = block
            if not self.interactive:
                self.note(f"{job.label}: {block}")

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._poll, name="thanos-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.clear()
