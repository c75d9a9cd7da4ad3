"""The per-layer figures, from ``collect_layers``' frame (one row per pruned layer) labelled as the tables
label their rows (``collect.labelled_recipes``).

- ``pruning_time_vs_layer_size``: pruning time per layer vs layer size (appendix "Implementation details"),
  from the per-layer stats of pruning_report.json: one panel per sparsity pattern, one line (the median
  over layers of one size) per recipe configuration (method, alpha, block size: the tables' row label),
  so no line pools sparsities, alphas or block sizes; models with the same configuration share its line;
- ``objective_heatmap_{model}_{pattern}`` (pattern ``u50``, ``s30``, ``2-4``): the per-layer objective
  ||dW X||^2 (block x layer) of every recipe of that pattern, one panel each, all on one log colour scale
  with one colour bar (Magnitude records no objective and has no panel).

A distilled recipe pruned no layer (``collect.own_layers``): it has no line and no panel here. The panels
share their x axis, ticked at the layer sizes of every panel; titles and legend labels are wrapped to the
width of their panel, figure titles to the figure's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from thanos.recipes.labels import pattern_slug, pattern_title
from thanos.report.collect import METHOD_ORDER, labelled_recipes
from thanos.report.plotting import (
    LINESTYLES,
    MARKERS,
    METHOD_COLORS,
    Drawn,
    pyplot,
    safe_name,
    spread,
    text_inches,
    wrapped,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

OBJECTIVE_LABEL = "‖ΔW X‖² (log scale)"
TIME_PANEL = (4.2, 4.6)  # inches: a pattern's panel of the pruning-time figure, its legend below
TIME_LEGEND_FONTSIZE = 7


def _with_labels(layers: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Per-layer rows of recipes with a known pattern, with their recipe's ``fraction`` and ``m`` and the
    tables' ``group``, ``group_label``, ``label`` and ``row_order`` (the table row order)."""
    labels = labelled_recipes(frame)
    if labels.empty or layers.empty:
        return layers.iloc[0:0].assign(fraction=[], m=[], group=[], group_label=[], label=[], row_order=[])
    labels = labels[["model", "recipe", "fraction", "m", "group", "group_label", "label", "order"]]
    return layers.merge(labels.rename(columns={"order": "row_order"}), on=["model", "recipe"], how="inner")


