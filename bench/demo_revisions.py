"""The demo's first run after training, at two git revisions, alternating: what a change costs or saves.

Each repeat clones the repository at ``--before`` and at ``--after`` (in that order, or the reverse with
``--after-first``), gives each clone the same finished demo corpus and trained model (copied with their
time stamps, so Snakemake runs neither ``demo_data`` nor ``train_demo``, which take the same time at both
revisions unless the change is in them) and times ``snakemake --cores C`` there, the clone's own code on
``PYTHONPATH``. Prints every run's wall time, then each revision's median and the difference. Run it alone
on the machine: the two revisions' runs are minutes apart, and a shared machine's load moves them.

    snakemake --cores 2     # once, for results/demo/data and results/demo/model
    python bench/demo_revisions.py --before 5b47487 --after HEAD --repeats 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from revisions import add_revision_arguments, check_demo_inputs  # noqa: E402


def run_at(revision: str, data: Path, model: Path, cores: int, work: Path) -> float:
    """Wall seconds of ``snakemake --cores cores`` in a fresh clone at ``revision`` given data and model."""
    clone = work / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", revision], check=True)
    demo = clone / "results" / "demo"
    demo.mkdir(parents=True)
    shutil.copytree(data, demo / "data")  # copy2 and copystat: the files' and folders' time stamps too
    shutil.copytree(model, demo / "model")
    env = {**os.environ, "PYTHONPATH": str(clone)}
    log = work / f"snakemake-{revision}.log"
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            ["snakemake", "--cores", str(cores)], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"snakemake at {revision} failed ({done.returncode}); its output: {log}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_revision_arguments(parser, repeats=2)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    check_demo_inputs(args)
    order = ["after", "before"] if args.after_first else ["before", "after"]
    revisions = {"before": args.before, "after": args.after}
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="demo-revisions-") as tmp:
        for repeat in range(args.repeats):
            for label in order:
                wall = run_at(revisions[label], args.data, args.model, args.cores, Path(tmp))
                seconds[label].append(wall)
                print(f"repeat {repeat + 1} {label:<6} {revisions[label]:<12} {wall:7.1f} s", flush=True)
    before, after = (statistics.median(seconds[label]) for label in ("before", "after"))
    print(f"median: before {before:.1f} s, after {after:.1f} s, after - before {after - before:+.1f} s")


if __name__ == "__main__":
    main()
