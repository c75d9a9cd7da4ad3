"""The disk one ``thanos prune-model`` run takes, estimated against measured, with ``--keep all`` (every
intermediate, the behaviour before retention) and ``--keep needed`` (the default).

    OMP_WAIT_POLICY=PASSIVE python bench/workdir_disk.py --model results/demo/model \\
        --calibration results/demo/data/calib.jsonl --nsamples 32 --seqlen 256

For each retention it runs the command in a fresh working directory, samples the working directory's size
(the bytes of its files) every 0.01 s while it runs, and prints the estimate the command printed before it
started (``thanos.runner.disk``) beside the measured peak and the size after the run, and the size of
``--out``. The run's own seconds show what deleting the stores costs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from thanos.runner.disk import size_text
from thanos.stages.describe.provenance import path_bytes

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def parse_size(text: str) -> float:
    number, unit = text.split()
    return float(number) * UNITS[unit]


def run(args: argparse.Namespace, keep: str, root: Path) -> dict[str, float]:
    workdir, out = root / f"work-{keep}", root / f"out-{keep}"
    command = [
        sys.executable, "-m", "thanos", "prune-model", "--model", args.model, "--method", args.method,
        "--sparsity", args.sparsity, "--out", str(out), "--calibration", args.calibration,
        "--nsamples", str(args.nsamples), "--seqlen", str(args.seqlen), "--workdir", str(workdir),
        "--keep", keep,
    ]  # fmt: skip
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            if workdir.is_dir():
                peak = max(peak, path_bytes(workdir))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if result.returncode:
        raise SystemExit(result.stderr)
    line = re.search(r"disk: the workdir up to (.+?), (.+?) after the run", result.stderr)
    assert line is not None, result.stderr
    after = path_bytes(workdir)
    return {
        "estimated peak": parse_size(line.group(1)),
        "measured peak": max(peak, after),
        "estimated after": parse_size(line.group(2)),
        "measured after": after,
        "out": path_bytes(out),
        "seconds": seconds,
    }


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--calibration", required=True)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--tmp", default=None, help="where the runs write (default: a temporary directory)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        rows = {keep: run(args, keep, Path(tmp)) for keep in ("all", "needed")}
    print(f"{args.model}: {args.method} {args.sparsity}, {args.nsamples} x {args.seqlen} calibration tokens")
    names = list(rows["all"])
    print(f"{'--keep':<8}" + "".join(f"{name:>17}" for name in names))
    for keep, row in rows.items():
        cells = [f"{row[n]:.1f} s" if n == "seconds" else size_text(row[n]) for n in names]
        print(f"{keep:<8}" + "".join(f"{cell:>17}" for cell in cells))
    for keep, row in rows.items():
        for what in ("peak", "after"):
            error = row[f"estimated {what}"] / row[f"measured {what}"] - 1
            print(f"--keep {keep}: estimated {what} {100 * error:+.1f} % of measured")


if __name__ == "__main__":
    main()
