"""Figures from whatever results exist (matplotlib, Agg backend), each as PDF and PNG.

- ``ppl_vs_sparsity_{model}_{kind}``: perplexity vs sparsity per method (the paper's Figure 1), for every
  recipe family (same method, pattern kind, alpha and block size) that sweeps two or more sparsities, and
  the OWL recipes (per-block sparsity) as stars in their method's colour beside the uniform lines;
  recovered recipes (``recover``) as dashed lines of their own, in their method's colour. The
  x ticks are the measured sparsities. The y axis is the perplexity *above the dense model* in percent,
  100 (ppl / dense - 1), on a symlog scale, with the dense model as the labelled line at 0: methods with
  weight updates (SparseGPT, Thanos) often stay within 1 % of dense while Magnitude or Wanda are 10-1000 %
  above it; on a linear axis of perplexity (or of ppl / dense, even log-scaled: log(1 + x) ~ x for small x)
  the former are squashed onto the dense line. A log scale of the excess spreads them apart, and symlog
  (linear within one decade below the smallest nonzero excess) still shows a recipe at or below dense.
  Without a dense perplexity for the model the axis is absolute perplexity (log where it spans a decade);
- ``blocksize_ablation_{model}``: Thanos perplexity vs block size B (appendix "different blocksize");
- ``alpha_ablation_{model}``: Thanos perplexity vs the outlier-row fraction alpha, one panel per sparsity
  pattern, with horizontal reference lines for the dense model and for SparseGPT and Wanda (alpha 0) at
  that pattern;
- ``pruning_time_vs_layer_size``: pruning time per layer vs layer size (appendix "Implementation details"),
  from the per-layer stats of pruning_report.json: one panel per sparsity pattern, one line (the median
  over layers of one size) per recipe configuration (method, alpha, block size: the tables' row label),
  so no line pools sparsities, alphas or block sizes; models with the same configuration share its line;
- ``objective_heatmap_{model}_{pattern}`` (pattern ``u50``, ``s30``, ``2-4``): the per-layer objective
  ||dW X||^2 (block x layer) of every recipe of that pattern, one panel each, all on one log colour scale
  with one colour bar (Magnitude records no objective and has no panel).

Titles and labels are the tables' (``Unstructured 50%``, ``2:4``, ``Thanos (α=0.1)``). Each ``*_figures``
function yields ``(file stem, figure)`` pairs; ``write_figures`` saves and closes them.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from thanos.files.atomic import atomic_path
from thanos.report.collect import (
    METHOD_ORDER,
    as_float,
    collect,
    collect_layers,
    is_owl,
    is_recovered,
    labelled_recipes,
    method_label,
    pattern_label,
    pattern_slug,
    pattern_sort_key,
    pattern_title,
    recipe_label,
    shown_alpha,
    sortable,
)
from thanos.report.labels import LABELS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

log = logging.getLogger(__name__)

Drawn = Iterator[tuple[str, "Figure"]]
FORMATS = ("pdf", "png")
KIND_TITLES = {"unstructured": "Unstructured", "nm": "Semi-structured n:m", "structured": "Structured"}
METHOD_COLORS = {name: shown.color for name, shown in LABELS.items()}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]
# the baselines drawn as reference levels in the alpha ablation, with their line style
REFERENCES = {"sparsegpt": ":", "wanda": "-."}
DENSE_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
OBJECTIVE_LABEL = "‖ΔW X‖² (log scale)"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"figure.dpi": 100, "savefig.dpi": 150, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3}
    )
    return plt


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(name))


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    plt = _plt()
    paths = []
    try:
        for fmt in FORMATS:
            path = out_dir / f"{stem}.{fmt}"
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=fmt, bbox_inches="tight")
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def _ppl_axis(ax: Axes, values: Iterable[float]) -> None:
    """Log scale where perplexity spans a decade or more."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if finite and max(finite) / min(finite) >= 10:
        ax.set_yscale("log")
    ax.set_ylabel("perplexity (log scale)" if ax.get_yscale() == "log" else "perplexity")


def _label(method: str, alpha: float, blocksize: float | None = None) -> str:
    label = recipe_label(method, alpha)
    if blocksize is not None and not math.isnan(blocksize):
        label += f", B={blocksize:g}"
    return label


def _style(method: str, index: int) -> dict[str, Any]:
    return {"color": METHOD_COLORS.get(method), "marker": MARKERS[index % len(MARKERS)]}


