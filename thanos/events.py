"""What a run reports while it runs: typed progress events, from the stages to whoever shows them.

The stages call an ``OnEvent`` (a parameter, ``ignore`` by default) with one of these events; the terminal
display (``thanos.runner.progress.StepProgress``) shows them. Their log lines are written beside them, for
the log file only: nothing reads a log line back, so a log line can be reworded freely.

- ``StepStarted``, ``StepDone``: a step of the engine (``thanos.stages.engine``), or the distillation;
- ``ChainResumed``, ``BlockDone``: the chain (``thanos.stages.chain``) resumed at its first unfinished block;
  a block pruned (and recovered);
- ``RecoveryEpoch``: an epoch of a block's recovery (``thanos.stages.recover``);
- ``SearchCandidate``: a size search's candidate measured (``thanos.runner.size``);
- ``DistillStep``: a distillation's step (``thanos.stages.distill.distill``); its ``DistillNote``s, each a
  line of its own: ``DistillCheckpoint``, ``DistillResumed``, ``DistillBefore`` (the held-out KL before
  training), ``DistillSharded`` (FSDP); ``DistillWarning``: what it warns of.

An event's ``text`` is what the display says of it (most log lines say it too, in their own frame).
Torch-free; imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar


def clock_text(seconds: float) -> str:
    """1:05, 1:02:03."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def blocks_text(blocks: list[int] | tuple[int, ...]) -> str:
    """ "blocks 1-5", "blocks 1-3, 6", "block 2" of the 0-based ``blocks``: 1-based, runs joined."""
    runs: list[list[int]] = []
    for block in blocks:
        if runs and block == runs[-1][-1] + 1:
            runs[-1].append(block)
        else:
            runs.append([block])
    text = ", ".join(f"{r[0] + 1}-{r[-1] + 1}" if len(r) > 1 else f"{r[0] + 1}" for r in runs)
    return f"block{'s' * (len(blocks) > 1)} {text}"


@dataclass(frozen=True)
class StepStarted:
    """A step started: ``label`` says which (``prune every block (thanos_2-4)``)."""

    label: str


@dataclass(frozen=True)
class StepDone:
    """A step finished, after ``seconds``."""

    label: str
    seconds: float


@dataclass(frozen=True)
class ChainResumed:
    """The chain found blocks ``done`` (0-based) of its ``blocks`` finished by an earlier run."""

    done: tuple[int, ...]
    blocks: int

    @property
    def finished(self) -> str:
        """``blocks 1-5 of 8 done``."""
        return f"{blocks_text(self.done)} of {self.blocks} done"

    @property
    def text(self) -> str:
        """``blocks 1-5 of 8 done, starting at block 6``."""
        start = min(set(range(self.blocks)) - set(self.done)) + 1
        return f"{self.finished}, starting at block {start}"


@dataclass(frozen=True)
class BlockDone:
    """Block ``block`` (0-based) of ``blocks`` pruned; ``recovery``: its recovery's validation loss before
    and after (None: the recipe has no recovery)."""

    block: int
    blocks: int
    recovery: tuple[float, float] | None = None

    @property
    def text(self) -> str:
        """``block 3/8 done (recovery: validation loss 0.5 -> 0.42)``."""
        recovery = ""
        if self.recovery is not None:
            recovery = f" (recovery: validation loss {self.recovery[0]:.4g} -> {self.recovery[1]:.4g})"
        return f"block {self.block + 1}/{self.blocks} done{recovery}"


@dataclass(frozen=True)
class RecoveryEpoch:
    """Epoch ``epoch`` of ``epochs`` of block ``block``'s (0-based) recovery, its validation ``loss``."""

    block: int
    epoch: int
    epochs: int
    loss: float

    @property
    def text(self) -> str:
        """``block 3: recovery epoch 2/4, validation loss 0.421``."""
        epoch = f"recovery epoch {self.epoch}/{self.epochs}"
        return f"block {self.block + 1}: {epoch}, validation loss {self.loss:.6g}"


