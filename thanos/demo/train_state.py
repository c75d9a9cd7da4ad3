"""The demo training's state between its runs, so that a stopped ``train-demo`` resumes where it was.

``<out>.train-state/state.pt`` holds the weights, AdamW's moments, the steps done, the loss curve so far and
torch's random state (the device's too), replaced whole every ``every`` steps or every minute; the
directory's record (``run.json``, ``thanos.files.ledger``) says what every state it holds is of: the
training's options, its documents and the device. A run of the same options on the same documents resumes
at the step it holds and writes the bytes an uninterrupted run writes (the windows of a step are a function
of the seed and the step alone: ``thanos.demo.train._batches``); a state of other options or documents is
said and replaced; the directory is deleted once the model is written.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from thanos.files.atomic import atomic_path
from thanos.files.ledger import MISSING, Entry

log = logging.getLogger(__name__)

STATE = "state.pt"
RECORD = "run.json"
SAVE_SECONDS = 60.0  # a state kept at least this often, whatever the steps (a slow or loaded machine)
SUFFIX = ".train-state"


def state_dir(out: Path) -> Path:
    """Where the training of the model written to ``out`` keeps its state: ``<out>.train-state``."""
    return out.parent / f"{out.name}{SUFFIX}"


@dataclass
class TrainState:
    """A training's kept state: in ``where``, of ``inputs``, written every ``every`` steps or every
    ``SAVE_SECONDS``, whichever comes first (``every`` 0: never)."""

    where: Path
    inputs: dict[str, Any]
    every: int
    saved: int = 0  # the steps done in the state kept now (0: none)
    last: float = field(default_factory=time.monotonic)  # when the last state was kept (or the run began)

    @property
    def entry(self) -> Entry:
        """The directory and its record: a state is kept once ``state.pt`` is there (``_complete``)."""
        return Entry(self.where, self.where / RECORD)

    def _complete(self, where: Path) -> bool:
        return (where / STATE).is_file()

    def load(self) -> dict[str, Any] | None:
        """The state an earlier run of these inputs kept; None without one (one of other inputs, or one whose
        record was never written: said, and deleted)."""
        why = self.entry.reason(self.inputs, self._complete)
        if why == MISSING:
            return None
        if why is not None:
            log.warning("train-demo: the state in %s is not resumed (%s): started over", self.where, why)
            self.clear()
            return None
        state = torch.load(self.where / STATE, map_location="cpu", weights_only=True)
        self.saved = int(state["step"])
        return state

    def due(self, done: int, steps: int) -> bool:
        """Whether the state is kept after ``done`` of ``steps`` steps (not after the last: the model is)."""
        if self.every <= 0 or done >= steps:
            return False
        return done % self.every == 0 or time.monotonic() - self.last >= SAVE_SECONDS

    def save(self, state: dict[str, Any]) -> None:
        """Keep ``state`` (its ``step``: the steps done) in place of the one kept (the directory's record
        written after the first: each state there is whole, and of these inputs)."""
        self.where.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.where / STATE) as tmp:
            torch.save(state, tmp)
        if not self.entry.current(self.inputs, self._complete):
            self.entry.write(self.inputs)
        self.saved, self.last = int(state["step"]), time.monotonic()

    def clear(self) -> None:
        """Delete the kept state (the model is written)."""
        shutil.rmtree(self.where, ignore_errors=True)