def _legend_right(ax: Axes) -> None:
    """The legend beside the axes, where it never covers data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=True, fontsize=9)


def _ticks_at(ax: Axes, values: Iterable[float]) -> None:
    """x ticks exactly at the measured values, labelled as measured (``50``, ``0.05``)."""
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()


def _evaluated(frame: pd.DataFrame) -> pd.DataFrame:
    pruned = frame[(frame["method"] != "dense") & frame["ppl"].notna() & (frame["kind"] != "unknown")].copy()
    pruned["alpha_s"] = [
        shown_alpha(m, as_float(a)) for m, a in zip(pruned["method"], pruned["alpha"], strict=True)
    ]
    pruned["blocksize"] = pruned["blocksize"].astype(float)
    pruned["recovered"] = [is_recovered(r) for r in pruned["recovered"]]
    return pruned


def dense_ppl(frame: pd.DataFrame, model: str) -> float | None:
    """The dense model's perplexity; None when it is not (yet) known or not a positive finite number."""
    dense = frame[(frame["model"] == model) & (frame["method"] == "dense") & frame["ppl"].notna()]
    if dense.empty:
        return None
    ppl = float(dense["ppl"].iloc[0])
    return ppl if math.isfinite(ppl) and ppl > 0 else None


def excess_percent(ppl: float, dense: float) -> float:
    """Perplexity above dense in percent: 100 (ppl / dense - 1); negative below dense."""
    return 100.0 * (ppl / dense - 1.0)


def symlog_threshold(values: Iterable[float]) -> float:
    """The decade below the smallest nonzero |value| (at least 0.001): symlog's linear range ends there,
    so every nonzero point lies on the log part of the axis; 1 when all values are zero."""
    nonzero = [abs(v) for v in values if v != 0 and math.isfinite(v)]
    if not nonzero:
        return 1.0
    return 10.0 ** math.floor(math.log10(max(min(nonzero), 1e-3)))


