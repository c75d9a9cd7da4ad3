"""Figures from whatever results exist (matplotlib, Agg backend), each as PDF and PNG.

- ``ppl_vs_sparsity_{model}_{kind}``: perplexity vs sparsity per method (the paper's Figure 1), for every
  recipe family (same method, pattern kind, alpha and block size) that sweeps two or more sparsities;
- ``blocksize_ablation_{model}``: Thanos perplexity vs block size B (appendix "different blocksize");
- ``alpha_ablation_{model}``: Thanos perplexity vs the outlier-row fraction alpha;
- ``pruning_time_vs_layer_size``: pruning time per layer vs layer size, per method, one panel per pattern
  kind (appendix "Implementation details"), from the per-layer stats of pruning_report.json;
- ``objective_heatmap_{model}_{recipe}``: the per-layer objective ||dW X||^2 (block x layer), log colour.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import pandas as pd

from thanos import methods
from thanos.atomic import atomic_path
from thanos.report.collect import (
    METHOD_ORDER,
    as_float,
    collect,
    collect_layers,
    method_label,
    pattern_label,
    recipe_label,
    shown_alpha,
    sortable,
)

log = logging.getLogger(__name__)

FORMATS = ("pdf", "png")
KIND_TITLES = {"unstructured": "Unstructured", "nm": "Semi-structured n:m", "structured": "Structured"}
METHOD_COLORS = {name: method.color for name, method in methods.METHODS.items()}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"figure.dpi": 100, "savefig.dpi": 150, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3}
    )
    return plt


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(name))


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    plt = _plt()
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"{stem}.{fmt}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _ppl_axis(ax, values) -> None:
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


def _style(method: str, index: int) -> dict:
    return {"color": METHOD_COLORS.get(method), "marker": MARKERS[index % len(MARKERS)]}


def _evaluated(frame: pd.DataFrame) -> pd.DataFrame:
    pruned = frame[(frame["method"] != "dense") & frame["ppl"].notna() & (frame["kind"] != "unknown")].copy()
    pruned["alpha_s"] = [
        shown_alpha(m, as_float(a)) for m, a in zip(pruned["method"], pruned["alpha"], strict=True)
    ]
    pruned["blocksize"] = pruned["blocksize"].astype(float)
    return pruned


def _dense_line(ax, frame: pd.DataFrame, model: str) -> list[float]:
    dense = frame[(frame["model"] == model) & (frame["method"] == "dense") & frame["ppl"].notna()]
    if dense.empty:
        return []
    ppl = float(dense["ppl"].iloc[0])
    ax.axhline(ppl, color="black", linestyle="--", linewidth=1, label=f"Dense ({ppl:.2f})")
    return [ppl]


def ppl_vs_sparsity(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    plt = _plt()
    pruned = _evaluated(frame)
    paths = []
    for (model, kind), rows in pruned.groupby(["model", "kind"]):
        families = []
        for key, fam in rows.groupby(["method", "alpha_s", "blocksize"], dropna=False):
            if fam["fraction"].nunique() >= 2:
                families.append((key, fam))
        if not families:
            continue
        families.sort(
            key=lambda item: (METHOD_ORDER.get(item[0][0], 9), sortable(item[0][1]), sortable(item[0][2]))
        )
        ambiguous = len({(m, a) for (m, a, _), _ in families}) < len(families)
        fig, ax = plt.subplots(figsize=(6, 4.2))
        values = _dense_line(ax, frame, model)
        for i, ((method, alpha, blocksize), fam) in enumerate(families):
            fam = fam.groupby("fraction", as_index=False)["ppl"].min().sort_values("fraction")
            label = _label(method, alpha, blocksize if ambiguous else None)
            ax.plot(
                fam["fraction"] * 100,
                fam["ppl"],
                label=label,
                linewidth=1.8,
                markersize=6,
                **_style(method, i),
            )
            values += list(fam["ppl"])
        _ppl_axis(ax, values)
        ax.set_xlabel(f"{KIND_TITLES.get(kind, kind).lower()} sparsity (%)")
        ax.set_title(f"{model}: perplexity vs {KIND_TITLES.get(kind, kind).lower()} sparsity")
        ax.legend(frameon=True, fontsize=9)
        paths += _save(fig, out_dir, f"ppl_vs_sparsity_{_safe(model)}_{kind}")
    return paths


def _ablation(frame: pd.DataFrame, out_dir: Path, vary: str, fixed: str, stem: str) -> list[Path]:
    """Thanos perplexity vs ``vary`` (blocksize or alpha_s), one line per (sparsity pattern, ``fixed``)."""
    plt = _plt()
    thanos = _evaluated(frame)
    thanos = thanos[thanos["method"] == "thanos"]
    paths = []
    for model, rows in thanos.groupby("model"):
        lines = [
            (key, grp)
            for key, grp in rows.groupby(["sparsity", fixed], dropna=False)
            if grp[vary].dropna().nunique() >= 2
        ]
        if not lines:
            continue
        lines.sort(
            key=lambda item: (
                item[1]["kind"].iloc[0] != "unstructured",
                str(item[0][0]),
                sortable(item[0][1]),
            )
        )
        fig, ax = plt.subplots(figsize=(6, 4.2))
        values, ticks = [], set()
        for i, ((sparsity, other), grp) in enumerate(lines):
            grp = grp.dropna(subset=[vary]).groupby(vary, as_index=False)["ppl"].min().sort_values(vary)
            first = rows[rows["sparsity"] == sparsity].iloc[0]
            label = pattern_label(first["kind"], first["fraction"], sparsity)
            if not math.isnan(other):
                label += f", α={other:g}" if fixed == "alpha_s" else f", B={other:g}"
            ax.plot(
                grp[vary],
                grp["ppl"],
                label=label,
                marker=MARKERS[i % len(MARKERS)],
                linewidth=1.8,
                markersize=6,
            )
            values += list(grp["ppl"])
            ticks.update(grp[vary])
        _ppl_axis(ax, values)
        if vary == "blocksize":
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
            ax.set_xlabel("block size B (columns)")
            ax.set_title(f"{model}: Thanos block-size ablation")
        else:
            ax.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
            ax.set_xlabel("outlier row fraction α")
            ax.set_title(f"{model}: Thanos outlier-fraction (α) ablation")
        ax.legend(frameon=True, fontsize=9)
        paths += _save(fig, out_dir, f"{stem}_{_safe(model)}")
    return paths


def pruning_time(layers: pd.DataFrame, out_dir: Path) -> list[Path]:
    plt = _plt()
    layers = layers[layers["seconds"].notna() & layers["numel"].notna() & (layers["seconds"] > 0)]
    kinds = [k for k in KIND_TITLES if k in set(layers["kind"])]
    if not kinds:
        return []
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.2), squeeze=False, sharey=True)
    for ax, kind in zip(axes[0], kinds, strict=True):
        rows = layers[layers["kind"] == kind]
        for method in sorted(set(rows["method"]), key=lambda m: (METHOD_ORDER.get(m, 9), m)):
            grp = rows[rows["method"] == method]
            style = _style(method, METHOD_ORDER.get(method, 5))
            ax.scatter(
                grp["numel"], grp["seconds"], s=10, alpha=0.25, color=style["color"], marker=style["marker"]
            )
            med = grp.groupby("numel", as_index=False)["seconds"].median().sort_values("numel")
            label = method_label(method)
            ax.plot(med["numel"], med["seconds"], label=label, linewidth=1.8, markersize=6, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layer size (number of weights)")
        ax.set_title(KIND_TITLES[kind])
        ax.legend(frameon=True, fontsize=8)
    axes[0][0].set_ylabel("pruning time per layer (s, median line)")
    devices = sorted({str(d) for d in layers["device"].dropna()})
    if devices:
        fig.suptitle(f"Pruning time per layer vs layer size (device: {', '.join(devices)})", y=1.02)
    return _save(fig, out_dir, "pruning_time_vs_layer_size")


def objective_heatmaps(layers: pd.DataFrame, out_dir: Path) -> list[Path]:
    plt = _plt()
    from matplotlib.colors import LogNorm

    paths = []
    for (model, recipe), rows in layers.groupby(["model", "recipe"]):
        rows = rows[rows["objective"].notna() & (rows["objective"] > 0)]
        if rows.empty:
            continue
        order = list(dict.fromkeys(rows.sort_values("order")["layer"]))
        grid = rows.pivot_table(index="block", columns="layer", values="objective", aggfunc="first")
        grid = grid.reindex(columns=order).sort_index()
        nblocks, nlayers = grid.shape
        fig, ax = plt.subplots(figsize=(1.0 + 0.9 * nlayers, 1.6 + min(0.3 * nblocks, 14)))
        image = ax.imshow(
            grid.to_numpy(dtype=float),
            aspect="auto",
            cmap="viridis",
            norm=LogNorm(vmin=float(rows["objective"].min()), vmax=float(rows["objective"].max())),
            interpolation="nearest",
        )
        ax.set_xticks(range(nlayers), order, rotation=40, ha="right")
        step = max(1, nblocks // 20)
        ax.set_yticks(range(0, nblocks, step), [str(b) for b in grid.index[::step]])
        ax.set_xlabel("layer")
        ax.set_ylabel("block")
        ax.grid(False)
        first = rows.iloc[0]
        label = _label(first["method"], shown_alpha(first["method"], as_float(first["alpha"])))
        ax.set_title(f"{model} / {recipe}\n{label}, {first['sparsity']}")
        fig.colorbar(image, ax=ax, label="objective ‖ΔW X‖² (log scale)")
        paths += _save(fig, out_dir, f"objective_heatmap_{_safe(model)}_{_safe(recipe)}")
    return paths


def write_figures(results: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw every figure the results allow into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame, _ = collect(results)
    layers = collect_layers(results)
    paths: list[Path] = []
    if not frame.empty:
        paths += ppl_vs_sparsity(frame, out)
        paths += _ablation(frame, out, "blocksize", "alpha_s", "blocksize_ablation")
        paths += _ablation(frame, out, "alpha_s", "blocksize", "alpha_ablation")
    if not layers.empty:
        paths += pruning_time(layers, out)
        paths += objective_heatmaps(layers, out)
    if not paths:
        log.warning("no results under %s to draw yet; no figures written", results)
    return paths
