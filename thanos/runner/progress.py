"""What ``thanos prune-model`` and ``thanos distill`` show while they run, and where the rest goes.

``StepProgress`` shows the stages' events (``thanos.events``; it reads no log record): one short line per
finished step, prefixed by the elapsed time, one per block the chain finishes (with the recovery's
validation loss before and after for a recipe with recovery, and from the second block on the time left at
this run's rate), the chain's resume (which blocks an earlier run finished), and the distillation's
checkpoints, held-out KL and warnings (and, when it is not a terminal, its listed steps: twenty a run). On
a terminal it also keeps a status line up to date, within the terminal's width and the numbers first: the
recovery's epoch and validation loss, the distillation's step, KL, tokens/s and time left, then the step
that runs and for how long (its paths shortened to their names, or cut, where the line would not fit).

``full_log`` sends everything else to the run's log file for the duration: the package's log records,
and what the stages print (progress bars, warnings of the libraries) on stdout and stderr.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from thanos.events import (
    BlockDone,
    ChainResumed,
    DistillNote,
    DistillStep,
    DistillWarning,
    Event,
    RecoveryEpoch,
    StepDone,
    StepStarted,
    clock_text,
)

LABEL_ROOM = 12  # the fewest columns the step's label is shown in on the status line (else it is left out)


class Console:
    """The run's terminal stream; a reader that went away (``| head`` closed the pipe) stops the lines, not
    the run: the rest of the run's lines go to its log file only."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.closed = stream, False

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self.closed = True

    def isatty(self) -> bool:
        return not self.closed and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


def columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to: ``$COLUMNS`` where it is set, else the terminal's,
    else the terminal of stdout's (80 where there is none)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns


def short_paths(text: str) -> str:
    """``text``, each path in it shortened to its name (``/data/corpus.jsonl`` -> ``corpus.jsonl``)."""
    return " ".join(Path(word).name or word if "/" in word else word for word in text.split(" "))


def fit_status(head: str, numbers: str, label: str, since: str, width: int) -> str:
    """The status line in ``width`` columns, the numbers first: ``[0:42] numbers | label (since)``; where it
    does not fit, the label's paths shortened to their names, then the label cut, then left out; then the
    numbers' last parts (``, ``-separated: the learning rate first) left out."""
    parts = numbers.split(", ") if numbers else []
    while len(parts) > 1 and len(head) + 1 + len(", ".join(parts)) > width:
        parts.pop()
    head = f"{head} {', '.join(parts)}" if parts else head
    gap, tail = (" | " if numbers else " "), f" ({since})"
    for text in (label, short_paths(label)):
        if len(head) + len(gap) + len(text) + len(tail) <= width:
            return head + gap + text + tail
    room = width - len(head) - len(gap) - len(tail)
    if room >= LABEL_ROOM:
        return head + gap + short_paths(label)[: room - 3] + "..." + tail
    return head if len(head) <= width else head[: width - 3] + "..."


class StepProgress:
    """The stages' events (``thanos.events``, through ``on_event``) -> progress lines on ``stream``."""

    def __init__(
        self, stream: TextIO | None = None, interactive: bool | None = None, started: float | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.started = time.monotonic() if started is None else started
        self.current: str | None = None  # the step that runs
        self.current_since = 0.0
        self.block = ""
        self.resumed: ChainResumed | None = None  # the chain's blocks an earlier run finished, if it resumed
        self._blocks: list[float] = []  # when this run's blocks of the chain step finished
        self._mutex = threading.RLock()
        self._status = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def elapsed(self) -> str:
        return clock_text(time.monotonic() - self.started)

    def note(self, text: str) -> None:
        """A permanent line: ``[0:42] text``."""
        with self._mutex:
            self.clear()
            self.stream.write(f"[{self.elapsed()}] {text}\n")
            self.stream.flush()
            self._refresh()

    def on_event(self, event: Event) -> None:
        """Show ``event``: a line of its own, the status line, or both."""
        with self._mutex:
            if isinstance(event, StepStarted):
                self.current, self.current_since, self.block = event.label, time.monotonic(), ""
                self._blocks = []
                self._refresh()
            elif isinstance(event, StepDone):
                self.current = None
                took = f"{event.seconds:.1f} s" if event.seconds < 60 else clock_text(event.seconds)
                self.note(f"done: {event.label} ({took})")
            elif isinstance(event, RecoveryEpoch):  # the status line only: a line per epoch would drown
                self._update(event.text, listed=False)  # the blocks'
            elif isinstance(event, DistillStep):  # a line of its own when not a terminal: twenty a run
                self._update(event.text, listed=event.listed, prefix="distill")
            elif isinstance(event, DistillNote):
                self.note(f"distill: {event.text}")
            elif isinstance(event, DistillWarning):
                self.note(f"warning: distill: {event.text}")
            elif isinstance(event, ChainResumed):
                self.resumed = event
                self.note(f"{self.current or 'chain'}: resuming: {event.text}")
            elif isinstance(event, BlockDone):
                self._blocks.append(time.monotonic())
                left = self._left(event.blocks - event.block - 1)
                self._update(event.text + left, listed=True, prefix=self.current or "chain")

    def _update(self, text: str, listed: bool, prefix: str = "") -> None:
        """``text`` on the status line; not on a terminal, a line ``prefix: text`` when ``listed``."""
        self.block = text
        if listed and not self.interactive:
            self.note(f"{prefix}: {text}")
        self._refresh()

    def _left(self, blocks: int) -> str:
        """ ", ~1:05 left": the remaining blocks at the rate of this run's blocks, once two are done."""
        if blocks <= 0 or len(self._blocks) < 2:
            return ""
        rate = (self._blocks[-1] - self._blocks[0]) / (len(self._blocks) - 1)
        return f", ~{clock_text(math.ceil(rate * blocks))} left"

    def clear(self) -> None:
        """Remove the status line (before a permanent line)."""
        with self._mutex:
            if self.interactive and self._status:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._status = ""

    def _refresh(self) -> None:
        if not self.interactive or self.current is None:
            return
        with self._mutex:
            since = clock_text(time.monotonic() - self.current_since)
            width = columns(self.stream) - 1  # a wrapped line could not be redrawn
            self._status = fit_status(f"[{self.elapsed()}]", self.block, self.current, since, width)
            self.stream.write("\r\x1b[K" + self._status)
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._refresh()

    def __enter__(self) -> StepProgress:
        if self.interactive:
            self._thread = threading.Thread(target=self._tick, name="thanos-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.clear()


@contextlib.contextmanager
def full_log(log_file: Path) -> Iterator[logging.Handler]:
    """For the duration: the log records of every logger, and this process's stdout and stderr, go to
    ``log_file`` (appended) instead of the terminal; the terminal's own log handlers are set aside."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    aside = [
        h
        for h in root.handlers
        if isinstance(h, logging.StreamHandler) and h.stream in (sys.stderr, sys.stdout)
    ]
    with log_file.open("a", encoding="utf-8", buffering=1) as handle:
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.INFO)
        level = root.level
        for old in aside:
            root.removeHandler(old)
        root.addHandler(handler)
        root.setLevel(min(level, logging.INFO) if level else logging.INFO)
        try:
            with contextlib.redirect_stdout(handle), contextlib.redirect_stderr(handle):
                yield handler
        finally:
            root.removeHandler(handler)
            for old in aside:
                root.addHandler(old)
            root.setLevel(level)
