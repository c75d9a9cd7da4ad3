"""The perplexity figures, from ``collect``'s frame (one row per recipe).

- ``ppl_vs_sparsity_{model}_{kind}``: perplexity vs sparsity per method (the paper's Figure 1), for every
  recipe family (same method, pattern kind, alpha and block size) that sweeps two or more sparsities, and
  the OWL recipes (per-block sparsity) as stars in their method's colour beside the uniform lines;
  recovered recipes (``recover``) as dashed lines of their own, distilled ones (``distill``) dash-dotted,
  in their method's colour. The
  x ticks are the measured sparsities. The y axis is the perplexity *above the dense model* in percent,
  100 (ppl / dense - 1), on a symlog scale, with the dense model as the labelled line at 0: methods with
  weight updates (SparseGPT, Thanos) often stay within 1 % of dense while Magnitude or Wanda are 10-1000 %
  above it; on a linear axis of perplexity (or of ppl / dense, even log-scaled: log(1 + x) ~ x for small x)
  the former are squashed onto the dense line. A log scale of the excess spreads them apart, and symlog
  (linear within one decade below the smallest nonzero excess) still shows a recipe at or below dense.
  Without a dense perplexity for the model the axis is absolute perplexity (log where it spans a decade);
- ``ppl_vs_params_removed_{model}``: perplexity against the parameters removed, for every structural recipe
  of the model (written smaller: MLP neurons, heads, whole blocks, and combined recipes), one line per method
  (the structure and the pruning method: ``Thanos: MLP neurons``, ``Whole blocks``, ``Thanos: whole blocks +
  MLP neurons``), the dense model as the line at its perplexity: quality against size, as structured-pruning
  papers plot it;
- ``blocksize_ablation_{model}``: Thanos perplexity vs block size B (appendix "different blocksize");
- ``alpha_ablation_{model}``: Thanos perplexity vs the outlier-row fraction alpha, one panel per sparsity
  pattern, with horizontal reference lines for the dense model and for SparseGPT and Wanda (alpha 0) at
  that pattern.

The two ablations compare the pruning alone: their lines and reference levels are recipes of uniform
sparsity, neither recovered nor distilled (a recovered recipe's perplexity at alpha 0.1 is not Thanos'
at alpha 0.1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from thanos.recipes.labels import (
    KIND_TITLES,
    is_n_of_m,
    method_alpha_label,
    method_label,
    pattern_label,
    pattern_title,
    shown_alpha,
    structure_label,
    variant_label,
)
from thanos.report.collect import (
    METHOD_ORDER,
    as_float,
    is_owl,
    is_set,
    pattern_sort_key,
    sortable,
    tokenizers_differ,
)
from thanos.report.plotting import (
    DENSE_STYLE,
    MARKERS,
    METHOD_COLORS,
    Drawn,
    legend_right,
    method_style,
    ppl_axis,
    pyplot,
    safe_name,
    ticks_at,
    titled,
    wrapped,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# the baselines drawn as reference levels in the alpha ablation, with their line style
REFERENCES = {"sparsegpt": ":", "wanda": "-."}


def variant_style(recovered: bool, distilled: bool) -> dict[str, Any]:
    """A recovered recipe's line dashed, a distilled one's dash-dotted twice (both: dotted), in the
    method's colour."""
    if recovered and distilled:
        return {"linestyle": ":"}
    if recovered:
        return {"linestyle": "--"}
    return {"linestyle": (0, (4, 1.5, 1, 1.5, 1, 1.5))} if distilled else {}


def _evaluated(frame: pd.DataFrame) -> pd.DataFrame:
    pruned = frame[(frame["method"] != "dense") & frame["ppl"].notna() & (frame["kind"] != "unknown")].copy()
    pruned["alpha_s"] = [
        shown_alpha(m, as_float(a)) for m, a in zip(pruned["method"], pruned["alpha"], strict=True)
    ]
    pruned["blocksize"] = pruned["blocksize"].astype(float)
    pruned["recovered"] = [is_set(r) for r in pruned["recovered"]]
    pruned["distilled"] = [is_set(d) for d in pruned["distilled"]]
    return pruned


def _plain(pruned: pd.DataFrame) -> pd.DataFrame:
    """The recipes of ``_evaluated``'s rows that are pruning alone: uniform sparsity, neither recovered nor
    distilled (the ablations compare block sizes and alphas of the pruning, nothing else)."""
    owl = pruned["profile"].map(is_owl).astype(bool)
    return pruned[~(pruned["recovered"] | pruned["distilled"] | owl)]


