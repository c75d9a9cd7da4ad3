"""Tables and figures from partial, synthetic (fake but well-formed) results."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.report import (
    LAYERS,
    TASKS,
    fake_results,
    recipe_dir,
    write_json,
)
from matplotlib.colors import LogNorm

from thanos.cli import main
from thanos.recipes.labels import pattern_label, pattern_slug
from thanos.report.collect import collect, collect_layers
from thanos.report.figures import (
    alpha_ablation_figures,
    objective_heatmap_figures,
    ppl_vs_sparsity_figures,
    pruning_time_figures,
)
from thanos.report.layer_figures import OBJECTIVE_LABEL, shared_log_limits
from thanos.report.tables import Row, Table, build_tables


@pytest.fixture()
def results(tmp_path) -> Path:
    return fake_results(tmp_path / "results")


def test_collect_reads_recipes_and_tolerates_gaps(results):
    frame, tasks = collect(results)
    assert set(frame["model"]) == {"tiny-a", "tiny-b"}
    assert "calib" not in set(frame["recipe"]) and "tables" not in set(frame["model"])
    row = frame[(frame["model"] == "tiny-a") & (frame["recipe"] == "thanos_2-4_a0.1")].iloc[0]
    assert (row["method"], row["sparsity"], row["kind"], row["alpha"], row["blocksize"]) == (
        "thanos",
        "2:4",
        "nm",
        0.1,
        512,
    )
    assert math.isnan(frame[frame["recipe"] == "wanda_2-4"].iloc[0]["ppl"])
    assert set(tasks["task"]) == set(TASKS)
    layers = collect_layers(results)
    assert len(layers[(layers["model"] == "tiny-a") & (layers["recipe"] == "wanda_u50")]) == 3 * len(LAYERS)
    assert layers["numel"].max() == 256 * 64


def test_a_report_shows_only_the_variants_it_is_given(results, tmp_path):
    """``--only MODEL/VARIANT ...`` (the workflow passes its config's models, recipes and dense): a recipe
    found under the results but not given (a config named it, then dropped it: evaluated under other
    settings) is in no table, figure or ordering (it was, and was bolded against the others)."""
    every, _ = collect(results)
    kept = {
        f"{m}/{r}" for m, r in zip(every["model"], every["recipe"], strict=True) if r != "thanos_2-4_a0.1"
    }
    frame, _ = collect(results, kept)
    assert "thanos_2-4_a0.1" in set(every["recipe"]) and "thanos_2-4_a0.1" not in set(frame["recipe"])
    assert len(frame) == len(every) - (every["recipe"] == "thanos_2-4_a0.1").sum()
    assert "thanos_2-4_a0.1" not in set(collect_layers(results, kept)["recipe"])
    rows = {}
    for name, only in (("every", []), ("kept", ["--only", *sorted(kept)])):
        out = tmp_path / name
        assert main(["tables", "--results", str(results), *only, "--out-dir", str(out)]) == 0
        rows[name] = (out / "perplexity.csv").read_text().splitlines()
    dropped = set(rows["every"]) - set(rows["kept"])
    assert len(dropped) == 1 and dropped.pop().startswith("Thanos (2:4 + 10% dense rows),2:4,"), rows


def test_perplexity_table_layout_bold_and_missing(results, tmp_path):
    out = tmp_path / "tables"
    assert main(["tables", "--results", str(results), "--out-dir", str(out)]) == 0
    md = (out / "perplexity.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| ") and ":--" not in line]
    assert lines[0] == "| Method | Sparsity | Achieved | tiny-a | tiny-b |"
    assert lines[1].startswith("| Dense | 0% | 0% | 10.00 | 7.00 |")  # Dense first, never bold
    # unstructured 50% group: Thanos best on both models; Magnitude first (paper order)
    assert "| Magnitude | Unstructured 50% | 50.0% | 40.00 | 28.00 |" in lines
    assert "| Thanos (α=0), B=128 |  | 50.0% | 12.50 | **8.75** |" in lines
    assert "| Thanos (α=0), B=2048 |  | 50.0% | **12.30** | - |" in lines  # the block-size ablation
    blocks = [line.split("|")[1].strip() for line in lines if ", B=" in line]
    assert blocks == [f"Thanos (α=0), B={b}" for b in (8, 128, 512, 2048)]
    # 2:4 group: best within the group, missing cells "-"; recipes not evaluated yet left out
    assert "| SparseGPT | 2:4 | 50.0% | 21.00 | - |" in lines
    assert not any(line.startswith("| Wanda |  | 50.0% | - | - |") for line in lines)
    # Thanos n:m with alpha > 0 keeps alpha of the rows dense: labelled so, with the sparsity it reaches
    assert "| Thanos (2:4 + 10% dense rows) |  | 45.0% | 18.00 | **12.60** |" in lines
    assert "| Thanos (2:4 + 20% dense rows) |  | 40.0% | **17.50** | - |" in lines
    assert "| Thanos (α=0.1) | Structured 30% | 30.0% | **45.00** | - |" not in lines  # SparseGPT leads
    assert "| Thanos (α=0.1) |  | 30.0% | **45.00** | - |" in lines  # structured: alpha keeps the 30%
    order = [line.split("|")[2].strip() for line in lines[1:] if line.split("|")[2].strip()]
    assert order[:4] == ["0%", "Unstructured 30%", "Unstructured 50%", "Unstructured 60%"]
    assert order.index("Structured 30%") < order.index("2:4")

    csv = pd.read_csv(out / "perplexity.csv", na_values="-")
    assert list(csv.columns) == ["Method", "Sparsity", "Achieved", "tiny-a", "tiny-b"]
    assert csv.loc[csv["Method"] == "SparseGPT"].shape[0] >= 4
    tex = (out / "perplexity.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "\\textbf{12.30}" in tex
    assert "Thanos ($\\alpha$=0.1)" in tex and "Unstructured 50\\%" in tex
    assert "Thanos (2:4 + 10\\% dense rows) &  & 45.0\\%" in tex


def test_zeroshot_tables(results, tmp_path):
    out = tmp_path / "tables"
    assert main(["tables", "--results", str(results), "--out-dir", str(out)]) == 0
    avg = (out / "zeroshot_avg.md").read_text()
    assert "| Dense | 0% | 0% | 53.00 | - |" in avg  # tiny-b has no dense zero-shot
    assert "| SparseGPT |  | 50.0% | **50.00** | **50.00** |" in avg  # highest mean in the u50 group
    tasks = (out / "zeroshot_tasks_u50.md").read_text().splitlines()
    header = (
        "| Model | Method | Achieved | ArcC | ArcE | BoolQ | HellaSwag | OBQA | PiQA | WinoGrande | Average |"
    )
    assert header in tasks
    assert any(line.startswith("| tiny-a | Dense | 0% | 56.00 |") for line in tasks)
    assert any(line.startswith("|  | SparseGPT | 50.0% | **53.00** |") for line in tasks)
    assert not any("B=8" in line or line.startswith("| tiny-b | Dense") for line in tasks)  # no values
    assert {p.name for p in out.glob("zeroshot_tasks_*.md")} == {
        "zeroshot_tasks_u50.md",
        "zeroshot_tasks_s30.md",
        "zeroshot_tasks_2-4.md",
    }


def test_tables_without_results(tmp_path):
    (tmp_path / "results").mkdir()
    assert build_tables(tmp_path / "results") == []
    assert main(["tables", "--results", str(tmp_path / "results"), "--out-dir", str(tmp_path / "t")]) == 0
    assert main(["tables", "--results", str(tmp_path / "nowhere"), "--out-dir", str(tmp_path / "t")]) == 2


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> tuple[Path, Path]:
    """(the results, their figures drawn by one process): drawn once for the tests that read them."""
    root = tmp_path_factory.mktemp("figures")
    results, out = fake_results(root / "results"), root / "figures"
    assert main(["figures", "--results", str(results), "--out-dir", str(out)]) == 0
    return results, out


def test_figures_from_partial_results(figures):
    out = figures[1]
    stems = {p.stem for p in out.glob("*.png")}
    assert stems == {p.stem for p in out.glob("*.pdf")}
    # Figure 1: only tiny-a sweeps unstructured sparsity; no other (model, kind) has two sparsities
    assert {s for s in stems if s.startswith("ppl_vs_sparsity")} == {"ppl_vs_sparsity_tiny-a_unstructured"}
    assert {s for s in stems if s.startswith("blocksize_ablation")} == {"blocksize_ablation_tiny-a"}
    # alpha: tiny-b has alpha 0 and 0.1 for 2:4 (two values are enough for a line)
    assert {s for s in stems if s.startswith("alpha_ablation")} == {
        "alpha_ablation_tiny-a",
        "alpha_ablation_tiny-b",
    }
    assert "pruning_time_vs_layer_size" in stems
    # one heatmap per (model, pattern) with objectives, a panel per recipe (magnitude records none)
    assert {s for s in stems if s.startswith("objective_heatmap_")} == {
        *(f"objective_heatmap_tiny-a_{p}" for p in ("u30", "u50", "u60", "u70", "s30", "2-4")),
        *(f"objective_heatmap_tiny-b_{p}" for p in ("u50", "s30", "2-4")),
    }
    for path in out.iterdir():
        head = path.read_bytes()[:8]
        assert head.startswith(b"\x89PNG" if path.suffix == ".png" else b"%PDF"), path


def test_figures_drawn_by_several_processes_are_the_same(figures, tmp_path):
    """--processes 2: the processes share the figures out (each saves the next one not yet taken); the
    files are those one process writes, the PNGs byte for byte (a PDF records its creation time)."""
    results, one = figures
    two = tmp_path / "two"
    assert main(["figures", "--results", str(results), "--out-dir", str(two), "--processes", "2"]) == 0
    names = sorted(p.name for p in one.iterdir())
    assert len(names) > 6 and names == sorted(p.name for p in two.iterdir())
    for name in names:
        if name.endswith(".png"):
            assert (one / name).read_bytes() == (two / name).read_bytes(), name
    with pytest.raises(SystemExit) as refused:  # argparse: usage and the error, exit status 2
        main(["figures", "--results", str(results), "--out-dir", str(two), "--processes", "0"])
    assert refused.value.code == 2


def test_figures_without_results(tmp_path):
    (tmp_path / "results").mkdir()
    out = tmp_path / "figures"
    assert main(["figures", "--results", str(tmp_path / "results"), "--out-dir", str(out)]) == 0
    assert list(out.iterdir()) == []
    assert main(["figures", "--results", str(tmp_path / "nowhere"), "--out-dir", str(out)]) == 2


# --- figures a reader can trust: inspected before they are saved ---------------------------------------


@pytest.fixture()
def drawn():
    """Collects ``(stem, figure)`` pairs from a figure builder into a dict; closes every figure after."""
    import matplotlib.pyplot as plt

    yield dict
    plt.close("all")


def _frames(results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return collect(results)[0], collect_layers(results)


def _horizontal(ax) -> dict[str, float]:
    """label -> y of the axes' horizontal reference lines (axhline: constant y across the axes)."""
    return {
        line.get_label(): float(line.get_ydata()[0])
        for line in ax.get_lines()
        if len(set(line.get_ydata())) == 1 and list(line.get_xdata()) == [0, 1]
    }


def test_ppl_vs_sparsity_ticks_at_measured_sparsities_relative_to_dense(results, drawn):
    frame, _ = _frames(results)
    figs = drawn(ppl_vs_sparsity_figures(frame))
    (ax,) = figs["ppl_vs_sparsity_tiny-a_unstructured"].axes
    assert list(ax.get_xticks()) == [30, 50, 60, 70]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["30", "50", "60", "70"]
    assert _horizontal(ax) == {"Dense (ppl 10.00)": 0.0}  # the dense model is the line at 0 % above it
    assert ax.get_yscale() == "symlog" and "above dense" in ax.get_ylabel()
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    # Thanos: ppl 9, 12.5, 30, 300 against dense 10; below dense stays visible (symlog)
    assert lines["Thanos (α=0)"] == pytest.approx([-10.0, 25.0, 200.0, 2900.0])
    assert "Dense (ppl 10.00)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_ppl_vs_sparsity_keeps_methods_near_dense_apart(tmp_path, drawn):
    """The demo's numbers: SparseGPT and Thanos within 1 % of dense, Magnitude and Wanda up to 12 % above."""
    root = tmp_path / "results"
    write_json(root / "demo" / "dense" / "eval" / "perplexity.json", {"ppl": 177.03})
    sweeps = {
        "magnitude": (179.3, 182.6, 192.5),
        "sparsegpt": (177.3, 177.9, 179.0),
        "wanda": (180.1, 185.1, 197.5),
        "thanos": (177.19, 177.4, 178.14),
    }
    for method, ppls in sweeps.items():
        for pct, ppl in zip((50, 60, 70), ppls, strict=True):
            recipe_dir(root, "demo", f"{method}_u{pct}", method, str(pct / 100), ppl=ppl, blocks=1)
    frame, _ = _frames(root)
    fig = drawn(ppl_vs_sparsity_figures(frame))["ppl_vs_sparsity_demo_unstructured"]
    fig.canvas.draw()
    (ax,) = fig.axes
    height = ax.bbox.height

    def pixel_y(label: str, i: int = 0) -> float:
        line = next(line for line in ax.get_lines() if line.get_label() == label)
        return ax.transData.transform((line.get_xdata()[i], line.get_ydata()[i]))[1]

    dense_y = pixel_y("Dense (ppl 177.03)")
    # Thanos at 50 % is 0.09 % above dense: on a perplexity axis 0.8 % of the height, here well apart
    assert (pixel_y("Thanos (α=0)") - dense_y) / height > 0.1
    assert (pixel_y("SparseGPT") - pixel_y("Thanos (α=0)")) / height > 0.05
    assert (pixel_y("Magnitude") - pixel_y("SparseGPT")) / height > 0.1
    ylow, yhigh = ax.get_ylim()
    assert ylow <= 0 and yhigh >= 100 * (197.5 / 177.03 - 1)  # every point, and the dense line, shown


def test_shared_log_limits():
    assert shared_log_limits([3.0, 0.0, math.nan, 1e3, -1.0, math.inf]) == (3.0, 1e3)
    assert shared_log_limits([4.0, 4.0]) == (2.0, 8.0)  # one value: a visible range around it
    with pytest.raises(ValueError):
        shared_log_limits([0.0, math.nan])


def test_objective_heatmaps_share_one_colour_scale_per_pattern(results, drawn):
    frame, layers = _frames(results)
    figs = drawn(objective_heatmap_figures(layers, frame))
    fig = figs["objective_heatmap_tiny-a_2-4"]
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == [
        "SparseGPT",
        "Wanda",
        "Thanos (α=0)",
        "Thanos (2:4 + 5% dense rows)",
        "Thanos (2:4 + 10% dense rows)",
        "Thanos (2:4 + 20% dense rows)",
    ]
    images = [image for ax in panels for image in ax.get_images()]
    mine = layers[(layers["model"] == "tiny-a") & (layers["sparsity"] == "2:4")]
    shared = (float(mine["objective"].min()), float(mine["objective"].max()))
    assert {(image.norm.vmin, image.norm.vmax) for image in images} == {shared}
    assert all(isinstance(image.norm, LogNorm) for image in images)
    # the recipes' own ranges differ: a colour scale per panel would not be the shared one
    assert len({(np.nanmin(image.get_array()), np.nanmax(image.get_array())) for image in images}) > 1
    colorbars = [ax for ax in fig.axes if ax.get_ylabel() == OBJECTIVE_LABEL]
    assert len(colorbars) == 1
    assert "Semi-structured 2:4" in fig.get_suptitle()
    s30 = figs["objective_heatmap_tiny-a_s30"]
    assert "Structured 30%" in s30.get_suptitle() and "structured:0.3" not in s30.get_suptitle()
    assert [ax.get_title() for ax in s30.axes if ax.get_images()] == ["SparseGPT", "Thanos (α=0.1)"]
    u50 = figs["objective_heatmap_tiny-a_u50"]
    assert "no objective recorded: Magnitude" in u50.get_suptitle()
    assert "Thanos (α=0), B=2048" in [ax.get_title() for ax in u50.axes]


def test_alpha_ablation_reference_lines_at_the_same_pattern(results, drawn):
    recipe_dir(results, "tiny-b", "wanda_2-4", "wanda", "2:4", ppl=15.4)
    frame, _ = _frames(results)
    figs = drawn(alpha_ablation_figures(frame))
    (ax,) = figs["alpha_ablation_tiny-a"].axes
    assert ax.get_title().startswith("Semi-structured 2:4")
    # tiny-a's Wanda 2:4 is not evaluated; SparseGPT at other sparsities is not a reference here
    assert _horizontal(ax) == {"Dense (10.00)": 10.0, "SparseGPT (21.00)": 21.0}
    thanos = next(line for line in ax.get_lines() if line.get_label().startswith("Thanos"))
    assert list(thanos.get_xdata()) == [0.0, 0.05, 0.1, 0.2]
    assert list(ax.get_xticks()) == [0.0, 0.05, 0.1, 0.2]
    (ax,) = figs["alpha_ablation_tiny-b"].axes
    assert _horizontal(ax) == {"Dense (7.00)": 7.0, "Wanda (15.40)": 15.4}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"Dense (7.00)", "Wanda (15.40)"} <= set(labels)


