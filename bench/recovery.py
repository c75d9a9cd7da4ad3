"""How much of the perplexity gap to the dense model recovery closes, and what it costs per block.

For each recipe, ``thanos prune-model`` without and with ``--recover`` (its options from the command line)
in one working directory (the calibration and the dense stores shared), then the perplexity of both and of
the dense model on held-out text (``thanos perplexity --dtype float32``), and

    gap closed = (ln p_pruned - ln p_recovered) / (ln p_pruned - ln p_dense)

Cost: seconds per block of the chain step (capture, prune and propagate of every block, from the run's
record of its steps) without recovery, against the recovery's own seconds per block (each block's
``recovery.json``); the whole recovered command's seconds more than the plain one's, per block (the dense
targets' forward passes and the recovered chain included; the plain run computed the shared calibration
first, so this is a little generous to recovery only where the plain run paid for what both use); the
peak RSS of the recovery.

    OMP_WAIT_POLICY=PASSIVE python bench/recovery.py --model results/real-llm/model \\
        --calibration results/demo/data/calib.jsonl --heldout results/demo/data/test.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

RECIPES = {  # label: prune-model options
    "Thanos 70 %": ["--method", "thanos", "--sparsity", "0.7"],
    "SparseGPT 70 %": ["--method", "sparsegpt", "--sparsity", "0.7"],
    "Thanos 2:4 (alpha 0)": ["--method", "thanos", "--sparsity", "2:4"],
    "Thanos neurons:0.3": ["--method", "thanos", "--sparsity", "neurons:0.3"],
}


def thanos(*args: str | Path) -> float:
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "thanos", *map(str, args)], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"thanos {' '.join(map(str, args))} failed:\n{run.stderr[-4000:]}")
    return time.monotonic() - started


def perplexity(model: Path, args: argparse.Namespace) -> float:
    out = model.parent / f"{model.name}.ppl.json"
    if not out.exists():
        thanos("perplexity", "--model", model, "--source", args.heldout, "--seqlen", args.eval_seqlen,
               "--max-windows", args.max_windows, "--dtype", "float32", "--device", "cpu", "--no-progress",
               "--out", out)  # fmt: skip
    return json.loads(out.read_text())["ppl"]


def chain_seconds(workdir: Path, recipe: str) -> float:
    """The chain step's seconds of ``recipe`` (its log's ``prune every block ... done in`` line)."""
    log = (workdir / "logs" / f"{recipe}.log").read_text()
    lines = [line for line in log.splitlines() if f"prune every block ({recipe}): done in" in line]
    return float(lines[-1].rsplit("done in ", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--calibration", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--eval-seqlen", type=int, default=512)
    parser.add_argument("--max-windows", type=int, default=16)
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument(
        "--options", default="", help="prune-model's recovery options, quoted: --options '--recover-epochs 4'"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/out/recovery"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = args.out / "work"
    common = ["--model", args.model, "--calibration", args.calibration, "--nsamples", args.nsamples,
              "--seqlen", args.seqlen, "--device", "cpu", "--workdir", workdir]  # fmt: skip
    dense_out = args.out / "dense.ppl.json"
    if not dense_out.exists():
        thanos("perplexity", "--model", args.model, "--source", args.heldout, "--seqlen", args.eval_seqlen,
               "--max-windows", args.max_windows, "--dtype", "float32", "--device", "cpu", "--no-progress",
               "--out", dense_out)  # fmt: skip
    dense = json.loads(dense_out.read_text())["ppl"]
    rows = []
    for label in args.recipes:
        slug = label.split()[0].lower() + "-" + label.split()[1].replace(":", "").replace("%", "")
        tag = "".join(args.options.split()).replace("--recover-", "-")
        plain, rec = args.out / f"{slug}-plain", args.out / f"{slug}-rec{tag}"
        plain_s = thanos("prune-model", *common, *RECIPES[label], "--out", plain)
        rec_s = thanos(
            "prune-model", *common, *RECIPES[label], "--recover", *shlex.split(args.options), "--out", rec
        )
        p_plain, p_rec = perplexity(plain, args), perplexity(rec, args)
        closed = (math.log(p_plain) - math.log(p_rec)) / (math.log(p_plain) - math.log(dense))
        report = json.loads((rec / "pruning_report.json").read_text())
        blocks = report["recovery"]["blocks"]
        plain_recipe = json.loads((plain / "pruning_report.json").read_text())["recipe"]["name"]
        per_block = chain_seconds(workdir, plain_recipe) / len(blocks)
        recover_s = sum(b["seconds"] for b in blocks) / len(blocks)
        peak = max(b["peak_rss_mib"] for b in blocks)
        extra = (rec_s - plain_s) / len(blocks)
        rows.append((label, p_plain, p_rec, closed, per_block, recover_s, extra, peak))
        print(f"{label}: {p_plain:.2f} -> {p_rec:.2f} ({100 * closed:.1f} % of the gap closed)", flush=True)
    options = args.options or "defaults"
    print(
        f"\n{args.model}: dense perplexity {dense:.2f} ({args.heldout.name}, {args.max_windows} windows of "
        f"{args.eval_seqlen}); {args.nsamples} x {args.seqlen} calibration; recovery: {options}"
    )
    print("| recipe | pruned ppl | recovered ppl | gap closed | prune s/block | recovery s/block | ratio "
          "| command s/block more | peak RSS MiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for label, p_plain, p_rec, closed, per_block, recover_s, extra, peak in rows:
        print(f"| {label} | {p_plain:.2f} | {p_rec:.2f} | {100 * closed:.1f} % | {per_block:.2f} | "
              f"{recover_s:.2f} | {recover_s / per_block:.2f} | {extra:.2f} | {peak:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
