"""``thanos prune-model`` end to end on the demo model, at two git revisions, alternating.

Each repeat clones the repository at ``--before`` and at ``--after`` (in that order, or the reverse with
``--after-first``) and runs the same ``python -m thanos prune-model`` in each clone (its own code first on
``PYTHONPATH``), each time in a fresh working directory: calibration, every block's capture, prune and
propagate, assembly and publishing. Prints every run's wall time and the peak RSS of its largest process,
then each revision's medians. Run it alone on the machine (OMP_WAIT_POLICY=PASSIVE).

    snakemake --cores 2     # once, for results/demo/data and results/demo/model
    OMP_WAIT_POLICY=PASSIVE python bench/prune_model_revisions.py --before c858c01 --after HEAD --repeats 3
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


def clone_at(revision: str, work: Path) -> Path:
    """A fresh clone of this repository at ``revision`` under ``work``."""
    clone = work / f"clone-{revision}"
    if not clone.is_dir():
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", revision], check=True)
    return clone


def run_at(clone: Path, recipe: list[str], data: Path, model: Path, work: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB of the largest process) of one prune-model run in a fresh workdir."""
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    command = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), *recipe]
    command += ["--calibration", str(data / "calib.jsonl"), "--nsamples", "32", "--seqlen", "256"]
    command += ["--device", "cpu", "--out", str(run / "out"), "--workdir", str(run / "work")]
    env = {**os.environ, "PYTHONPATH": str(clone)}
    # a parent of its own: its children's peak RSS is this run's alone (the largest process waited for)
    wrapper = "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    wrapper += (
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", wrapper, *command], cwd=clone, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"prune-model in {clone} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_revision_arguments(parser, repeats=3)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="2:4")
    args = parser.parse_args()
    check_demo_inputs(args)
    order = ["after", "before"] if args.after_first else ["before", "after"]
    revisions = {"before": args.before, "after": args.after}
    recipe = ["--method", args.method, "--sparsity", args.sparsity, "--alpha", "0"]
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="prune-model-revisions-") as tmp:
        clones = {label: clone_at(revisions[label], Path(tmp)) for label in order}
        for repeat in range(args.repeats):
            for label in order:
                wall, peak = run_at(
                    clones[label], recipe, args.data.resolve(), args.model.resolve(), Path(tmp)
                )
                seconds[label].append(wall)
                print(
                    f"repeat {repeat + 1} {label:<6} {revisions[label]:<10} {wall:6.1f} s  "
                    f"peak RSS {peak:6.0f} MiB",
                    flush=True,
                )
    before, after = (statistics.median(seconds[label]) for label in ("before", "after"))
    print(f"median: before {before:.1f} s, after {after:.1f} s, after / before {after / before:.3f}")


if __name__ == "__main__":
    main()
