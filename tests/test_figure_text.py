"""Every figure the report draws, rendered from a realistic results tree (SmolLM2-135M's 30 blocks and layer
shapes, every kind of recipe the workflow writes, long labels): no two texts overlap, no text leaves the
canvas or lies over another panel, every axis is labelled, and a distilled recipe shows only what it has of
its own (its perplexity; it pruned no layer: no objective panel, no pruning time)."""

from __future__ import annotations

import functools
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers.report import (
    recipe_dir,
    write_json,
)

from thanos.report.collect import collect, collect_layers
from thanos.report.figures import drawn_figures

MODEL = "HuggingFaceTB_SmolLM2-135M-Instruct"  # a long name, as the workflow names a hub model's results
SMOLLM2 = {  # hidden 576, 3 KV heads of 64, MLP 1536
    "self_attn.q_proj": [576, 576],
    "self_attn.k_proj": [192, 576],
    "self_attn.v_proj": [192, 576],
    "self_attn.o_proj": [576, 576],
    "mlp.gate_proj": [1536, 576],
    "mlp.up_proj": [1536, 576],
    "mlp.down_proj": [576, 1536],
}
TINY = {"mlp.down_proj": [64, 256]}
NEURONS = {"mlp.down_proj": [576, 1536]}  # a neurons recipe removes columns of down_proj alone
DISTILL = {"tokens": 131072, "source": "c4"}
RECOVER = {"epochs": 2, "lr": 0.003, "batch_size": 4, "holdout": 0.125, "target": "dense"}
LONG_NAME = "thanos_u70_calibration-wikitext2-seed1-nsamples256-seqlen4096"
TOL = 0.5  # pixels: texts that only touch do not overlap


def _update(root: Path, name: str, **fields) -> dict:
    """Merge ``fields`` into the recipe's pruning report (``recipe`` merged key by key); returns it."""
    path = root / MODEL / name / "model" / "pruning_report.json"
    report = json.loads(path.read_text())
    report["recipe"] |= fields.pop("recipe", {})
    write_json(path, report | fields)
    return report


def _reshaped(root: Path, name: str, recipe: dict, factor) -> None:
    """``name`` with ``recipe``'s fields, each layer's objective times ``factor(block)``: recovery (each
    block trained after it is pruned: every later block prunes other inputs) and OWL (a sparsity per block)
    change the objectives."""
    report = _update(root, name, recipe=recipe)
    for layer in report["layers"]:
        layer["objective"] *= factor(layer["block"])
    _update(root, name, layers=report["layers"])


def _distilled(root: Path, pruned: str, name: str, ppl: float) -> None:
    """``name``: ``pruned``'s model distilled, as ``thanos distill`` writes it: the student's pruning report
    (its per-layer stats included) with ``distillation`` added, and an evaluation of its own."""
    source = root / MODEL / pruned / "model" / "pruning_report.json"
    report = json.loads(source.read_text())
    report["recipe"] |= {"name": name, "distill": DISTILL}
    report["distillation"] = {"steps": 32, "tokens": 131072, "heldout_kl": [0.41, 0.12], "seconds": 900.0}
    write_json(root / MODEL / name / "model" / "pruning_report.json", report)
    write_json(
        root / MODEL / name / "eval" / "perplexity.json", {"ppl": ppl, "seqlen": 2048, "dataset": "wiki"}
    )


