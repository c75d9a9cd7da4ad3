"""The progress display (``thanos.runner.progress``) shows the stages' events (``thanos.events``), not their
log lines: the same runs with every log line reworded show the same lines and status lines."""

from __future__ import annotations

import io
import logging
import re
import shutil
from pathlib import Path

import pytest
from conftest import make_tiny_model, thanos_here, write_corpus

SHARED = {"nsamples": 8, "seqlen": 32, "device": "cpu", "cores": 1, "keep": "all"}
# 4 steps of 2 windows of 32 tokens, a checkpoint every 2 steps
DISTILL = {"tokens": 256, "seqlen": 32, "batch_size": 2, "heldout": 2, "checkpoint_every": 2}
DISTILL_ARGS = ["--tokens", "256", "--seqlen", "32", "--batch-size", "2", "--heldout", "2"]
DISTILL_ARGS += ["--checkpoint-every", "2", "--device", "cpu", "--keep", "all"]
TIMES = [  # what depends on the clock: the elapsed time, a step's seconds, tokens/s, the time left
    (re.compile(r"\[\d+:\d\d(:\d\d)?\]"), "[T]"),
    (re.compile(r"\((\d+\.\d s|\d+:\d\d(:\d\d)?)\)"), "(T)"),
    (re.compile(r"[\d,]+ tokens/s"), "N tokens/s"),
    (re.compile(r"~?\d+:\d\d(:\d\d)? left"), "T left"),
]


class Terminal(io.StringIO):
    """A stream that says it is a terminal: the display keeps its status line on it."""

    def isatty(self) -> bool:
        return True


def shown(text: str, root: Path) -> list[str]:
    """The display's lines and status lines in ``text`` (each ``[0:42] ...``), in order, ``root`` and the
    clock's numbers masked, a status line redrawn unchanged (each second) counted once."""
    lines: list[str] = []
    for piece in re.split(r"\r\x1b\[K|\n", text.replace(str(root), "ROOT")):
        for pattern, mask in TIMES:
            piece = pattern.sub(mask, piece.strip())
        if piece.startswith("[T]") and (not lines or lines[-1] != piece):
            lines.append(piece)
    return lines


def runs(model: Path, text: Path, root: Path) -> tuple[list[str], str]:
    """``model`` pruned with recovery and distilled (``prune_model``, on a terminal), run again after
    its last block's layers were deleted (the chain resumes; the model assembled again is distilled again,
    its checkpoints of the earlier assembly deleted); then ``thanos distill`` of the result toward ``model``
    (not a terminal), run twice (the second, its output deleted, resumes from the last checkpoint); on
    ``text``, in ``root``: (what the display showed, the runs' log files)."""
    from thanos import prune_model

    work, terminal = root / "work", Terminal()
    options = {**SHARED, "recover": {"epochs": 2}, "distill": {**DISTILL, "source": str(text)}}
    for again in (False, True):
        if again:
            pruned = next(work.glob("results/*/wanda*/pruned"))
            for block in (pruned / "block2", pruned / "recovered" / "block2"):
                shutil.rmtree(block)
            (pruned / "chain.json").unlink()
        prune_model(model, "wanda", 0.5, out=root / "out", calibration=text, workdir=work, stream=terminal,
                    **options)  # fmt: skip
    args = ["distill", "--student", root / "out", "--teacher", model, "--source", text, *DISTILL_ARGS]
    args += ["--out", root / "distilled", "--work", root / "distill-work"]
    commands = [thanos_here(*args, cwd=root)]
    shutil.rmtree(root / "distilled")  # (an --out holding the run's result: nothing to do)
    commands.append(thanos_here(*args, cwd=root))
    assert all(command.returncode == 0 for command in commands), commands[-1].stderr[-3000:]
    display = shown(terminal.getvalue(), root) + [line for c in commands for line in shown(c.stderr, root)]
    logs = "".join(log.read_text() for log in sorted(root.rglob("*.log")))
    return display, logs


@pytest.mark.slow
def test_the_display_is_the_same_whatever_the_log_lines_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every event the display shows is in these runs: steps, blocks with their recovery, recovery epochs,
    the chain's resume, the distillation's steps, held-out KL, checkpoints, resume and warning. With every
    log record's text reworded (its words reversed), the display shows exactly the same."""
    monkeypatch.setenv("COLUMNS", "400")  # no status line cut: its length depends on the clock
    model = make_tiny_model(tmp_path, "llama", num_blocks=3)
    text = write_corpus(tmp_path / "text.jsonl", docs=40)
    plain, plain_log = runs(model, text, tmp_path / "plain")
    for expected in (
        "done: prune every block",
        "[T] block 3/3 done (recovery: validation loss",
        "block 2: recovery epoch 2/2, validation loss",
        "prune every block (wanda_u50_rec): resuming: blocks 1-2 of 3 done, starting at block 3",
        "distill: step 4/4: KL",
        "distill: before training: held-out KL",
        "distill: checkpoint at step 4/4: held-out KL",
        "distill: resumed from the checkpoint of step 4",
        "are of another run (student file config.json changed",  # the ledger's reason, as a warning
    ):
        assert any(expected in line for line in plain), "\n".join(plain)
    assert "chain: block 3/3 done" in plain_log

    message = logging.LogRecord.getMessage
    monkeypatch.setattr(logging.LogRecord, "getMessage", lambda r: " ".join(message(r).split()[::-1]))
    reworded, reworded_log = runs(model, text, tmp_path / "reworded")
    assert "chain: block 3/3 done" not in reworded_log and "done 3/3 block chain:" in reworded_log
    assert reworded == plain