def test_pruning_time_lines_never_mix_sparsities_alphas_or_blocksizes(results, drawn):
    frame, layers = _frames(results)
    (fig,) = drawn(pruning_time_figures(layers, frame)).values()
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert list(panels) == [
        "Unstructured 30%",
        "Unstructured 50%",
        "Unstructured 60%",
        "Unstructured 70%",
        "Structured 30%",
        "2:4",
    ]
    recipes = frame[frame["method"] != "dense"]
    for title, ax in panels.items():
        pattern = recipes[
            [
                pattern_label(k, f, s) == title
                for k, f, s in zip(recipes["kind"], recipes["fraction"], recipes["sparsity"], strict=True)
            ]
        ]
        configs = {
            (m, a, "-" if math.isnan(b) else b)
            for m, a, b in zip(pattern["method"], pattern["alpha"], pattern["blocksize"], strict=True)
        }
        assert len(ax.get_lines()) == len(configs), title  # one line per configuration, none pooled
    u50 = [line.get_label() for line in panels["Unstructured 50%"].get_lines()]
    assert u50 == ["Magnitude", "SparseGPT", "Wanda"] + [f"Thanos (α=0), B={b}" for b in (8, 128, 512, 2048)]
    # each line is the median per layer size of its own recipes (both models where both have them)
    expected = {
        ("Unstructured 50%", "Thanos (α=0), B=8"): ["thanos_u50_b8"],
        ("Unstructured 50%", "Thanos (α=0), B=128"): ["thanos_u50"],
        ("2:4", "Thanos (α=0)"): ["thanos_2-4_a0"],
        ("2:4", "Thanos (2:4 + 10% dense rows)"): ["thanos_2-4_a0.1"],
        ("Unstructured 30%", "SparseGPT"): ["sparsegpt_u30"],
    }
    for (title, label), names in expected.items():
        line = next(line for line in panels[title].get_lines() if line.get_label() == label)
        mine = layers[layers["recipe"].isin(names)].groupby("numel")["seconds"].median()
        assert list(line.get_xdata()) == list(mine.index), (title, label)
        assert list(line.get_ydata()) == pytest.approx(list(mine)), (title, label)


