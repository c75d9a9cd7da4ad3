"""Perplexity and zero-shot of one model: two evaluations that each load the model (the rules
``perplexity`` and ``zeroshot``) against one that loads it once (rule ``evaluate``), in one warm process
(as the workflow's jobs run, forked from a worker that has imported torch and transformers), alternating,
``--repeats`` times each.

    python bench/evaluate_once.py --model results/demo/model --source results/demo/data/test.jsonl \\
        --tasks demo_wordorder --include-path results/demo/data/tasks
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--ppl-batch-size", type=int, default=8)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--include-path", default=None)
    parser.add_argument("--zeroshot-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from thanos.evaluation.loading import load_model, set_offline

    set_offline()
    from thanos.evaluation.perplexity import evaluate_perplexity
    from thanos.evaluation.zeroshot import evaluate_zeroshot

    ppl = {"source": args.source, "seqlen": args.seqlen, "batch_size": args.ppl_batch_size, "device": "cpu"}
    zs = {"tasks": args.tasks, "include_path": args.include_path, "batch_size": args.zeroshot_batch_size}
    zs["device"] = "cpu"

    def separate() -> tuple[float, float]:
        a = evaluate_perplexity(args.model, progress=False, **ppl).ppl
        b = evaluate_zeroshot(args.model, **zs)["mean_acc"]
        return a, b

    def once() -> tuple[float, float]:
        loaded = load_model(args.model, device="cpu")
        a = evaluate_perplexity(args.model, progress=False, loaded=loaded, **ppl).ppl
        b = evaluate_zeroshot(args.model, loaded=loaded, **zs)["mean_acc"]
        return a, b

    separate()  # warm-up: lm-eval's first task load and the first model load are not what a job pays
    times: dict[str, list[float]] = {"separate (two loads)": [], "evaluate (one load)": []}
    results = set()
    for _ in range(args.repeats):
        for label, run in zip(times, (separate, once), strict=True):
            start = time.perf_counter()
            results.add(run())
            times[label].append(time.perf_counter() - start)
    for label, values in times.items():
        print(
            f"{label:22} median {statistics.median(values):6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})"
        )
    print(f"results identical: {len(results) == 1} {sorted(results)}")


if __name__ == "__main__":
    main()