@dataclass(frozen=True)
class DistillStep:
    """Step ``step`` of ``steps`` of a distillation done: its KL, the tokens a second, the time left at the
    mean step time so far, its learning rate."""

    step: int
    steps: int
    kl: float
    tokens_per_second: float
    seconds_left: float
    lr: float

    @property
    def listed(self) -> bool:
        """Whether it is one of the twenty steps a run lists (the log's, a display that is not a
        terminal's); the others only update a status line."""
        return self.step % max(1, self.steps // 20) == 0

    @property
    def text(self) -> str:
        """``step 3/24: KL 0.5132, 5,120 tokens/s, 0:20 left, lr 0.0003``: the numbers first."""
        return (
            f"step {self.step}/{self.steps}: KL {self.kl:.4g}, {self.tokens_per_second:,.0f} tokens/s, "
            f"{clock_text(self.seconds_left)} left, lr {self.lr:.3g}"
        )


class DistillNote:
    """A distillation's event that a display lists as it comes, a line of its own: its ``text`` is its
    ``WORDS`` with its fields filled in."""

    WORDS: ClassVar[str]

    @property
    def text(self) -> str:
        return self.WORDS.format_map(vars(self))


@dataclass(frozen=True)
class DistillCheckpoint(DistillNote):
    """A checkpoint written at step ``step`` of ``steps``: the held-out KL, the best so far and its step."""

    step: int
    steps: int
    kl: float
    best_kl: float
    best_step: int
    WORDS = "checkpoint at step {step}/{steps}: held-out KL {kl:.4g} (best {best_kl:.4g} at step {best_step})"


@dataclass(frozen=True)
class DistillResumed(DistillNote):
    """The distillation resumed from the checkpoint of step ``step`` in ``directory``."""

    step: int
    directory: str
    WORDS = "resumed from the checkpoint of step {step} ({directory})"


@dataclass(frozen=True)
class DistillBefore(DistillNote):
    """The student's held-out KL before training."""

    kl: float
    WORDS = "before training: held-out KL {kl:.4g}"


@dataclass(frozen=True)
class DistillSharded(DistillNote):
    """The models sharded by FSDP over ``processes``."""

    processes: int
    WORDS = (
        "sharded (FSDP) over {processes} processes: each holds 1/{processes} of the student, its gradients, "
        "AdamW's moments and the teacher"
    )


@dataclass(frozen=True)
class DistillWarning:
    """What a distillation warns of (another teacher, a text gone over again, checkpoints of another run)."""

    text: str


Event = (
    StepStarted
    | StepDone
    | ChainResumed
    | BlockDone
    | RecoveryEpoch
    | DistillStep
    | DistillCheckpoint
    | DistillResumed
    | DistillBefore
    | DistillSharded
    | DistillWarning
)
OnEvent = Callable[[Event], None]


def ignore(event: Event) -> None:
    """An ``OnEvent`` that shows nothing: where no one watches (a workflow's job, a library call)."""


@dataclass(frozen=True)
class SearchCandidate:
    """A size search's candidate (``thanos.runner.size``), the ``index``-th of at most ``bound``: its
    explicit ``recipe``, the fraction of the parameters it removes, its held-out ``loss`` (nats per token),
    the ``seconds`` its pruning and measurement took, ``reused`` when an earlier run measured it; ``best``:
    the candidate of least loss so far among those that remove enough (None: none yet), ``left``: the
    seconds the other candidates may take at this run's mean (None: nothing timed yet)."""

    index: int
    recipe: str
    removed: float
    loss: float
    seconds: float
    reused: bool
    bound: int = 0
    best: str | None = None
    left: float | None = None
    error: float | None = None  # the loss's standard error over the held-out windows (None: not recorded)

    @property
    def text(self) -> str:
        """``candidate 3 of at most 8: depth:2+neurons:0.25: 21.4 % fewer parameters, held-out loss 0.1234
        ± 0.0211 (1:05); best so far depth:2+neurons:0.25; at most 5:25 left``."""
        when = "measured in an earlier run" if self.reused else clock_text(self.seconds)
        of = f" of at most {self.bound}" if self.bound >= self.index else ""
        text = (
            f"candidate {self.index}{of}: {self.recipe}: {100 * self.removed:.1f} % fewer parameters, "
            f"held-out loss {self.loss:.4f}{'' if self.error is None else f' ± {self.error:.4f}'} ({when})"
        )
        if self.best is not None:
            text += f"; best so far {self.best}"
        if self.left:
            text += f"; at most {clock_text(self.left)} left"
        return text