def dense_ppl(frame: pd.DataFrame, model: str, metric: str = "ppl") -> float | None:
    """The dense model's perplexity (``metric``: another column, ``bits_per_byte``); None when it is not
    (yet) known or not a positive finite number."""
    dense = frame[(frame["model"] == model) & (frame["method"] == "dense") & frame[metric].notna()]
    if dense.empty:
        return None
    value = float(dense[metric].iloc[0])
    return value if math.isfinite(value) and value > 0 else None


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
    """Recipe families (method, alpha shown, block size, recovered, distilled) that sweep two or more
    sparsities, in table order."""
    rows = rows[[not is_owl(p) for p in rows["profile"]]]  # OWL recipes: points of their own
    families = [
        (key, fam)
        for key, fam in rows.groupby(
            ["method", "alpha_s", "blocksize", "recovered", "distilled"], dropna=False
        )
        if fam["fraction"].nunique() >= 2
    ]
    families.sort(
        key=lambda item: (
            METHOD_ORDER.get(item[0][0], 9),
            item[0][3],
            item[0][4],
            sortable(item[0][1]),
            sortable(item[0][2]),
        )
    )
    return families


def ppl_vs_sparsity_figures(frame: pd.DataFrame) -> Drawn:
    """Figure 1 per (model, pattern kind) with a sparsity sweep: see the module docstring for the y axis."""
    plt = pyplot()
    for (model, kind), rows in _evaluated(frame).groupby(["model", "kind"]):
        families = _families(rows)
        if not families:
            continue
        ambiguous = len({(m, a, r, d) for (m, a, _, r, d), _ in families}) < len(families)
        dense = dense_ppl(frame, model)
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
        values: list[float] = []
        sparsities: list[float] = []
        if dense is not None:
            ax.axhline(0.0, label=f"Dense (ppl {dense:.2f})", zorder=1.5, **DENSE_STYLE)
        for i, ((method, alpha, blocksize, recovered, distilled), fam) in enumerate(families):
            fam = fam.groupby("fraction", as_index=False)["ppl"].min().sort_values("fraction")
            fam = fam[fam["ppl"].map(math.isfinite)]
            y = [excess_percent(p, dense) for p in fam["ppl"]] if dense is not None else list(fam["ppl"])
            label = method_alpha_label(method, alpha, blocksize if ambiguous else None)
            label = variant_label(label, recovered=recovered, distilled=distilled)
            style = method_style(method, i) | variant_style(recovered, distilled)
            ax.plot(fam["fraction"] * 100, y, label=label, linewidth=1.8, markersize=6, **style)
            values += y
            sparsities += list(fam["fraction"] * 100)
        owl = rows[[is_owl(p) for p in rows["profile"]]]
        for (method, _, recovered, distilled), points in sorted(
            owl.groupby(["method", "alpha_s", "recovered", "distilled"], dropna=False),
            key=lambda item: (METHOD_ORDER.get(item[0][0], 9), item[0][2], item[0][3]),
        ):
            points = points.groupby("fraction", as_index=False)["ppl"].min()
            points = points[points["ppl"].map(math.isfinite)]
            y = list(points["ppl"])
            if dense is not None:
                y = [excess_percent(p, dense) for p in y]
            style = {"color": METHOD_COLORS.get(method), "marker": "*", "markersize": 12, "linestyle": "none"}
            label = variant_label(method_label(method), True, recovered, distilled)
            ax.plot(points["fraction"] * 100, y, label=label, **style)
            values += y
            sparsities += list(points["fraction"] * 100)
        if dense is not None:
            _percent_axis(ax, values)
        else:
            ppl_axis(ax, values)
        ticks_at(ax, sparsities)
        kind_text = KIND_TITLES.get(kind, kind).lower()
        ax.set_xlabel(f"{kind_text} sparsity (%)")
        note = "" if dense is not None else " (no dense perplexity)"
        titled(ax, f"{model}: perplexity vs {kind_text} sparsity{note}")
        legend_right(ax)
        yield f"ppl_vs_sparsity_{safe_name(model)}_{kind}", fig


