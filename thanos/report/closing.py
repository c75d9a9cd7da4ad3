"""What a finished workflow run says at its end, for any config: each model's perplexity, dense and per
recipe, where the tables and figures are, and the paper's orderings when the run checked any (a config of
one's own usually has none of the paper's comparisons: "0 of 0 checked" says nothing)."""

from __future__ import annotations

import math
from pathlib import Path

from thanos.report.collect import Shown, collect
from thanos.report.orderings import written_since


def closing_summary(
    results: str | Path, tables: str | Path, figures: str | Path, since: float, only: Shown = None
) -> str | None:
    """The lines a run prints when it succeeds, of the ``only`` pairs (None when ``results`` holds no model
    yet)."""
    if not Path(results).is_dir():
        return None
    frame, _ = collect(results, only)
    if frame.empty:
        return None
    lines = ["results:"]
    for model, rows in frame.groupby("model", sort=False):
        recipes = [str(r) for r in rows["recipe"] if r != "dense"]
        lines.append(f"  {model}: {', '.join(recipes)} (models in {Path(results) / model}/<recipe>/model)")
        ppl = {str(r["recipe"]): r.get("ppl") for _, r in rows.iterrows()}
        evaluated = {
            name: value for name, value in ppl.items() if value is not None and not math.isnan(value)
        }
        if evaluated:
            lines.append(
                "    perplexity: " + ", ".join(f"{name} {value:.2f}" for name, value in evaluated.items())
            )
    for name, where in (("tables", Path(tables)), ("figures", Path(figures))):
        if where.is_dir() and any(where.iterdir()):
            lines.append(f"{name}: {where}")
    orderings = written_since(tables, since)
    if orderings and not orderings.startswith("the paper's orderings: 0 of 0"):
        lines.append(orderings)
    return "\n".join(lines)
