"""What every figure of the report shares: matplotlib (Agg backend, one style), the methods' colours and
markers, the dense model's line, and the axes' ticks, scales and legend.

The figures are drawn by ``perplexity_figures`` and ``layer_figures`` and written by ``figures``; their
words (titles, legends, labels) are ``thanos.labels``'.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from thanos.labels import LABELS

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


def legend_right(ax: Axes) -> None:
    """The legend beside the axes, where it never covers data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=True, fontsize=9)


def ticks_at(ax: Axes, values: Iterable[float]) -> None:
    """x ticks exactly at the measured values, labelled as measured (``50``, ``0.05``)."""
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
