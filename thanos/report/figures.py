"""Figures from whatever results exist (matplotlib, Agg backend), each as PDF and PNG.

- ``perplexity_figures``: perplexity vs sparsity per method (the paper's Figure 1), perplexity vs the
  parameters a structural recipe removed, the Thanos block-size and outlier-fraction (alpha) ablations;
- ``layer_figures``: pruning time per layer vs layer size, the per-layer objective ||dW X||^2 as heatmaps;
- ``plotting``: what they share (matplotlib's set-up, colours, markers, axes).

Titles and labels are the tables' (``Unstructured 50%``, ``2:4``, ``Thanos (α=0.1)``:
``thanos.recipes.labels``). Each ``*_figures`` function yields ``(file stem, figure)`` pairs;
``write_figures`` draws them all, saves and closes them.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from thanos.files.atomic import atomic_path
from thanos.report.collect import Shown, collect, collect_layers
from thanos.report.layer_figures import objective_heatmap_figures, pruning_time_figures
from thanos.report.perplexity_figures import (
    alpha_ablation_figures,
    blocksize_ablation_figures,
    ppl_vs_sparsity_figures,
    quality_size_figures,
)
from thanos.report.plotting import Drawn, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

FORMATS = ("png", "pdf")


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    """``fig`` saved in every format of ``FORMATS``, then closed. The layout its first save computed is kept
    for the next (the layout engine off): a layout is most of a save's time."""
    plt = pyplot()
    paths = []
    try:
        for fmt in FORMATS:
            path = out_dir / f"{stem}.{fmt}"
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=fmt, bbox_inches="tight")
            fig.set_layout_engine("none")
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def write_figures(
    results: str | Path, out_dir: str | Path, processes: int = 1, only: Shown = None
) -> list[Path]:
    """Draw every figure the results allow into ``out_dir``; returns the files written (sorted).
    ``processes``: save that many figures at once in forked processes (saving, not plotting, is most of
    the time), each taking the next figure not yet taken; without ``fork``, one process saves them all."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame, _ = collect(results, only)  # (of the ``only`` pairs)
    layers = collect_layers(results, only)
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


def drawn_figures(frame: pd.DataFrame, layers: pd.DataFrame) -> Drawn:
    """Every figure the results allow (``collect``'s and ``collect_layers``' frames), in a fixed order."""
    if frame.empty:
        return
    yield from ppl_vs_sparsity_figures(frame)
    yield from quality_size_figures(frame)
    yield from blocksize_ablation_figures(frame)
    yield from alpha_ablation_figures(frame)
    if not layers.empty:
        yield from pruning_time_figures(layers, frame)
        yield from objective_heatmap_figures(layers, frame)


def _draw(frame: pd.DataFrame, layers: pd.DataFrame, out: Path, shared: bool = False) -> list[Path]:
    """Plot every figure the results allow, in a fixed order, and save those this process takes (all of
    them unless ``shared``); the others are closed unsaved."""
    paths: list[Path] = []
    mine = _take(0, shared)
    for number, (stem, fig) in enumerate(drawn_figures(frame, layers)):
        if number == mine:
            paths += _save(fig, out, stem)
            mine = _take(number + 1, shared)
        else:
            pyplot().close(fig)
    return paths


__all__ = [
    "alpha_ablation_figures",
    "blocksize_ablation_figures",
    "drawn_figures",
    "objective_heatmap_figures",
    "ppl_vs_sparsity_figures",
    "pruning_time_figures",
    "quality_size_figures",
    "write_figures",
]
