"""Wall time of ``thanos prune-model --sparsity depth:K`` with its fitted maps (the default) against
``--no-block-map`` (the blocks left out, as before maps), each in a process of its own with a fresh working
directory, alternating, the median of ``--rounds``.

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    OMP_WAIT_POLICY=PASSIVE python bench/depth_time.py --model smollm2 --data demo-data --work bench-depth
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the model directory (python -m thanos real-model)")
    parser.add_argument("--data", required=True, help="demo data directory (python -m thanos demo-data)")
    parser.add_argument("--work", required=True, help="working directory (emptied before each run)")
    parser.add_argument("--depth", default="6", help="K of depth:K")
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"maps": [], "nomap": []}
    for round_ in range(args.rounds):
        for name, extra in (("nomap", ["--no-block-map"]), ("maps", [])):
            work = Path(args.work) / name
            shutil.rmtree(work, ignore_errors=True)
            command = [sys.executable, "-m", "thanos", "prune-model", "--model", args.model]
            command += ["--method", "thanos", "--sparsity", f"depth:{args.depth}", "--device", "cpu"]
            command += [
                "--calibration",
                str(Path(args.data) / "calib.jsonl"),
                "--nsamples",
                str(args.nsamples),
            ]
            command += [
                "--seqlen",
                str(args.seqlen),
                "--workdir",
                str(work / "workdir"),
                "--out",
                str(work / "out"),
            ]
            started = time.perf_counter()
            run = subprocess.run([*command, *extra], capture_output=True, text=True)
            seconds = time.perf_counter() - started
            if run.returncode != 0:
                sys.exit(f"{' '.join(command + extra)} failed:\n{run.stderr[-3000:]}")
            times[name].append(seconds)
            print(f"round {round_} {name}: {seconds:.1f} s", flush=True)
    maps, nomap = statistics.median(times["maps"]), statistics.median(times["nomap"])
    print(f"depth:{args.depth}: with maps {maps:.1f} s, without {nomap:.1f} s: {maps / nomap:.2f}x")


if __name__ == "__main__":
    main()