def _percent_axis(ax: Axes, values: Iterable[float]) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("symlog", linthresh=symlog_threshold(values), linscale=0.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
    ax.set_ylabel("perplexity above dense (%, symlog scale)")


def _families(rows: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """Recipe families (method, alpha shown, block size, recovered) that sweep two or more sparsities, in
    table order."""
    rows = rows[[not is_owl(p) for p in rows["profile"]]]  # OWL recipes: points of their own
    families = [
        (key, fam)
        for key, fam in rows.groupby(["method", "alpha_s", "blocksize", "recovered"], dropna=False)
        if fam["fraction"].nunique() >= 2
    ]
    families.sort(
        key=lambda item: (
            METHOD_ORDER.get(item[0][0], 9),
            item[0][3],
            sortable(item[0][1]),
            sortable(item[0][2]),
        )
    )
    return families


def ppl_vs_sparsity_figures(frame: pd.DataFrame) -> Drawn:
    """Figure 1 per (model, pattern kind) with a sparsity sweep: see the module docstring for the y axis."""
    plt = _plt()
    for (model, kind), rows in _evaluated(frame).groupby(["model", "kind"]):
        families = _families(rows)
        if not families:
            continue
        ambiguous = len({(m, a, r) for (m, a, _, r), _ in families}) < len(families)
        dense = dense_ppl(frame, model)
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        values: list[float] = []
        sparsities: list[float] = []
        if dense is not None:
            ax.axhline(0.0, label=f"Dense (ppl {dense:.2f})", zorder=1.5, **DENSE_STYLE)
        for i, ((method, alpha, blocksize, recovered), fam) in enumerate(families):
            fam = fam.groupby("fraction", as_index=False)["ppl"].min().sort_values("fraction")
            fam = fam[fam["ppl"].map(math.isfinite)]
            y = [excess_percent(p, dense) for p in fam["ppl"]] if dense is not None else list(fam["ppl"])
            label = _label(method, alpha, blocksize if ambiguous else None)
            label += " + recovery" if recovered else ""
            style = _style(method, i) | ({"linestyle": "--"} if recovered else {})  # recovered: dashed
            ax.plot(fam["fraction"] * 100, y, label=label, linewidth=1.8, markersize=6, **style)
            values += y
            sparsities += list(fam["fraction"] * 100)
        owl = rows[[is_owl(p) for p in rows["profile"]]]
        for (method, _, recovered), points in sorted(
            owl.groupby(["method", "alpha_s", "recovered"], dropna=False),
            key=lambda item: (METHOD_ORDER.get(item[0][0], 9), item[0][2]),
        ):
            points = points.groupby("fraction", as_index=False)["ppl"].min()
            points = points[points["ppl"].map(math.isfinite)]
            y = list(points["ppl"])
            if dense is not None:
                y = [excess_percent(p, dense) for p in y]
            style = {"color": METHOD_COLORS.get(method), "marker": "*", "markersize": 12, "linestyle": "none"}
            label = f"{method_label(method)} + OWL" + (" + recovery" if recovered else "")
            ax.plot(points["fraction"] * 100, y, label=label, **style)
            values += y
            sparsities += list(points["fraction"] * 100)
        if dense is not None:
            _percent_axis(ax, values)
        else:
            _ppl_axis(ax, values)
        _ticks_at(ax, sparsities)
        kind_text = KIND_TITLES.get(kind, kind).lower()
        ax.set_xlabel(f"{kind_text} sparsity (%)")
        note = "" if dense is not None else " (no dense perplexity)"
        ax.set_title(f"{model}: perplexity vs {kind_text} sparsity{note}")
        _legend_right(ax)
        yield f"ppl_vs_sparsity_{_safe(model)}_{kind}", fig


def blocksize_ablation_figures(frame: pd.DataFrame) -> Drawn:
    """Thanos perplexity vs block size B, one line per (sparsity pattern, alpha)."""
    plt = _plt()
    thanos = _evaluated(frame)
    thanos = thanos[thanos["method"] == "thanos"]
    for model, rows in thanos.groupby("model"):
        lines = [
            (key, grp)
            for key, grp in rows.groupby(["sparsity", "alpha_s"], dropna=False)
            if grp["blocksize"].dropna().nunique() >= 2
        ]
        if not lines:
            continue
        lines.sort(key=lambda item: (_pattern_key(item[1].iloc[0]), sortable(item[0][1])))
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        values, ticks = [], []
        for i, ((_, alpha), grp) in enumerate(lines):
            first = grp.iloc[0]
            grp = grp.dropna(subset=["blocksize"]).groupby("blocksize", as_index=False)["ppl"].min()
            label = pattern_label(first["kind"], first["fraction"], first["sparsity"])
            if not math.isnan(alpha):
                label += f", α={alpha:g}"
            ax.plot(
                grp["blocksize"],
                grp["ppl"],
                label=label,
                marker=MARKERS[i % len(MARKERS)],
                linewidth=1.8,
                markersize=6,
            )
            values += list(grp["ppl"])
            ticks += list(grp["blocksize"])
        _ppl_axis(ax, values)
        ax.set_xscale("log", base=2)
        _ticks_at(ax, ticks)
        ax.set_xlabel("block size B (columns)")
        ax.set_title(f"{model}: Thanos block-size ablation")
        _legend_right(ax)
        yield f"blocksize_ablation_{_safe(model)}", fig


def _pattern_key(row: pd.Series) -> tuple:
    return pattern_sort_key(row["kind"], as_float(row["fraction"]), as_float(row["m"]))


def reference_levels(frame: pd.DataFrame, model: str, sparsity: str) -> list[tuple[str, float, dict]]:
    """(label, perplexity, line style) of the dense model and of SparseGPT and Wanda without outlier rows
    (alpha 0) at ``sparsity`` for ``model``; the lowest where several recipes qualify, none where missing."""
    levels = []
    dense = dense_ppl(frame, model)
    if dense is not None:
        levels.append((f"Dense ({dense:.2f})", dense, dict(DENSE_STYLE)))
    pruned = _evaluated(frame)
    for method, linestyle in REFERENCES.items():
        rows = pruned[
            (pruned["model"] == model)
            & (pruned["method"] == method)
            & (pruned["sparsity"] == sparsity)
            & pruned["alpha_s"].isna()
        ]
        if rows.empty:
            continue
        ppl = float(rows["ppl"].min())
        style = {"color": METHOD_COLORS.get(method), "linestyle": linestyle, "linewidth": 1.5}
        levels.append((f"{method_label(method)} ({ppl:.2f})", ppl, style))
    return levels


def _alpha_panels(rows: pd.DataFrame) -> list[tuple[pd.Series, list[tuple[float, pd.DataFrame]]]]:
    """Per sparsity pattern with an alpha sweep: (its first row, [(block size, Thanos rows)])."""
    panels = []
    for _, srows in rows.groupby("sparsity"):
        lines = [
            (blocksize, grp)
            for blocksize, grp in srows.groupby("blocksize", dropna=False)
            if grp["alpha_s"].dropna().nunique() >= 2
        ]
        if lines:
            panels.append((srows.iloc[0], sorted(lines, key=lambda item: sortable(item[0]))))
    return sorted(panels, key=lambda item: _pattern_key(item[0]))


def _alpha_panel(ax: Axes, frame: pd.DataFrame, model: str, first: pd.Series, lines: list) -> None:
    values, ticks = [], []
    for i, (blocksize, grp) in enumerate(lines):
        grp = grp.dropna(subset=["alpha_s"]).groupby("alpha_s", as_index=False)["ppl"].min()
        label = method_label("thanos") + ("" if math.isnan(blocksize) else f", B={blocksize:g}")
        ax.plot(grp["alpha_s"], grp["ppl"], label=label, linewidth=1.8, markersize=6, **_style("thanos", i))
        values += list(grp["ppl"])
        ticks += list(grp["alpha_s"])
    for label, ppl, style in reference_levels(frame, model, first["sparsity"]):
        ax.axhline(ppl, label=label, zorder=1.5, **style)
        values.append(ppl)
    _ppl_axis(ax, values)
    _ticks_at(ax, ticks)
    ax.set_xlabel("outlier row fraction α")
    title = pattern_title(first["kind"], first["fraction"], first["sparsity"])
    ax.set_title(title + ("\n(a fraction α of the rows is kept dense)" if first["kind"] == "nm" else ""))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=True, fontsize=8)


def alpha_ablation_figures(frame: pd.DataFrame) -> Drawn:
    """Thanos perplexity vs alpha, one panel per pattern, with Dense, SparseGPT and Wanda as references."""
    plt = _plt()
    thanos = _evaluated(frame)
    thanos = thanos[thanos["method"] == "thanos"]
    for model, rows in thanos.groupby("model"):
        panels = _alpha_panels(rows)
        if not panels:
            continue
        fig, axes = plt.subplots(
            1, len(panels), figsize=(4.8 * len(panels), 4.6), squeeze=False, layout="constrained"
        )
        for ax, (first, lines) in zip(axes[0], panels, strict=True):
            _alpha_panel(ax, frame, model, first, lines)
        fig.suptitle(f"{model}: Thanos outlier-fraction (α) ablation")
        yield f"alpha_ablation_{_safe(model)}", fig


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
    """One pattern: faint points per layer, a median line per recipe configuration, the legend below."""
    for s, style in zip(series, _series_styles(series), strict=True):
        points = s["points"]
        ax.scatter(points["numel"], points["seconds"], s=8, alpha=0.25, color=style["color"], linewidths=0)
        ax.plot(s["median"]["numel"], s["median"]["seconds"], label=s["label"], linewidth=1.6, **style)
    ax.set_title(series[0]["group_label"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _size_ticks(ax, sorted({float(n) for s in series for n in s["points"]["numel"]}))
    ax.tick_params(which="both", labelbottom=True, labelleft=True)
    ax.set_xlabel("layer size (weights)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=True, fontsize=7)


def _size_label(numel: float) -> str:
    """16.4K, 2.1M, 512: a weight count, short."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if numel >= scale:
            return f"{numel / scale:.3g}{unit}"
    return f"{numel:g}"


def _size_ticks(ax: Axes, sizes: list[float], most: int = 8) -> None:
    """Ticks at the layer sizes of the data (at most ``most`` of them, else the log axis's own), and no
    minor tick labels: the log axis would otherwise print overlapping 2x10^4, 3x10^4, ... labels."""
    from matplotlib.ticker import NullFormatter

    if 0 < len(sizes) <= most:
        ax.set_xticks(sizes, [_size_label(n) for n in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _grid(
    plt: Any, n: int, most: int, panel: tuple[float, float], **kwargs
) -> tuple[Figure, list[Axes], int]:
    """n panels of size ``panel`` (inches) in rows of at most ``most``, balanced (6 -> 2 x 3, not 4 + 2);
    returns the figure, the n axes (row by row) and the number of columns."""
    nrows = math.ceil(n / most)
    ncols = math.ceil(n / nrows)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(panel[0] * ncols, panel[1] * nrows),
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
    plt = _plt()
    series = time_series(layers, frame)
    if not series:
        return
    groups = list(dict.fromkeys(s["group"] for s in series))  # table order: patterns first
    fig, axes, ncols = _grid(plt, len(groups), 3, (4.2, 4.6), sharex=True, sharey=True)
    for i, (ax, group) in enumerate(zip(axes, groups, strict=True)):
        _time_panel(ax, [s for s in series if s["group"] == group])
        if i % ncols == 0:
            ax.set_ylabel("time per layer (s); line: median per size")
    devices = sorted({str(d) for d in layers["device"].dropna()})
    on = f" (device: {', '.join(devices)})" if devices else ""
    fig.suptitle(f"Pruning time per layer vs layer size{on}")
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
    ax: Axes, grid: pd.DataFrame, norm: Normalize, cmap: Colormap, title: str, show_layers: bool
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
    ax.set_title(title, fontsize=9)
    return image


def _without_objective(layers: pd.DataFrame, kept: pd.DataFrame, model: str, group: str) -> list[str]:
    """Labels of this pattern's recipes (of ``model``) that recorded no objective: no panel for them."""
    mine = layers[(layers["model"] == model) & (layers["group"] == group)]
    return list(dict.fromkeys(mine.loc[~mine["recipe"].isin(set(kept["recipe"])), "label"]))


def objective_heatmap_figures(layers: pd.DataFrame, frame: pd.DataFrame) -> Drawn:
    """Per (model, pattern): one heatmap panel per recipe, one shared log colour scale and colour bar."""
    plt = _plt()
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
        panel = (1.2 + 0.42 * len(layer_order), 2.0 + min(0.12 * len(blocks), 5.0))
        fig, axes, ncols = _grid(plt, len(recipes), 4, panel, sharey=True)
        image = None
        for i, (ax, (_, recipe)) in enumerate(zip(axes, recipes.iterrows(), strict=True)):
            grid = _objective_grid(rows[rows["recipe"] == recipe["recipe"]], blocks, layer_order)
            image = _heatmap_panel(ax, grid, norm, cmap, recipe["label"], show_layers=i + ncols >= len(axes))
            if i % ncols == 0:
                ax.set_ylabel("block")
        fig.colorbar(image, ax=axes, label=OBJECTIVE_LABEL, shrink=0.9)
        pattern = recipes.iloc[0][["kind", "fraction", "sparsity"]]
        title = f"{model}: per-layer objective ‖ΔW X‖², {pattern_title(*pattern)}"
        missing = _without_objective(labelled, rows, model, group)
        if missing:
            title += f"\n(no objective recorded: {', '.join(missing)})"
        fig.suptitle(title)
        yield f"objective_heatmap_{_safe(model)}_{pattern_slug(*pattern)}", fig


def write_figures(results: str | Path, out_dir: str | Path, processes: int = 1) -> list[Path]:
    """Draw every figure the results allow into ``out_dir``; returns the files written (sorted).
    ``processes``: save that many figures at once in forked processes (saving, not plotting, is most of
    the time), each taking the next figure not yet taken; without ``fork``, one process saves them all."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame, _ = collect(results)
    layers = collect_layers(results)
    if processes > 1 and "fork" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("fork")
        taken = context.Value("i", 0)  # figures taken so far: the next one to take
        with ProcessPoolExecutor(processes, context, initializer=_share, initargs=(taken,)) as pool:
            parts = [pool.submit(_draw, frame, layers, out, shared=True) for _ in range(processes)]
            paths = [path for part in parts for path in part.result()]
    else:
        paths = _draw(frame, layers, out)
    if not paths:
        log.warning("no results under %s to draw yet; no figures written", results)
    return sorted(paths)


_TAKEN: Any = None  # in a drawing process: the count of figures taken, shared by all of them


def _share(taken: Any) -> None:
    global _TAKEN
    _TAKEN = taken


def _take(number: int, shared: bool) -> int:
    """The number of the next figure this process saves: ``number`` alone, or the next one not taken."""
    if not shared:
        return number
    with _TAKEN.get_lock():
        _TAKEN.value += 1
        return _TAKEN.value - 1


def _draw(frame: pd.DataFrame, layers: pd.DataFrame, out: Path, shared: bool = False) -> list[Path]:
    """Plot every figure the results allow, in a fixed order, and save those this process takes (all of
    them unless ``shared``); the others are closed unsaved."""
    drawn: list[Drawn] = []
    if not frame.empty:
        drawn += [
            ppl_vs_sparsity_figures(frame),
            blocksize_ablation_figures(frame),
            alpha_ablation_figures(frame),
        ]
        if not layers.empty:
            drawn += [pruning_time_figures(layers, frame), objective_heatmap_figures(layers, frame)]
    paths: list[Path] = []
    mine = _take(0, shared)
    for number, (stem, fig) in enumerate(figure for figures in drawn for figure in figures):
        if number == mine:
            paths += _save(fig, out, stem)
            mine = _take(number + 1, shared)
        else:
            _plt().close(fig)
    return paths
