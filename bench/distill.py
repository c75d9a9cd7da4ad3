"""Distillation on a real model: the share of the log-perplexity gap to dense it closes, seconds, tokens/s.

For each pruned model given (``--pruned LABEL=DIR``, e.g. the outputs of ``bench/structures.py``),
``thanos distill`` toward ``--dense`` on ``--tokens`` tokens of ``DATA/train.jsonl`` (the demo's training
articles), then the perplexity of the dense, pruned and distilled models on the first ``--ppl-windows``
windows of 512 tokens of ``DATA/test.jsonl`` (articles never trained or calibrated on), as
``bench/structures.py`` measures it. The gap closed is ``1 - log(distilled / dense) / log(pruned / dense)``.

    OMP_WAIT_POLICY=PASSIVE python bench/distill.py --dense smollm2 --data demo-data --work bench-distill \\
        --pruned neurons:0.3=bench-struct/out/neurons0.3 --tokens 131072

Options after ``--`` go to ``thanos distill`` as they are (``-- --lr 3e-4 --batch-size 4``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path


def perplexity(model: Path, data: Path, windows: int) -> float:
    from thanos.evaluation.perplexity import evaluate_perplexity

    source = str(data / "test.jsonl")
    return evaluate_perplexity(
        str(model), source, seqlen=512, device="cpu", max_windows=windows, progress=False
    ).ppl


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dense", type=Path, required=True, help="the dense model's directory")
    parser.add_argument("--data", type=Path, required=True, help="the demo's data (train.jsonl, test.jsonl)")
    parser.add_argument(
        "--work", type=Path, required=True, help="where the distilled models and checkpoints go"
    )
    parser.add_argument("--pruned", action="append", required=True, help="LABEL=DIR of a pruned model")
    parser.add_argument("--tokens", type=int, default=131072, help="the token budget (default 131072)")
    parser.add_argument(
        "--ppl-windows", type=int, default=16, help="windows of 512 tokens scored (default 16)"
    )
    parser.add_argument("extra", nargs="*", help="after --: options of thanos distill")
    args = parser.parse_args()
    from thanos.cli import main as thanos

    dense = perplexity(args.dense, args.data, args.ppl_windows)
    rows = []
    for entry in args.pruned:
        label, _, directory = entry.partition("=")
        slug = label.replace(":", "").replace("+", "_")
        out, work = args.work / slug, args.work / f"{slug}-work"
        started = time.monotonic()
        command = ["distill", "--student", directory, "--teacher", str(args.dense), "--source"]
        command += [str(args.data / "train.jsonl"), "--tokens", str(args.tokens), "--out", str(out)]
        code = thanos([*command, "--work", str(work), "--device", "cpu", "--no-progress", *args.extra])
        if code:
            raise SystemExit(f"thanos distill failed for {label}")
        wall = time.monotonic() - started
        record = json.loads((out / "distillation.json").read_text())
        pruned, distilled = (
            perplexity(Path(directory), args.data, args.ppl_windows),
            perplexity(out, args.data, args.ppl_windows),
        )
        closed = 1 - math.log(distilled / dense) / math.log(pruned / dense)
        rows.append((label, pruned, distilled, closed, record, wall))
        print(
            f"{label}: {pruned:.2f} -> {distilled:.2f} ({100 * closed:.1f} % of the gap closed)", flush=True
        )
    print(
        f"\n{args.dense.name}: dense perplexity {dense:.2f} (test.jsonl, {args.ppl_windows} windows of 512); "
        f"{args.tokens:,} tokens of train.jsonl; thanos distill {' '.join(args.extra) or '(defaults)'}; "
        f"{os.cpu_count()} CPUs"
    )
    print(
        "| recipe | pruned ppl | distilled ppl | gap closed | steps | tokens | held-out KL | s | tokens/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, pruned, distilled, closed, record, wall in rows:
        kl = f"{record['heldout'][0]['kl']:.3f} -> {record['best']['kl']:.3f}"
        print(
            f"| {label} | {pruned:.2f} | {distilled:.2f} | {100 * closed:.1f} % | {record['steps']} | "
            f"{record['tokens']:,} | {kl} | {wall:.0f} | {record['tokens_per_second']:.0f} |"
        )


if __name__ == "__main__":
    main()
