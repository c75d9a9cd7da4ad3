"""One prune job (``python -m thanos prune``: every layer of one block), its wall time and peak RSS.

The workflow's prune jobs read the model's layout (block prefix, layers, groups) from ``model_info.json``
(``--model-info``) instead of building the model with transformers' modeling code; this measures what that
saves. It builds a tiny random model of ``--model-type`` (any tested type), writes its ``model_info.json``,
calibration tokens, block 0's inputs and Hessians once, then runs the same prune job in a new process each
time (``THANOS_WORKER=off``: no warm worker), alternating the variants repeat after repeat:

- ``model_info``: with ``--model-info`` (the workflow's job);
- ``adapter``: without it (the layout found by the generic adapter, as a job run by hand);
- ``base``: with ``--base CHECKOUT --base-python PYTHON``, the job of another revision of the package (its
  checkout first on ``PYTHONPATH``; no ``--model-info``, which earlier revisions do not take). Llama,
  Mistral, Qwen2 and OPT Hessian groups had other names before the hand-written adapters were deleted: use
  another model type against such a revision.

Peak RSS is the job process's own (``ru_maxrss`` from ``os.wait4``); the table shows medians and whether
the pruned files are byte-identical across variants and repeats.

    OMP_WAIT_POLICY=PASSIVE python bench/prune_job.py --model-type qwen3 --repeats 5 \\
        [--base /work/ref --base-python /work/venv-ref/bin/python]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def thanos(*args: str | Path, python: str = sys.executable, env: dict[str, str] | None = None) -> dict:
    """``python -m thanos args`` in a new process: its wall time (s) and peak RSS (MiB); exits if it fails.
    It runs in the temporary directory: ``-m`` puts the working directory first on ``sys.path``, and a
    checkout there would shadow the environment's package."""
    started = time.perf_counter()
    command = [python, "-m", "thanos", *map(str, args)]
    cwd = tempfile.gettempdir()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    output = proc.stdout.read().decode() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"python -m thanos {' '.join(map(str, args))} failed:\n{output[-3000:]}")
    return {"seconds": seconds, "peak_mib": usage.ru_maxrss / 1024}


def prepare(work: Path, model_type: str, calibration: Path) -> Path:
    """A tiny model of ``model_type``, its model_info.json and block 0's Hessians under ``work``."""
    from thanos.demo.tiny import build_tiny_model

    model = build_tiny_model(work / "model", model_type, max_position_embeddings=128)
    thanos("model-info", "--model", model, "--out", work / "info.json")
    thanos("calibrate", "--model", model, "--source", calibration, "--nsamples", 8, "--seqlen", 64,
           "--out", work / "tokens.zarr")  # fmt: skip
    thanos("embed", "--model", model, "--tokens", work / "tokens.zarr", "--out", work / "inputs_0.zarr")
    thanos("capture", "--model", model, "--block", 0, "--inputs", work / "inputs_0.zarr",
           "--out", work / "hessians_0.zarr")  # fmt: skip
    return model


def digest(out_dir: Path) -> str:
    files = sorted(out_dir.glob("*.safetensors"))
    return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-type", default="qwen3", help="a tested model type (default: qwen3)")
    parser.add_argument("--calibration", type=Path, help="text/jsonl corpus (default: generated words)")
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", type=Path, help="a checkout of another revision (its thanos/ is imported)")
    parser.add_argument("--base-python", default=sys.executable, help="the Python of --base's environment")
    args = parser.parse_args()
    os.environ["THANOS_WORKER"] = "off"  # every job its own process, as on a cluster
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.calibration is None:
            args.calibration = work / "calib.txt"
            args.calibration.write_text(
                "\n\n".join(f"text number {i} of the benchmark " * 20 for i in range(16))
            )
        model = prepare(work, args.model_type, args.calibration)
        job = ["prune", "--model", model, "--block", "0", "--hessians", work / "hessians_0.zarr",
               "--method", args.method, "--sparsity", args.sparsity, "--device", "cpu"]  # fmt: skip
        variants = {
            "model_info": ([*job, "--model-info", work / "info.json"], sys.executable, None),
            "adapter": (job, sys.executable, None),
        }
        if args.base:
            base_env = os.environ | {"PYTHONPATH": str(args.base.resolve())}
            variants["base"] = (job, args.base_python, base_env)
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for repeat in range(args.repeats):
            for name, (argv, python, job_env) in variants.items():
                out = work / f"pruned_{name}_{repeat}"
                runs[name].append(
                    thanos(*argv, "--out-dir", out, python=python, env=job_env) | {"sha": digest(out)}
                )
    recipe = f"{args.method} {args.sparsity}"
    print(f"prune job: a tiny {args.model_type} model, block 0, {recipe}, {args.repeats} repeats")
    print(f"{'variant':12s} {'wall s (median)':>16s} {'min':>7s} {'max':>7s} {'peak RSS MiB':>13s}")
    for name, rows in runs.items():
        seconds = [row["seconds"] for row in rows]
        peak = statistics.median(row["peak_mib"] for row in rows)
        median = statistics.median(seconds)
        print(f"{name:12s} {median:16.2f} {min(seconds):7.2f} {max(seconds):7.2f} {peak:13.0f}")
    same = {row["sha"] for rows in runs.values() for row in rows}
    print(f"pruned files identical across variants and repeats: {len(same) == 1} ({sorted(same)[0][:16]})")


if __name__ == "__main__":
    main()
