"""What every figure of the report shares: matplotlib (Agg backend, one style), the methods' colours and
markers, the dense model's line, and the axes' ticks, scales and legend.

The figures are drawn by ``perplexity_figures`` and ``layer_figures`` and written by ``figures``; their
words (titles, legends, labels) are ``thanos.recipes.labels``'.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from thanos.recipes.labels import LABELS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Drawn = Iterator[tuple[str, "Figure"]]

METHOD_COLORS = {name: shown.color for name, shown in LABELS.items()}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]
DENSE_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display), in the report's style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"figure.dpi": 100, "savefig.dpi": 150, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3}
    )
    return plt


def safe_name(name: str) -> str:
    """A model's name as a file stem may hold it: ``org/model`` -> ``org_model``."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(name))


def ppl_axis(ax: Axes, values: Iterable[float]) -> None:
    """Log scale where perplexity spans a decade or more."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if finite and max(finite) / min(finite) >= 10:
        ax.set_yscale("log")
    ax.set_ylabel("perplexity (log scale)" if ax.get_yscale() == "log" else "perplexity")


def method_style(method: str, index: int) -> dict[str, Any]:
    return {"color": METHOD_COLORS.get(method), "marker": MARKERS[index % len(MARKERS)]}


def text_inches(text: str, fontsize: float) -> float:
    """About how wide ``text`` is drawn at ``fontsize`` points, in inches: 0.6 em a character, a little
    more than DejaVu Sans' average, so that what is laid out by it rarely needs more room than it has."""
    return max((len(line) for line in text.split("\n")), default=0) * 0.6 * fontsize / 72


def wrapped(text: str, inches: float, fontsize: float) -> str:
    """``text`` broken into lines about ``inches`` wide at ``fontsize`` points: a title as wide as its panel
    or figure, never over its neighbour's or past the canvas. A line too long breaks first after its
    ``: `` (``model:`` / ``what of it``), then at spaces and hyphens where it can."""
    chars = max(8, int(inches * 72 / (0.6 * fontsize)))
    lines = []
    for line in text.split("\n"):
        head, colon, tail = line.partition(": ")
        parts = [head + colon.rstrip(), tail] if colon and len(line) > chars else [line]
        lines += [textwrap.fill(part, chars) for part in parts]
    return "\n".join(lines)


LEGEND_FONTSIZE = 9
LEGEND_ROWS = 16  # entries a column of a legend beside a 4.2 inch tall axes holds


def legend_inches(labels: list[str], fontsize: float = LEGEND_FONTSIZE) -> float:
    """About how wide ``legend_right`` draws a legend of ``labels``: its columns of handle and text."""
    columns = math.ceil(len(labels) / LEGEND_ROWS) or 1
    return columns * (0.8 + max((text_inches(label, fontsize) for label in labels), default=0.0))


def legend_right(ax: Axes, axes_inches: float = 4.8) -> None:
    """The legend beside the axes, where it never covers data (a column per ``LEGEND_ROWS`` entries); the
    figure as wide as ``axes_inches`` and the legend, so that a legend of long labels squeezes no axes."""
    labels = ax.get_legend_handles_labels()[1]
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        frameon=True,
        fontsize=LEGEND_FONTSIZE,
        ncol=math.ceil(len(labels) / LEGEND_ROWS) or 1,
    )
    fig = ax.get_figure()
    fig.set_size_inches(axes_inches + legend_inches(labels), fig.get_figheight())


def titled(ax: Axes, title: str, inches: float = 4.8) -> None:
    """``title`` over the axes, in lines about ``inches`` wide."""
    ax.set_title(wrapped(title, inches, 12))


def spread(values: Iterable[float], log: bool = False, parts: int = 8) -> list[float]:
    """The distinct ``values`` (sorted) that lie at least 1/``parts`` of their span apart (on a log scale
    where ``log``), taken from the smallest up: ticks whose labels have room not to overlap."""
    ticks = sorted(set(values))
    position = [math.log10(t) if log else t for t in ticks]
    if len(ticks) < 2:
        return ticks
    gap = (position[-1] - position[0]) / parts
    kept = [0]
    for i in range(1, len(ticks)):
        if position[i] - position[kept[-1]] >= gap:
            kept.append(i)
    return [ticks[i] for i in kept]


def ticks_at(ax: Axes, values: Iterable[float]) -> None:
    """x ticks at the measured values, labelled as measured (``50``, ``0.05``); where values crowd, those
    with room for their label (``spread``)."""
    ticks = spread(values, log=ax.get_xscale() == "log")
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
