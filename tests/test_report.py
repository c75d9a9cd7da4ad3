"""Tables and figures from partial, synthetic (fake but well-formed) results."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from thanos.cli import main
from thanos.report.collect import collect, collect_layers
from thanos.report.tables import build_tables

LAYERS = ["self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"]
SHAPES = {
    "self_attn.q_proj": [64, 64],
    "self_attn.o_proj": [64, 64],
    "mlp.up_proj": [256, 64],
    "mlp.down_proj": [64, 256],
}
TASKS = ["winogrande", "openbookqa", "boolq", "piqa", "hellaswag", "arc_easy", "arc_challenge"]
METHOD_COST = {"magnitude": 0.1, "wanda": 0.2, "sparsegpt": 1.0, "thanos": 0.8}


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def _zeroshot(base: float, tasks=TASKS) -> dict:
    per_task = {
        t: {"acc": base + 0.01 * i, "acc_stderr": 0.01, "acc_norm": base + 0.02, "acc_norm_stderr": 0.01}
        for i, t in enumerate(tasks)
    }
    return {"tasks": per_task, "mean_acc": sum(v["acc"] for v in per_task.values()) / len(per_task)}


def _recipe(root, model, name, method, sparsity, ppl=None, zs=None, alpha=0.0, blocksize=None, blocks=3):
    """A recipe directory: pruning_report.json (recipe + per-layer stats) and the evaluations given."""
    layers = []
    for block in range(blocks):
        for j, layer in enumerate(LAYERS):
            rows, cols = SHAPES[layer]
            objective = None if method == "magnitude" else 10.0 ** (block + j / 2) * (1 + alpha)
            layers.append(
                {
                    "block": block,
                    "layer": layer,
                    "achieved_sparsity": 0.5,
                    "objective": objective,
                    "seconds": METHOD_COST[method] * rows * cols * 1e-5 * (1 + 0.1 * block),
                    "device": "cpu",
                    "shape": [rows, cols],
                }
            )
    recipe = {"name": name, "method": method, "sparsity": sparsity, "blocksize": blocksize, "alpha": alpha}
    fraction = 0.5 if ":" in sparsity and "structured" not in sparsity else float(sparsity.split(":")[-1])
    dense_rows = alpha if sparsity == "2:4" else 0.0  # n:m keeps a fraction alpha of the rows dense
    report = {
        "recipe": recipe | {"damp": 0.01, "chain": "sequential"},
        "layers": layers,
        "overall_sparsity": fraction * (1 - dense_rows),
    }
    _write(root / model / name / "model" / "pruning_report.json", report)
    if ppl is not None:
        _write(
            root / model / name / "eval" / "perplexity.json",
            {"ppl": ppl, "seqlen": 64, "dataset": "wiki.test.raw"},
        )
    if zs is not None:
        _write(root / model / name / "eval" / "zeroshot.json", _zeroshot(zs))


def fake_results(root: Path) -> Path:
    """Two models; tiny-b lacks several recipes and evaluations; a dense zero-shot is missing."""
    for model, scale in (("tiny-a", 1.0), ("tiny-b", 0.7)):
        _write(
            root / model / "dense" / "eval" / "perplexity.json",
            {"ppl": 10.0 * scale, "dataset": "wiki.test.raw"},
        )
        _write(root / model / "calib" / "x.txt", "not a recipe")
        r = functools.partial(_recipe, root, model)
        r("magnitude_u50", "magnitude", "0.5", ppl=40.0 * scale, zs=0.40)
        r("wanda_u50", "wanda", "0.5", ppl=14.0 * scale, zs=0.46)
        r("sparsegpt_u50", "sparsegpt", "0.5", ppl=13.0 * scale, zs=0.47)
        r("thanos_u50", "thanos", "0.5", ppl=12.5 * scale, zs=0.465, blocksize=128)
        r("thanos_2-4_a0", "thanos", "2:4", ppl=20.0 * scale, zs=0.42, blocksize=512)
        r("thanos_2-4_a0.1", "thanos", "2:4", ppl=18.0 * scale, zs=0.43, alpha=0.1, blocksize=512)
        r("sparsegpt_s30", "sparsegpt", "structured:0.3", ppl=60.0 * scale, zs=0.37)
        if model == "tiny-a":
            _write(root / model / "dense" / "eval" / "zeroshot.json", _zeroshot(0.50))
            r("sparsegpt_2-4", "sparsegpt", "2:4", ppl=21.0, zs=0.41)
            r("wanda_2-4", "wanda", "2:4", ppl=None, zs=None)  # pruned, not evaluated yet
            r("thanos_s30_a0.1", "thanos", "structured:0.3", ppl=45.0, zs=None, alpha=0.1)
            # sparsity sweeps (Figure 1), block-size and alpha ablations
            for p, ppl in (("0.3", 9.0), ("0.6", 30.0), ("0.7", 300.0)):
                r(f"thanos_u{int(float(p) * 100)}", "thanos", p, ppl=ppl, blocksize=128)
                r(f"sparsegpt_u{int(float(p) * 100)}", "sparsegpt", p, ppl=ppl * 1.2)
            for b, ppl in ((8, 12.7), (512, 12.4), (2048, 12.3)):
                r(f"thanos_u50_b{b}", "thanos", "0.5", ppl=ppl, blocksize=b)
            for a, ppl in ((0.05, 18.5), (0.2, 17.5)):
                r(f"thanos_2-4_a{a}", "thanos", "2:4", ppl=ppl, alpha=a, blocksize=512)
    (root / "tables").mkdir(parents=True, exist_ok=True)  # output dirs and logs are not models
    (root / "logs").mkdir(exist_ok=True)
    return root


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


def test_figures_from_partial_results(results, tmp_path):
    out = tmp_path / "figures"
    assert main(["figures", "--results", str(results), "--out-dir", str(out)]) == 0
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
    # one heatmap per recipe with objectives: magnitude has none, so none is drawn for it
    heatmaps = {s for s in stems if s.startswith("objective_heatmap_")}
    assert "objective_heatmap_tiny-a_thanos_2-4_a0.1" in heatmaps
    assert not any("magnitude" in s for s in heatmaps)
    frame, _ = collect(results)
    calibrated = frame[frame["method"].isin(["wanda", "sparsegpt", "thanos"])]
    assert len(heatmaps) == len(calibrated)
    for path in out.iterdir():
        head = path.read_bytes()[:8]
        assert head.startswith(b"\x89PNG" if path.suffix == ".png" else b"%PDF"), path


def test_figures_without_results(tmp_path):
    (tmp_path / "results").mkdir()
    out = tmp_path / "figures"
    assert main(["figures", "--results", str(tmp_path / "results"), "--out-dir", str(out)]) == 0
    assert list(out.iterdir()) == []
    assert main(["figures", "--results", str(tmp_path / "nowhere"), "--out-dir", str(out)]) == 2