def test_bold_marks_only_a_unique_best():
    table = Table(
        "t",
        "c",
        ["Method"],
        ["a", "b", "c", "d"],
        rows=[
            Row("dense", ["Dense"], {"a": 0.1, "b": 0.1}, compare=False),  # never compared
            Row("g1", ["x"], {"a": 1.0, "b": 2.0, "c": 1.001, "d": 5.0}),
            Row("g1", ["y"], {"a": 1.0, "b": 3.0, "c": 1.004}),
            Row("g2", ["z"], {"a": 5.0, "b": 1.0}),  # alone in its group
            Row("g2", ["w"], {"b": math.nan}),
        ],
    )
    # a: tie; c: 1.00 vs 1.00 as shown; d: one value in its group; g2: one value per column
    assert table.best() == {(1, "b")}
    md = table.to_markdown().splitlines()
    assert "| x | 1.00 | **2.00** | 1.00 | 5.00 |" in md
    assert "| Dense | 0.10 | 0.10 | - | - |" in md and "| z | 5.00 | 1.00 | - | - |" in md
    table.lower_is_better = False
    assert table.best() == {(2, "b")}


def test_perplexity_table_bold_needs_two_values(results, tmp_path):
    out = tmp_path / "tables"
    assert main(["tables", "--results", str(results), "--out-dir", str(out)]) == 0
    md = (out / "perplexity.md").read_text().splitlines()
    # structured 30 %: tiny-a compares SparseGPT 60 with Thanos 45; tiny-b has SparseGPT alone
    assert "| SparseGPT | Structured 30% | 30.0% | 60.00 | 42.00 |" in md
    assert "| Thanos (α=0.1) |  | 30.0% | **45.00** | - |" in md


