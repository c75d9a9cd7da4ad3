"""A size search's measurement of a candidate (``thanos.evaluation.heldout.measure``) at a git revision and
today, alternating, in one process: the dense model's side once per version, then each candidate measured
by each version, its seconds and loss printed, then each version's median seconds.

The held-out texts are a search's: ``--windows`` windows of ``--seqlen`` tokens of the last quarter of the
calibration's documents (its seed). Run it alone on the machine (OMP_WAIT_POLICY=PASSIVE).

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    python -m thanos prune-model --model smollm2 --method thanos --sparsity neurons:0.3 --out n30 ...
    OMP_WAIT_POLICY=PASSIVE python bench/heldout_measure.py --model smollm2 --candidates n30,v50 \\
        --calibration demo-data/calib.jsonl --before ce27a38
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from revisions import module_at

import thanos.evaluation.heldout as today
from thanos.data.calibration import text_documents


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", required=True, help="the dense model's directory")
    parser.add_argument("--candidates", required=True, help="pruned models' directories, comma-separated")
    parser.add_argument("--calibration", required=True, help="the calibration documents (jsonl)")
    parser.add_argument("--before", required=True, help="the git revision compared with today's code")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    documents = text_documents(args.calibration, "text")
    held = documents[len(documents) - len(documents) // 4 :]
    texts = today.held_out_texts(args.model, held, args.windows, args.seqlen, 0)
    versions = {"before": module_at(args.before, "thanos/evaluation/heldout.py"), "after": today}
    dtype = getattr(torch, args.dtype)
    seconds: dict[str, list[float]] = {name: [] for name in versions}
    for repeat in range(args.repeats):
        for name, module in versions.items():
            began = time.monotonic()
            reference = module.Reference(args.model, texts, "cpu", dtype)
            reference.compute()
            print(f"{name} repeat {repeat}: the dense side {time.monotonic() - began:.1f} s")
            for candidate in args.candidates.split(","):
                began = time.monotonic()
                measured = module.measure(args.model, candidate, texts, "cpu", reference)
                took = time.monotonic() - began
                seconds[name].append(took)
                kl = "-" if measured["kl"] is None else f"{measured['kl']:.4f}"
                print(f"{name} {candidate}: {took:.1f} s, loss {measured['loss']:.4f}, KL {kl}")
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.1f} s a measurement ({len(values)} measured)")


if __name__ == "__main__":
    main()