def realistic_results(root: Path) -> Path:
    """SmolLM2's 30 blocks: the four methods' sparsity sweeps, block sizes, n:m with alphas, structured,
    OWL, recovered and distilled recipes, and MLP neurons 30 % with its distilled model; and a model of one
    block and one layer."""
    write_json(root / MODEL / "dense" / "eval" / "perplexity.json", {"ppl": 20.1, "dataset": "wiki"})
    r = functools.partial(recipe_dir, root, MODEL, blocks=30, shapes=SMOLLM2)
    for method, scale in (("magnitude", 3.0), ("wanda", 1.6), ("sparsegpt", 1.3), ("thanos", 1.25)):
        for pct, excess in ((50, 1.0), (70, 6.0)):
            r(f"{method}_u{pct}", method, str(pct / 100), ppl=20.1 * (1 + (scale - 1) * excess), zs=0.4)
    for b, ppl in ((64, 25.4), (512, 25.0), (2048, 25.2)):
        r(f"thanos_u50_b{b}", "thanos", "0.5", ppl=ppl, blocksize=b)
    for pattern, slug in (("2:4", "2-4"), ("4:8", "4-8")):
        r(f"sparsegpt_{slug}", "sparsegpt", pattern, ppl=41.0)
        r(f"wanda_{slug}", "wanda", pattern, ppl=48.0)
        for alpha, ppl in ((0.0, 39.0), (0.05, 36.0), (0.1, 34.5), (0.2, 33.0)):
            r(f"thanos_{slug}_a{alpha:g}_b512", "thanos", pattern, ppl=ppl, alpha=alpha, blocksize=512)
    for method in ("sparsegpt", "thanos"):
        r(f"{method}_s30", method, "structured:0.3", ppl=90.0)
    for method in ("wanda", "thanos"):
        for pct in (50, 70):
            r(f"{method}_u{pct}_owl", method, str(pct / 100), ppl=30.0 + pct)
            _reshaped(root, f"{method}_u{pct}_owl", {"profile": "owl"}, lambda block: 0.5 + block / 30)
    for pct in (50, 70):
        r(f"thanos_u{pct}_rec", "thanos", str(pct / 100), ppl=22.0 + pct / 5)
        _reshaped(root, f"thanos_u{pct}_rec", {"recover": RECOVER}, lambda block: 0.8 if block else 1.0)
        _distilled(root, f"thanos_u{pct}", f"thanos_u{pct}_kd131072", ppl=20.5 + pct / 20)
    r("thanos_2-4_a0.1_b512_rec", "thanos", "2:4", ppl=30.0, alpha=0.1, blocksize=512)
    _reshaped(root, "thanos_2-4_a0.1_b512_rec", {"recover": RECOVER}, lambda block: 0.8 if block else 1.0)
    # recipes that differ in what no label shows but damping, or nothing but their (long) names
    r("thanos_u70_damp0.1", "thanos", "0.7", ppl=52.0)
    _reshaped(root, "thanos_u70_damp0.1", {"damp": 0.1}, lambda block: 1.1)
    r(LONG_NAME, "thanos", "0.7", ppl=53.0)
    _reshaped(root, LONG_NAME, {}, lambda block: 1.2)
    r("thanos_n30", "thanos", "neurons:0.3", ppl=73.1, shapes=NEURONS)
    _update(root, "thanos_n30", overall_sparsity=0.0)
    _distilled(root, "thanos_n30", "thanos_n30_kd131072", ppl=48.2)
    # a model of one block and one layer: a colour scale of one objective, panels of one cell
    write_json(root / "tiny" / "dense" / "eval" / "perplexity.json", {"ppl": 10.0})
    for pct in (50, 60):
        recipe_dir(root, "tiny", f"wanda_u{pct}", "wanda", str(pct / 100), ppl=12.0, blocks=1, shapes=TINY)
    return root


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """(the results, {stem: figure drawn}) of every figure the report writes; closed after the module."""
    import matplotlib.pyplot as plt

    results = realistic_results(tmp_path_factory.mktemp("figure_text") / "results")
    frame, _ = collect(results)
    drawn = dict(drawn_figures(frame, collect_layers(results)))
    for fig in drawn.values():
        fig.canvas.draw()
    yield results, drawn
    plt.close("all")


# --- the texts' geometry, in display pixels ---------------------------------------------------------------