def _markdown_rows(text: str) -> list[list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip().replace("**", "") for cell in row] for row in rows if ":--" not in row[0]]


def test_csv_shows_the_markdown_numbers(results, tmp_path):
    out = tmp_path / "tables"
    assert main(["tables", "--results", str(results), "--out-dir", str(out)]) == 0
    names = sorted(p.stem for p in out.glob("*.csv"))
    assert {"perplexity", "zeroshot_avg", "zeroshot_tasks_u50"} <= set(names)
    for name in names:
        with (out / f"{name}.csv").open(newline="", encoding="utf-8") as fh:
            csv_rows = list(csv.reader(fh))
        md_rows = _markdown_rows((out / f"{name}.md").read_text())
        assert len(csv_rows) == len(md_rows), name
        nkeys = 3  # Method/Model, Sparsity/Method, Achieved
        for csv_row, md_row in zip(csv_rows, md_rows, strict=True):
            assert csv_row[nkeys:] == md_row[nkeys:], name  # same text: same rounding, same "-"
            assert all(m in ("", c) for c, m in zip(csv_row[:nkeys], md_row[:nkeys], strict=True)), name
    text = (out / "perplexity.csv").read_text()
    assert "9.10" in text and "9.099" not in text  # tiny-b SparseGPT u50: 13 x 0.7 in floating point
    assert "12.50" in text and ",12.5," not in text