def time_series(layers: pd.DataFrame, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One line of the pruning-time figure per (pattern, recipe configuration), in table order: ``group``,
    ``group_label``, ``label``, ``method``, ``points`` (its layers) and ``median`` (seconds per size)."""
    rows = _with_labels(layers, frame)
    rows = rows[rows["seconds"].notna() & rows["numel"].notna() & (rows["seconds"] > 0)]
    series = []
    for (group, label), grp in rows.groupby(["group", "label"]):
        median = grp.groupby("numel", as_index=False)["seconds"].median().sort_values("numel")
        first = grp.iloc[0]
        series.append(
            {
                "group": group,
                "group_label": first["group_label"],
                "label": label,
                "method": first["method"],
                "row_order": first["row_order"],
                "points": grp,
                "median": median,
            }
        )
    return sorted(series, key=lambda s: s["row_order"])


def _series_styles(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A style per line of one panel: the method's colour, then line style and marker per variant."""
    styles = []
    per_method: dict[str, int] = {}
    for s in series:
        i = per_method.get(s["method"], 0)
        per_method[s["method"]] = i + 1
        styles.append(
            {
                "color": METHOD_COLORS.get(s["method"]),
                "linestyle": LINESTYLES[i % len(LINESTYLES)],
                "marker": MARKERS[(METHOD_ORDER.get(s["method"], 0) + i) % len(MARKERS)],
            }
        )
    return styles


def _time_panel(ax: Axes, series: list[dict[str, Any]]) -> None:
    """One pattern: faint points per layer, a median line per recipe configuration, the legend below (as
    wide as the panel: in two columns where two fit, a long label in lines)."""
    labels = [wrapped(s["label"], TIME_PANEL[0] - 0.8, TIME_LEGEND_FONTSIZE) for s in series]
    for s, label, style in zip(series, labels, _series_styles(series), strict=True):
        points = s["points"]
        ax.scatter(points["numel"], points["seconds"], s=8, alpha=0.25, color=style["color"], linewidths=0)
        ax.plot(s["median"]["numel"], s["median"]["seconds"], label=label, linewidth=1.6, **style)
    ax.set_title(series[0]["group_label"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.tick_params(which="both", labelbottom=True, labelleft=True)
    ax.set_xlabel("layer size (weights)")
    ax.set_ylabel("time per layer (s)")
    widest = max(text_inches(label, TIME_LEGEND_FONTSIZE) for label in labels)
    ncol = 2 if 2 * (widest + 0.6) <= TIME_PANEL[0] else 1
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncol=ncol,
        frameon=True,
        fontsize=TIME_LEGEND_FONTSIZE,
    )


def _size_label(numel: float) -> str:
    """16.4K, 2.1M, 512: a weight count, short."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if numel >= scale:
            return f"{numel / scale:.3g}{unit}"
    return f"{numel:g}"


def _size_ticks(ax: Axes, sizes: list[float]) -> None:
    """Ticks at the layer sizes of the data, those with room for their label (``spread``; where one size
    alone, the log axis's own), and no minor tick labels: the log axis would otherwise print overlapping
    2x10^4, 3x10^4, ... labels. The panels share their x axis: the sizes are every panel's."""
    from matplotlib.ticker import NullFormatter

    ticks = spread(sizes, log=True)
    if len(ticks) >= 2:
        ax.set_xticks(ticks, [_size_label(n) for n in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _grid(
    plt: Any, n: int, most: int, panel: tuple[float, float], extra: float = 0.0, least: float = 0.0, **kwargs
) -> tuple[Figure, list[Axes], int]:
    """n panels of size ``panel`` (inches) in rows of at most ``most``, balanced (6 -> 2 x 3, not 4 + 2),
    ``extra`` inches beside them (a colour bar), the figure at least ``least`` inches wide (its title);
    returns the figure, the n axes (row by row) and the number of columns."""
    nrows = math.ceil(n / most)
    ncols = math.ceil(n / nrows)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(max(panel[0] * ncols + extra, least), panel[1] * nrows),
        squeeze=False,
        layout="constrained",
        **kwargs,
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n], ncols


def pruning_time_figures(layers: pd.DataFrame, frame: pd.DataFrame) -> Drawn:
    """Pruning time per layer vs layer size: one panel per pattern, one line per recipe configuration."""
    plt = pyplot()
    series = time_series(layers, frame)
    if not series:
        return
    groups = list(dict.fromkeys(s["group"] for s in series))  # table order: patterns first
    fig, axes, ncols = _grid(plt, len(groups), 3, TIME_PANEL, sharex=True, sharey=True)
    for ax, group in zip(axes, groups, strict=True):
        _time_panel(ax, [s for s in series if s["group"] == group])
    _size_ticks(axes[0], sorted({float(n) for s in series for n in s["points"]["numel"]}))
    devices = sorted({str(d) for d in layers["device"].dropna()})
    on = f" (device: {', '.join(devices)})" if devices else ""
    title = f"Pruning time per layer vs layer size{on}; points: layers, lines: the median per size"
    fig.suptitle(wrapped(title, TIME_PANEL[0] * ncols, 12))
    yield "pruning_time_vs_layer_size", fig


def shared_log_limits(values: Iterable[float]) -> tuple[float, float]:
    """(vmin, vmax) of the positive finite values, for one log colour scale shared by several panels;
    a single value v gives (v / 2, 2 v). ValueError when there is none."""
    finite = [float(v) for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        raise ValueError("no positive finite value to scale")
    low, high = min(finite), max(finite)
    return (low / 2, high * 2) if low == high else (low, high)


def _objective_grid(rows: pd.DataFrame, blocks: list, layer_order: list[str]) -> pd.DataFrame:
    grid = rows.pivot_table(index="block", columns="layer", values="objective", aggfunc="first")
    return grid.reindex(index=blocks, columns=layer_order)


def _heatmap_panel(
    ax: Axes, grid: pd.DataFrame, norm: Normalize, cmap: Colormap, title: str, show_layers: bool, width: float
) -> AxesImage:
    image = ax.imshow(
        grid.to_numpy(dtype=float), aspect="auto", cmap=cmap, norm=norm, interpolation="nearest"
    )
    nblocks, nlayers = grid.shape
    ax.set_xticks(range(nlayers), list(grid.columns), rotation=45, ha="right", fontsize=8)
    ax.tick_params(labelbottom=show_layers)
    step = max(1, math.ceil(nblocks / 16))
    ax.set_yticks(range(0, nblocks, step), [str(b) for b in grid.index[::step]], fontsize=8)
    ax.grid(False)
    ax.set_title(wrapped(title, width - 0.4, 9), fontsize=9)
    return image


def _colour_bar(fig: Figure, image: AxesImage, axes: list[Axes]) -> None:
    """The objective's colour bar beside ``axes``: its log axis labels its powers of ten, no minor tick
    (they crowd a short bar); under two decades, where it would label one power or none, three ticks
    spread over the range."""
    from matplotlib.ticker import NullFormatter

    bar = fig.colorbar(image, ax=axes, label=OBJECTIVE_LABEL, shrink=0.9)
    low, high = image.norm.vmin, image.norm.vmax
    if high / low < 100:
        ticks = [low, math.sqrt(low * high), high]
        bar.set_ticks(ticks, labels=[f"{t:.2g}" for t in ticks])
    bar.ax.yaxis.set_minor_formatter(NullFormatter())


def _without_objective(layers: pd.DataFrame, kept: pd.DataFrame, model: str, group: str) -> list[str]:
    """Labels of this pattern's recipes (of ``model``) that recorded no objective: no panel for them."""
    mine = layers[(layers["model"] == model) & (layers["group"] == group)]
    return list(dict.fromkeys(mine.loc[~mine["recipe"].isin(set(kept["recipe"])), "label"]))


def objective_heatmap_figures(layers: pd.DataFrame, frame: pd.DataFrame) -> Drawn:
    """Per (model, pattern): one heatmap panel per recipe, one shared log colour scale and colour bar."""
    plt = pyplot()
    from matplotlib.colors import LogNorm

    labelled = _with_labels(layers, frame)
    objective = labelled["objective"].astype(float)
    positive = labelled[(objective > 0) & (objective < math.inf)]  # NaN compares False: left out
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    for (model, group), rows in positive.groupby(["model", "group"]):
        vmin, vmax = shared_log_limits(rows["objective"])
        norm = LogNorm(vmin=vmin, vmax=vmax)
        recipes = rows.sort_values("row_order").drop_duplicates("recipe")
        layer_order = list(dict.fromkeys(rows.sort_values("order")["layer"]))
        blocks = sorted(set(rows["block"]))
        panel = (max(2.4, 1.2 + 0.42 * len(layer_order)), max(2.8, 2.0 + min(0.12 * len(blocks), 5.0)))
        pattern = recipes.iloc[0][["kind", "fraction", "sparsity"]]
        what = f"per-layer objective ‖ΔW X‖², {pattern_title(*pattern)}"
        title = f"{model}: {what}"
        least = max(text_inches(f"{model}:", 12), text_inches(what, 12)) + 0.4  # two lines at most
        fig, axes, ncols = _grid(plt, len(recipes), 4, panel, extra=1.0, least=least, sharey=True)
        image = None
        for i, (ax, (_, recipe)) in enumerate(zip(axes, recipes.iterrows(), strict=True)):
            grid = _objective_grid(rows[rows["recipe"] == recipe["recipe"]], blocks, layer_order)
            show_layers = i + ncols >= len(axes)
            image = _heatmap_panel(ax, grid, norm, cmap, recipe["label"], show_layers, panel[0])
        _colour_bar(fig, image, axes)
        fig.supxlabel("layer")
        fig.supylabel("block")
        missing = _without_objective(labelled, rows, model, group)
        if missing:
            title += f"\n(no objective recorded: {', '.join(missing)})"
        fig.suptitle(wrapped(title, fig.get_figwidth() - 0.3, 12))
        yield f"objective_heatmap_{safe_name(model)}_{pattern_slug(*pattern)}", fig
