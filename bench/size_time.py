"""What a size costs against its chosen recipe pruned alone, in rounds that alternate the two (the machine is
shared and its speed drifts by tens of percent within an hour: a ratio of two commands run minutes apart
in the same round is what can be compared), each command a fresh process as a user runs it:

1. ``--sparsity params:P`` (``--size``) from an empty working directory, timed;
2. its chosen recipe (``search.json``'s ``chosen``) alone, from an empty working directory, timed;
3. with ``--later``: each later size (``params:0.15``, ``params:0.35``) in the size's working directory, and
   its chosen recipe alone;
4. with ``--together``: the sizes in one command (``params:0.15,0.25,0.35``) from an empty working
   directory, against the round's recipe of 2.

Each round's seconds and ratios are printed, then each ratio's median over the rounds. Run it alone on the
machine; the working directories are deleted after each round (``--keep`` keeps the last).

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    OMP_WAIT_POLICY=PASSIVE python bench/size_time.py --model smollm2 --data demo-data --work size-time \\
        --rounds 3 --later 0.15,0.35 --together 0.15,0.25,0.35
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def prune(args: argparse.Namespace, sparsity: str, out: Path, workdir: Path, log: Path) -> float:
    """``thanos prune-model`` with ``sparsity`` to ``out`` in ``workdir`` (its output to ``log``): its
    seconds; a failure stops the bench with its log's last lines."""
    command = [
        sys.executable, "-m", "thanos", "prune-model", "--model", str(args.model), "--method", "thanos",
        "--sparsity", sparsity, "--out", str(out), "--calibration", str(args.data / "calib.jsonl"),
        "--nsamples", str(args.nsamples), "--seqlen", str(args.seqlen), "--device", "cpu",
        "--cores", str(args.cores), "--workdir", str(workdir),
    ]  # fmt: skip
    began = time.monotonic()
    with log.open("w") as stream:
        done = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - began
    if done.returncode:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{tail}")
    return seconds


def chosen(out: Path) -> str:
    """The recipe a size chose (its ``search.json``)."""
    return json.loads((out / "search.json").read_text())["chosen"]


def one_round(args: argparse.Namespace, where: Path) -> dict[str, float]:
    """One round's ratios (and seconds), printed as they are measured."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    found: dict[str, float] = {}

    def timed(name: str, sparsity: str, out: str, workdir: str) -> float:
        seconds = prune(args, sparsity, where / out, where / workdir, where / f"{out}.log")
        print(f"  {name}: {sparsity} {seconds:.1f} s", flush=True)
        return seconds

    size = f"params:{args.size}"
    first = timed("size from empty", size, "size", "w")
    recipe = chosen(where / "size")
    alone = timed("its recipe alone", recipe, "alone", "wa")
    found[f"{size} from empty / its recipe alone ({recipe})"] = first / alone
    for later in filter(None, args.later.split(",")):
        seconds = timed("later size, same workdir", f"params:{later}", f"later{later}", "w")
        recipe = chosen(where / f"later{later}")
        its_alone = timed("its recipe alone", recipe, f"alone{later}", f"wa{later}")
        found[f"params:{later} after {size} / its recipe alone ({recipe})"] = seconds / its_alone
    if args.together:
        sizes = f"params:{args.together}"
        seconds = timed("sizes in one command", sizes, "together", "wt")
        found[f"{sizes} from empty / {size}'s recipe alone"] = seconds / alone
    for name, ratio in found.items():
        print(f"  {ratio:.2f}x  {name}", flush=True)
    return found


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", required=True, type=Path, help="the dense model's directory")
    parser.add_argument("--data", required=True, type=Path, help="the demo data (its calib.jsonl)")
    parser.add_argument("--work", required=True, type=Path, help="where the rounds write (deleted each)")
    parser.add_argument("--size", default="0.25", help="the size timed from empty (params:SIZE)")
    parser.add_argument("--later", default="", help="sizes run after it in its working directory")
    parser.add_argument("--together", default="", help="sizes in one command from empty (0.15,0.25,0.35)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the last round's directories")
    args = parser.parse_args()

    rounds = []
    for index in range(args.rounds):
        print(f"round {index + 1} of {args.rounds}", flush=True)
        rounds.append(one_round(args, args.work))
        if not args.keep or index + 1 < args.rounds:
            shutil.rmtree(args.work)
    print(f"median over {args.rounds} rounds:")
    for name in rounds[0]:
        ratios = [found[name] for found in rounds]
        print(f"  {statistics.median(ratios):.2f}x  {name}  ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