def quality_size_figures(frame: pd.DataFrame) -> Drawn:
    """Perplexity against the parameters removed, one line per (structure, method), per model with a
    structural recipe evaluated: see the module docstring."""
    plt = pyplot()
    pruned = _evaluated(frame)
    pruned = pruned[pruned["params_removed"].notna() & pruned["structure"].notna()]
    for model, rows in pruned.groupby("model"):
        rows = rows.assign(
            line=[structure_label(s, m) for s, m in zip(rows["structure"], rows["method"], strict=True)]
        )
        # a pruned vocabulary cuts the text into other tokens: its perplexity per token compares with no
        # other model's, its bits per byte do
        bytes_ = tokenizers_differ(frame[frame["model"] == model])
        metric, unit = ("bits_per_byte", "bits per byte") if bytes_ else ("ppl", "perplexity")
        dense = dense_ppl(frame, model, metric)
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
        values, removed = [], []
        if dense is not None:
            shown = f"{dense:.3f} bits per byte" if bytes_ else f"ppl {dense:.2f}"
            ax.axhline(dense, label=f"Dense ({shown})", zorder=1.5, **DENSE_STYLE)
            values.append(dense)
        lines = sorted(rows.groupby("line"), key=lambda item: (item[0].count("+"), item[0]))
        for i, (label, line) in enumerate(lines):
            line = line.assign(x=(line["params_removed"] * 100).round(1))  # as the tables show it
            line = line.groupby("x", as_index=False)[metric].min().sort_values("x")
            line = line[line[metric].map(math.isfinite)]
            style = method_style(str(rows.loc[rows["line"] == label, "method"].iloc[0]), i)
            ax.plot(line["x"], line[metric], label=label, linewidth=1.8, markersize=6, **style)
            values += list(line[metric])
            removed += list(line["x"])
        if bytes_:
            ax.set_ylabel("bits per byte of the text")
        else:
            ppl_axis(ax, values)
        ticks_at(ax, removed)
        ax.set_xlabel("parameters removed (%)")
        titled(ax, f"{model}: {unit} vs parameters removed")
        legend_right(ax)
        yield f"ppl_vs_params_removed_{safe_name(model)}", fig


def blocksize_ablation_figures(frame: pd.DataFrame) -> Drawn:
    """Thanos perplexity vs block size B, one line per (sparsity pattern, alpha)."""
    plt = pyplot()
    thanos = _plain(_evaluated(frame))
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
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
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
        ppl_axis(ax, values)
        ax.set_xscale("log", base=2)
        ticks_at(ax, ticks)
        ax.set_xlabel("block size B (columns)")
        titled(ax, f"{model}: Thanos block-size ablation")
        legend_right(ax)
        yield f"blocksize_ablation_{safe_name(model)}", fig


def _pattern_key(row: pd.Series) -> tuple:
    return pattern_sort_key(row["kind"], as_float(row["fraction"]), as_float(row["m"]))


def reference_levels(frame: pd.DataFrame, model: str, sparsity: str) -> list[tuple[str, float, dict]]:
    """(label, perplexity, line style) of the dense model and of SparseGPT and Wanda without outlier rows
    (alpha 0) at ``sparsity`` for ``model``; the lowest where several recipes qualify, none where missing."""
    levels = []
    dense = dense_ppl(frame, model)
    if dense is not None:
        levels.append((f"Dense ({dense:.2f})", dense, dict(DENSE_STYLE)))
    pruned = _plain(_evaluated(frame))
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
        label = method_alpha_label("thanos", blocksize=blocksize)
        ax.plot(
            grp["alpha_s"], grp["ppl"], label=label, linewidth=1.8, markersize=6, **method_style("thanos", i)
        )
        values += list(grp["ppl"])
        ticks += list(grp["alpha_s"])
    for label, ppl, style in reference_levels(frame, model, first["sparsity"]):
        ax.axhline(ppl, label=label, zorder=1.5, **style)
        values.append(ppl)
    ppl_axis(ax, values)
    ticks_at(ax, ticks)
    ax.set_xlabel("outlier row fraction α")
    title = pattern_title(first["kind"], first["fraction"], first["sparsity"])
    ax.set_title(title + ("\n(a fraction α of the rows is kept dense)" if is_n_of_m(first["kind"]) else ""))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=True, fontsize=8)


def alpha_ablation_figures(frame: pd.DataFrame) -> Drawn:
    """Thanos perplexity vs alpha, one panel per pattern, with Dense, SparseGPT and Wanda as references."""
    plt = pyplot()
    thanos = _plain(_evaluated(frame))
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
        fig.suptitle(wrapped(f"{model}: Thanos outlier-fraction (α) ablation", 4.8 * len(panels), 12))
        yield f"alpha_ablation_{safe_name(model)}", fig