def _corners(text, renderer) -> np.ndarray:
    """The four corners of a text's rotated box (its window extent is the box around them)."""
    box = text.get_window_extent(renderer)
    angle = text.get_rotation()
    if angle % 90 == 0:
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    text.set_rotation(0)
    flat = text.get_window_extent(renderer)
    text.set_rotation(angle)
    theta = math.radians(angle)
    turn = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [flat.width / 2, flat.height / 2]
    return half @ turn.T + [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex polygons overlap by more than ``TOL`` (separating axis theorem)."""
    for polygon in (a, b):
        for start, end in zip(polygon, np.roll(polygon, -1, axis=0), strict=True):
            normal = np.array([start[1] - end[1], end[0] - start[0]])
            normal /= np.linalg.norm(normal)
            pa, pb = a @ normal, b @ normal
            if pa.max() <= pb.min() + TOL or pb.max() <= pa.min() + TOL:
                return False
    return True


def _rectangle(box) -> np.ndarray:
    return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])


def _shown(text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def _tick_labels(axis) -> list:
    """The axis's tick labels drawn: visible, not empty, at a tick inside the view."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    labels = axis.get_ticklabels(which="both")
    index = 0 if axis.axis_name == "x" else 1
    return [t for t in labels if _shown(t) and low - slack <= t.get_position()[index] <= high + slack]


def _texts(fig, renderer) -> list[tuple[str, object, np.ndarray]]:
    """(what it is, the axes it belongs to or None, its corners) of every text and legend drawn."""
    items = [(f"figure text {t.get_text()!r}", None, _corners(t, renderer)) for t in fig.texts if _shown(t)]
    items += [("figure legend", None, _rectangle(g.get_window_extent(renderer))) for g in fig.legends]
    for ax in fig.axes:
        texts = [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        texts += _tick_labels(ax.xaxis) + _tick_labels(ax.yaxis)
        items += [(f"{t.get_text()!r} of {_name(ax)}", ax, _corners(t, renderer)) for t in texts if _shown(t)]
        if ax.get_legend() is not None:
            items.append(
                (f"legend of {_name(ax)}", ax, _rectangle(ax.get_legend().get_window_extent(renderer)))
            )
    return items


def _name(ax) -> str:
    return "the colour bar" if _is_colorbar(ax) else f"panel {ax.get_title()!r}"


def _is_colorbar(ax) -> bool:
    return ax.get_label() == "<colorbar>"


# --- the tests ------------------------------------------------------------------------------------------


def test_every_figure_is_drawn(figures):
    stems = set(figures[1])
    assert {
        f"ppl_vs_sparsity_{MODEL}_unstructured",
        f"blocksize_ablation_{MODEL}",
        f"alpha_ablation_{MODEL}",
        "pruning_time_vs_layer_size",
        *(f"objective_heatmap_{MODEL}_{p}" for p in ("u50", "u70", "2-4", "4-8", "s30", "n30")),
        "objective_heatmap_tiny_u50",
    } <= stems


def test_no_text_overlaps_another_or_leaves_the_canvas(figures):
    problems = []
    for stem, fig in figures[1].items():
        renderer = fig.canvas.get_renderer()
        items = _texts(fig, renderer)
        canvas = _rectangle(fig.bbox)
        for (what, _, corners), (other, _, others) in itertools.combinations(items, 2):
            if _overlap(corners, others):
                problems.append(f"{stem}: {what} overlaps {other}")
        for what, owner, corners in items:
            low, high = corners.min(axis=0), corners.max(axis=0)
            if (low < canvas[0] - TOL).any() or (high > canvas[2] + TOL).any():
                problems.append(f"{stem}: {what} leaves the canvas")
            for ax in fig.axes:
                if ax is not owner and _overlap(corners, _rectangle(ax.get_window_extent(renderer))):
                    problems.append(f"{stem}: {what} lies over {_name(ax)}")
    assert not problems, "\n".join(problems)


def test_every_axis_is_labelled(figures):
    """Each panel's x and y axis is named (by the panel or, for a row or column of panels, by the figure)
    and a numeric axis labels at least two ticks; a colour bar says what its colours are."""
    problems = []
    for stem, fig in figures[1].items():
        for ax in fig.axes:
            if _is_colorbar(ax):
                if not (ax.get_ylabel() or ax.get_xlabel()):
                    problems.append(f"{stem}: the colour bar has no label")
                continue
            for axis, sup in ((ax.xaxis, fig.get_supxlabel()), (ax.yaxis, fig.get_supylabel())):
                if not (axis.label.get_text() or sup):
                    problems.append(f"{stem}: {_name(ax)} has no {axis.axis_name} label")
                if not ax.get_images() and len(_tick_labels(axis)) < 2:
                    shown = [t.get_text() for t in _tick_labels(axis)]
                    problems.append(f"{stem}: {_name(ax)} labels {shown} on its {axis.axis_name} axis")
    assert not problems, "\n".join(problems)


def test_a_distilled_recipe_shows_its_perplexity_and_no_layer_of_its_own(figures):
    """Distillation prunes no layer: its model's report carries the pruned model's per-layer stats, which
    are not its own; its perplexity is."""
    results, drawn = figures
    layers = collect_layers(results)
    assert not layers["recipe"].str.contains("_kd").any()
    heatmap = drawn[f"objective_heatmap_{MODEL}_n30"]
    panels = [ax for ax in heatmap.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == ["Thanos (α=0)"]
    timing = drawn["pruning_time_vs_layer_size"]
    labels = [line.get_label() for ax in timing.axes for line in ax.get_lines()]
    assert labels and not any("distillation" in label for label in labels), labels
    points = sum(len(c.get_offsets()) for ax in timing.axes for c in ax.collections)
    assert points == len(layers) == 30 * (7 * 34 + 1) + 2  # every pruned layer once, none twice
    for stem in (f"objective_heatmap_{MODEL}_{p}" for p in ("u50", "u70", "n30")):
        grids = [ax.get_images()[0].get_array() for ax in drawn[stem].axes if ax.get_images()]
        for a, b in itertools.combinations(grids, 2):
            assert not np.ma.allequal(a, b), f"{stem}: two panels show the same objectives"
    (ax,) = drawn[f"ppl_vs_sparsity_{MODEL}_unstructured"].axes
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    distilled = [100 * ((20.5 + pct / 20) / 20.1 - 1) for pct in (50, 70)]
    assert lines["Thanos (α=0) + distillation"] == pytest.approx(distilled)


def test_the_ablations_compare_the_pruning_alone(figures):
    """A recovered recipe (2:4, alpha 0.1: ppl 30) is no point of the alpha ablation (Thanos at alpha 0.1:
    34.5), nor a distilled or OWL one of the block-size ablation."""
    drawn = figures[1]
    panels = {ax.get_title().split("\n")[0]: ax for ax in drawn[f"alpha_ablation_{MODEL}"].axes}
    (thanos,) = [
        line for line in panels["Semi-structured 2:4"].get_lines() if line.get_label().startswith("T")
    ]
    assert list(thanos.get_ydata()) == [39.0, 36.0, 34.5, 33.0]
    (ax,) = drawn[f"blocksize_ablation_{MODEL}"].axes
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [64, 128, 512, 2048]
    assert list(line.get_ydata()) == pytest.approx([25.4, 20.1 * 1.25, 25.0, 25.2])
