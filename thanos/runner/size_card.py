"""What a size's search says in the written model's card (README.md): every candidate measured, its
parameters, loss, the table's prediction and its error, and the chosen recipe; and the chosen one in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thanos.events import clock_text


def measured_text(candidates: list[dict[str, Any]], chosen: str) -> str:
    """The chosen recipe's measurement in words: its last (a mix written, after a point of the table)."""
    found = next(c for c in reversed(candidates) if c["recipe"] == chosen)
    return f"{100 * found['removed_fraction']:.1f} % fewer parameters, held-out loss {loss_text(found)}"


def loss_text(candidate: dict[str, Any]) -> str:
    """A candidate's held-out loss, with the standard error over the held-out windows where it was recorded
    (``0.3414 ± 0.0391``)."""
    error = candidate.get("loss_error")
    return f"{candidate['loss']:.4f}" + ("" if error is None else f" ± {error:.4f}")


def predicted_text(removed_fraction: float, loss: float) -> str:
    """A mix the cost table predicts, in words: the share of parameters it removes, its predicted loss."""
    return f"{100 * removed_fraction:.1f} % fewer parameters, held-out loss about {loss:.4f}"


def _predicted_text(candidate: dict[str, Any]) -> str:
    """A candidate's predicted loss: a mix's (and the prediction's error), or ``table`` for a point of it."""
    if "predicted_loss" not in candidate:
        return "table" if "+" not in candidate["recipe"] else ""
    return f"{candidate['predicted_loss']:.4f} ({candidate['loss'] - candidate['predicted_loss']:+.4f})"


def write_card(out: Path, record: dict[str, Any]) -> None:
    """The card's section on the search: every candidate, the chosen recipe."""
    rows = [
        f"| `{c['recipe']}` | {c['parameters']:,} | {100 * c['removed_fraction']:.1f} % | {loss_text(c)} | "
        f"{_predicted_text(c)} | {'' if c['kl'] is None else format(c['kl'], '.4f')} | {c['seconds']:.0f} |"
        for c in record["candidates"]
    ]
    written = next((c["windows"] for c in record["candidates"] if "windows" in c), None)
    # the table's points' own seconds, as each was measured (in this run, or an earlier one it read)
    own = sum(c["seconds"] for c in record["candidates"] if "windows" not in c)
    searched = clock_text(record["seconds"])
    if own > 1.5 * record["seconds"] + 10:  # read from an earlier run: this run's time is not the search's
        searched += f" by this run, which read candidates an earlier run measured ({clock_text(own)} in all)"
    footing = (
        f"; a mix is measured on the model written (calibrated on all {written} windows of every document, "
        "the held-out ones included: its loss is lower than on the table's footing)"
        if written
        else ""
    )
    section = [
        "", "## The size search", "",
        f"Asked: `{record['request']}` (at least {record['target_removed']:,} of {record['parameters']:,} "
        f"parameters removed), mixing {', '.join(record['axes'])}. Chosen: `{record['chosen']}` "
        f"({record['chosen_parameters']:,} parameters), the mix the cost table predicts, written as this "
        "model (run alone, its recipe writes the same) and measured. Loss: the "
        f"{record['loss']}, on {record['held_out']['windows']} held-out calibration windows (± the standard "
        "error over them: a difference smaller than it may be the windows drawn); the table's "
        f"points calibrated on {record['calibration']['windows']} windows{footing}. `table`: a point of the "
        "cost table (an axis alone, the same for every size); a mix's prediction is the sum of its parts' "
        f"costs on the table's curves, the measured difference in brackets. Searched in {searched}; "
        "`search.json` has it all.",
        "",
        "| candidate | parameters | removed | held-out loss | predicted by the table | KL | seconds |",
        "| --- | --: | --: | --: | --: | --: | --: |", *rows,
    ]  # fmt: skip
    card = out / "README.md"
    text = card.read_text(encoding="utf-8").split("\n## The size search\n")[0]  # a rerun's: written anew
    card.write_text(text.rstrip("\n") + "\n" + "\n".join(section) + "\n")