def test_figures_of_recipes_without_objective(tmp_path):
    """Magnitude records no objective: no heatmap, the other figures still made (it once raised KeyError)."""
    root = tmp_path / "results"
    write_json(root / "m" / "dense" / "eval" / "perplexity.json", {"ppl": 10.0})
    recipe_dir(root, "m", "magnitude_u50", "magnitude", "0.5", ppl=12.0)
    recipe_dir(root, "m", "magnitude_u60", "magnitude", "0.6", ppl=15.0)
    out = tmp_path / "figures"
    assert main(["figures", "--results", str(root), "--out-dir", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert "pruning_time_vs_layer_size.png" in names and "ppl_vs_sparsity_m_unstructured.png" in names
    assert not any(n.startswith("objective_heatmap") for n in names)


def test_recovered_recipes_are_rows_and_dashed_lines_of_their_own(tmp_path, drawn):
    """A recipe with ``recover`` is labelled ``... + recovery``, after its unrecovered row, and drawn as a
    dashed line in its method's colour beside the solid one."""
    root = tmp_path / "results"
    write_json(root / "demo" / "dense" / "eval" / "perplexity.json", {"ppl": 20.0})
    recover = {"epochs": 2, "lr": 0.003, "batch_size": 4, "holdout": 0.125, "target": "dense"}
    for pct, plain, recovered in ((50, 40.0, 30.0), (70, 300.0, 100.0)):
        recipe_dir(root, "demo", f"thanos_u{pct}", "thanos", str(pct / 100), ppl=plain, blocks=1)
        recipe_dir(root, "demo", f"thanos_u{pct}_rec", "thanos", str(pct / 100), ppl=recovered, blocks=1)
        report_file = root / "demo" / f"thanos_u{pct}_rec" / "model" / "pruning_report.json"
        report = json.loads(report_file.read_text())
        report["recipe"]["recover"] = recover
        write_json(report_file, report)
    assert main(["tables", "--results", str(root), "--out-dir", str(tmp_path / "tables")]) == 0
    table = (tmp_path / "tables" / "perplexity.md").read_text()
    assert table.index("| Thanos (α=0) |") < table.index("| Thanos (α=0) + recovery |")
    assert "| 100.00 |" in table.replace("**", "")
    frame, _ = _frames(root)
    (ax,) = drawn(ppl_vs_sparsity_figures(frame))["ppl_vs_sparsity_demo_unstructured"].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    plain, recovered = lines["Thanos (α=0)"], lines["Thanos (α=0) + recovery"]
    assert list(recovered.get_ydata()) == pytest.approx([50.0, 400.0])
    assert recovered.get_linestyle() == "--" and plain.get_linestyle() == "-"
    assert recovered.get_color() == plain.get_color()


def test_a_structural_recipe_shows_the_parameters_it_removed(tmp_path):
    """A recipe written smaller (neurons, heads, blocks) zeroes nothing: its Achieved cell is the parameters
    it removed."""
    root = tmp_path / "results"
    write_json(
        root / "tiny" / "dense" / "eval" / "perplexity.json", {"ppl": 10.0, "dataset": "wiki.test.raw"}
    )
    recipe_dir(root, "tiny", "thanos_n30", "thanos", "neurons:0.3", ppl=14.0)
    recipe_dir(root, "tiny", "thanos_u50", "thanos", "0.5", ppl=12.0)
    path = root / "tiny" / "thanos_n30" / "model" / "pruning_report.json"
    report = json.loads(path.read_text())
    report["overall_sparsity"] = 0.0  # the removed neurons are gone, not zeros
    report["compact"] = {"structure": "neurons", "parameters": {"original": 1000, "kept": 703}}
    write_json(path, report)
    (table,) = [t for t in build_tables(root) if t.name == "perplexity"]
    achieved = [row.keys[2] for row in table.rows]
    assert "29.7% params" in achieved and "50.0%" in achieved, achieved


def test_bits_per_byte_table_where_the_tokens_differ(tmp_path):
    """A bits-per-byte table joins the perplexity table where one model's variants cut the perplexity text
    into different numbers of tokens (a pruned vocabulary), and only there."""
    root = tmp_path / "results"
    dense = {"ppl": 10.0, "seqlen": 64, "dataset": "wiki.test.raw", "bits_per_byte": 0.9, "text_tokens": 500}
    write_json(root / "tiny" / "dense" / "eval" / "perplexity.json", dense)
    recipe_dir(root, "tiny", "thanos_n30", "thanos", "neurons:0.3")
    pruned = root / "tiny" / "thanos_n30" / "eval" / "perplexity.json"
    write_json(pruned, dense | {"ppl": 14.0, "bits_per_byte": 1.1})
    assert "bits_per_byte" not in [t.name for t in build_tables(root)]  # the same tokens: ppl compares
    write_json(pruned, dense | {"ppl": 14.0, "bits_per_byte": 1.1, "text_tokens": 530})
    (table,) = [t for t in build_tables(root) if t.name == "bits_per_byte"]
    assert [row.values["tiny"] for row in table.rows] == [0.9, 1.1]
    assert "Bits per byte on wiki.test.raw" in table.caption


def test_a_model_is_named_by_its_hub_id_where_its_path_gives_one(tmp_path: Path) -> None:
    """Cards and ``sparsity.json`` name a model by its hub id: given as one, or a snapshot of the hub's cache
    (``huggingface_hub``'s layout: ``models--ORG--NAME/snapshots/REVISION``); any other directory by its
    name."""
    from thanos.recipes.labels import public_name

    snapshot = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M" / "snapshots" / "93efa2f097d58c2a"
    snapshot.mkdir(parents=True)
    assert public_name(snapshot) == "HuggingFaceTB/SmolLM2-135M"
    assert public_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert public_name(tmp_path / "hf") == "hf" and public_name(tmp_path / "snapshots" / "x") == "x"


def test_a_size_s_pattern_in_a_file_name_has_no_space():
    """A size's row in the tables (``params:0.2: neurons:0.37``, its sparsity label) named a zero-shot table
    ``zeroshot_tasks_params0.2 neurons0.37.csv``."""
    assert pattern_slug("combined", 0.2, "params:0.2: neurons:0.37") == "params0.2_neurons0.37"
    assert pattern_slug("combined", 0.3, "depth:1+neurons:0.3") == "depth1+neurons0.3"
    assert pattern_slug("nm", 0.5, "2:4") == "2-4"
