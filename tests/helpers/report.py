"""Synthetic (fake but well-formed) results directories for the tables and figures."""

from __future__ import annotations

import functools
import json
from pathlib import Path

LAYERS = ["self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"]


SHAPES = {
    "self_attn.q_proj": [64, 64],
    "self_attn.o_proj": [64, 64],
    "mlp.up_proj": [256, 64],
    "mlp.down_proj": [64, 256],
}


TASKS = ["winogrande", "openbookqa", "boolq", "piqa", "hellaswag", "arc_easy", "arc_challenge"]


METHOD_COST = {"magnitude": 0.1, "wanda": 0.2, "sparsegpt": 1.0, "thanos": 0.8}


METHOD_OBJECTIVE = {"wanda": 3.0, "sparsegpt": 1.2, "thanos": 1.0}  # magnitude records no objective


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def zeroshot_results(base: float, tasks=TASKS) -> dict:
    per_task = {
        t: {"acc": base + 0.01 * i, "acc_stderr": 0.01, "acc_norm": base + 0.02, "acc_norm_stderr": 0.01}
        for i, t in enumerate(tasks)
    }
    return {"tasks": per_task, "mean_acc": sum(v["acc"] for v in per_task.values()) / len(per_task)}


def recipe_dir(
    root, model, name, method, sparsity, ppl=None, zs=None, alpha=0.0, blocksize=None, blocks=3, shapes=SHAPES
):
    """A recipe directory: pruning_report.json (recipe + per-layer stats of the layers ``shapes`` names)
    and the evaluations given.
    Seconds and objectives depend on the method, sparsity, alpha and block size, so that a figure pooling
    recipes (or scaling each recipe's heatmap on its own) shows other numbers than one that does not."""
    fraction = 0.5 if ":" in sparsity and "structured" not in sparsity else float(sparsity.split(":")[-1])
    variant = (1 + fraction) * (1 + alpha) * (1 + (blocksize or 0) / 4096)
    layers = []
    for block in range(blocks):
        for j, (layer, (rows, cols)) in enumerate(shapes.items()):
            objective = None
            if method != "magnitude":
                objective = 10.0 ** (block + j / 2) * METHOD_OBJECTIVE[method] * variant
            layers.append(
                {
                    "block": block,
                    "layer": layer,
                    "achieved_sparsity": 0.5,
                    "objective": objective,
                    "seconds": METHOD_COST[method] * rows * cols * 1e-5 * (1 + 0.1 * block) * variant,
                    "device": "cpu",
                    "shape": [rows, cols],
                }
            )
    recipe = {"name": name, "method": method, "sparsity": sparsity, "blocksize": blocksize, "alpha": alpha}
    dense_rows = alpha if sparsity == "2:4" else 0.0  # n:m keeps a fraction alpha of the rows dense
    report = {
        "recipe": recipe | {"damp": 0.01, "chain": "sequential"},
        "layers": layers,
        "overall_sparsity": fraction * (1 - dense_rows),
    }
    write_json(root / model / name / "model" / "pruning_report.json", report)
    if ppl is not None:
        write_json(
            root / model / name / "eval" / "perplexity.json",
            {"ppl": ppl, "seqlen": 64, "dataset": "wiki.test.raw"},
        )
    if zs is not None:
        write_json(root / model / name / "eval" / "zeroshot.json", zeroshot_results(zs))


def fake_results(root: Path) -> Path:
    """Two models; tiny-b lacks several recipes and evaluations; a dense zero-shot is missing."""
    for model, scale in (("tiny-a", 1.0), ("tiny-b", 0.7)):
        write_json(
            root / model / "dense" / "eval" / "perplexity.json",
            {"ppl": 10.0 * scale, "dataset": "wiki.test.raw"},
        )
        write_json(root / model / "calib" / "x.txt", "not a recipe")
        r = functools.partial(recipe_dir, root, model)
        r("magnitude_u50", "magnitude", "0.5", ppl=40.0 * scale, zs=0.40)
        r("wanda_u50", "wanda", "0.5", ppl=14.0 * scale, zs=0.46)
        r("sparsegpt_u50", "sparsegpt", "0.5", ppl=13.0 * scale, zs=0.47)
        r("thanos_u50", "thanos", "0.5", ppl=12.5 * scale, zs=0.465, blocksize=128)
        r("thanos_2-4_a0", "thanos", "2:4", ppl=20.0 * scale, zs=0.42, blocksize=512)
        r("thanos_2-4_a0.1", "thanos", "2:4", ppl=18.0 * scale, zs=0.43, alpha=0.1, blocksize=512)
        r("sparsegpt_s30", "sparsegpt", "structured:0.3", ppl=60.0 * scale, zs=0.37)
        if model == "tiny-a":
            write_json(root / model / "dense" / "eval" / "zeroshot.json", zeroshot_results(0.50))
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
