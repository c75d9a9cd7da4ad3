"""The quality-against-size curve of a size search (``params:0.15,0.25,0.35``): every candidate the search
measured (each axis alone, on the cost table's calibration, and the mixes, each measured as the size's model
written: calibrated on every window, so lower than on the table's footing), the fraction of the parameters
it removed against its held-out loss, and the recipe each size chose. ``curve_rows`` makes the table's rows
from the searches' records (``search.json``), ``write_curve`` writes them as ``sizes.csv`` and draws
``sizes.png``."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

COLUMNS = ("recipe", "parameters", "removed_fraction", "loss", "loss_error", "ppl_x_dense", "chosen_for")


def curve_rows(searches: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per recipe measured by any of ``searches`` (each size's ``search.json`` content, by its
    request; a recipe measured both as a point of the cost table and as a size's written model gets the
    written model's measurement, the one its ``windows`` mark), fewest parameters removed first: its
    recipe, parameters, fraction removed, held-out loss (nats per token of the dense tokenization over the
    dense model's) and its standard error over the held-out windows (empty where a measurement of an earlier
    release recorded none), perplexity per original token over the dense model's (exp of that loss) and the
    sizes that chose it."""
    rows: dict[str, dict[str, Any]] = {}
    written: set[str] = set()  # the recipes whose row is the model written (its ``windows``), not a point
    for size, search in searches.items():
        for candidate in search["candidates"]:
            recipe, as_written = candidate["recipe"], "windows" in candidate
            if recipe not in rows or (as_written and recipe not in written):  # the written model's, if any
                chosen = rows.get(recipe, {}).get("chosen_for", "")
                rows[recipe] = _row(candidate) | {"chosen_for": chosen}
                written |= {recipe} if as_written else set()
            row = rows[recipe]
            if recipe == search["chosen"] and size not in row["chosen_for"].split():
                row["chosen_for"] = " ".join(filter(None, [row["chosen_for"], size]))
    return sorted(rows.values(), key=lambda row: (row["removed_fraction"], row["loss"]))


def _row(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate's row (``curve_rows``), its ``chosen_for`` empty."""
    return {
        "recipe": candidate["recipe"],
        "parameters": candidate["parameters"],
        "removed_fraction": round(candidate["removed_fraction"], 6),
        "loss": round(candidate["loss"], 6),
        "loss_error": _rounded(candidate.get("loss_error")),
        "ppl_x_dense": round(math.exp(min(candidate["loss"], 700.0)), 4),
        "chosen_for": "",
    }


def _rounded(value: float | None) -> float | str:
    return "" if value is None else round(value, 6)


def write_curve(rows: list[dict[str, Any]], out: Path, title: str) -> tuple[Path, Path]:
    """``sizes.csv`` (the rows) and ``sizes.png`` (every measured point with its standard error as a bar,
    the chosen recipes marked and joined, each named) in ``out``; their paths."""
    from thanos.report.plotting import pyplot

    table, figure = out / "sizes.csv", out / "sizes.png"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    alone = [row for row in rows if "+" not in row["recipe"]]
    mixed = [row for row in rows if "+" in row["recipe"]]
    for group, style in ((alone, {"marker": "o", "label": "one structure"}), (mixed, {"marker": "s",
                         "label": "a mix, measured as written"})):  # fmt: skip
        xs = [100 * row["removed_fraction"] for row in group]
        ax.scatter(xs, [row["loss"] for row in group], s=22, alpha=0.55, **style)
    barred = [row for row in rows if row["loss_error"] != ""]
    ax.errorbar(
        [100 * row["removed_fraction"] for row in barred], [row["loss"] for row in barred],
        yerr=[row["loss_error"] for row in barred], fmt="none", ecolor="grey", elinewidth=0.8, capsize=2,
        alpha=0.7,
    )  # fmt: skip
    chosen = [row for row in rows if row["chosen_for"]]
    ax.plot(
        [100 * row["removed_fraction"] for row in chosen], [row["loss"] for row in chosen],
        color="black", marker="*", markersize=12, linewidth=1.2, label="chosen for a size",
    )  # fmt: skip
    middle = 50 * (rows[0]["removed_fraction"] + rows[-1]["removed_fraction"]) if rows else 0.0
    for i, row in enumerate(chosen):  # on the side of the point that has room, staggered
        right = 100 * row["removed_fraction"] > middle
        ax.annotate(
            f"{row['chosen_for']}: {row['recipe']}", (100 * row["removed_fraction"], row["loss"]),
            textcoords="offset points", xytext=(-6 if right else 6, 8 + 12 * (i % 3)), fontsize=7,
            ha="right" if right else "left",
        )  # fmt: skip
    ax.set_xlabel("parameters removed (%)")
    ax.set_ylabel("held-out loss over the dense model (nats per token)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(figure)
    plt.close(fig)
    return table, figure
