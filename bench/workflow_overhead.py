"""Workflow overhead: the Snakemake run against the same stages called one after another in one process.

Builds a random Llama whose layers take about a second or more to prune on CPU (default hidden 1024,
4 blocks), writes a calibration text, then times
  (a) in-process: model-info, calibrate, embed, capture/prune/propagate for every block, assemble, each
      through ``thanos.cli.main`` in this one Python process (no process starts, no scheduling);
  (b) ``snakemake --cores C`` on the same config (granularity block by default: one prune job per block),
      or, with ``--runner prune-model``, ``thanos prune-model`` (granularity chain, publishing to --out),
and prints both wall times and the overhead. It also checks that both produce byte-identical weights.

    python bench/workflow_overhead.py                       # hidden 1024, 4 blocks
    python bench/workflow_overhead.py --blocks 8 --granularity layer   # or chain: one job per recipe
    python bench/workflow_overhead.py --hidden 64 --runner prune-model  # the one-command path, tiny model
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORDS = (
    "the a of to and in model prunes weights layer block sparse dense input output token row column".split()
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--nsamples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=128)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--granularity", choices=("layer", "block", "chain"), default="block")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--runner", choices=("snakemake", "prune-model"), default="snakemake")
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "workflow_overhead"))
    args = parser.parse_args()

    from thanos.cli import main as thanos_main
    from thanos.tiny import build_tiny_model

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = random.Random(0)
    text = out / "text.jsonl"
    text.write_text(
        "".join(
            json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(400))}) + "\n" for _ in range(200)
        )
    )
    model = build_tiny_model(
        out / "model", "llama", hidden_size=args.hidden, num_blocks=args.blocks, num_heads=args.hidden // 64
    )
    threads = args.cores if args.granularity in ("block", "chain") else 1

    # (a) the same stages in one process
    work = out / "inprocess"
    recipe = {"name": "r", "method": args.method, "sparsity": args.sparsity, "chain": "sequential"}

    def stage(*argv: str) -> None:
        if thanos_main([str(a) for a in argv]) != 0:
            raise SystemExit(f"stage failed: {argv}")

    t0 = time.perf_counter()
    stage("model-info", "--model", model, "--out", work / "info.json")
    info = json.loads((work / "info.json").read_text())
    tokens = work / "tokens.zarr"
    calib = ["--source", text, "--nsamples", args.nsamples, "--seqlen", args.seqlen]
    stage("calibrate", "--model", model, *calib, "--out", tokens)
    stage("embed", "--model", model, "--tokens", tokens, "--device", "cpu", "--out", work / "inputs_0.zarr")
    for block in range(info["num_blocks"]):
        inputs, hessians = work / f"inputs_{block}.zarr", work / f"hessians_{block}.zarr"
        pruned = work / "pruned" / f"block{block}"
        stage(
            "capture",
            "--model",
            model,
            "--block",
            block,
            "--inputs",
            inputs,
            "--device",
            "cpu",
            "--out",
            hessians,
        )
        stage(
            "prune",
            "--model",
            model,
            "--block",
            block,
            "--layers",
            ",".join(info["layers"]),
            "--hessians",
            hessians,
            "--method",
            args.method,
            "--sparsity",
            args.sparsity,
            "--device",
            "cpu",
            "--out-dir",
            pruned,
        )
        if block + 1 < info["num_blocks"]:
            stage(
                "propagate",
                "--model",
                model,
                "--block",
                block,
                "--inputs",
                inputs,
                "--pruned-dir",
                pruned,
                "--device",
                "cpu",
                "--out",
                work / f"inputs_{block + 1}.zarr",
            )
    stage(
        "assemble",
        "--model",
        model,
        "--pruned-root",
        work / "pruned",
        "--recipe-json",
        json.dumps(recipe),
        "--calibration",
        tokens,
        "--model-info",
        work / "info.json",
        "--out",
        work / "model",
    )
    inprocess = time.perf_counter() - t0

    # (b) snakemake, or thanos prune-model
    wf = out / "workflow"
    wf.mkdir()
    if args.runner == "prune-model":
        cmd = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", args.method]
        cmd += ["--sparsity", args.sparsity, "--calibration", str(text), "--nsamples", str(args.nsamples)]
        cmd += ["--seqlen", str(args.seqlen), "--device", "cpu", "--cores", str(args.cores)]
        cmd += ["--workdir", str(wf / "work"), "--out", str(wf / "out")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        workflow = time.perf_counter() - t0
        same = all(
            (wf / "out" / f.name).read_bytes() == f.read_bytes()
            for f in sorted((work / "model").glob("*.safetensors"))
        )
        print(
            f"model: llama hidden {args.hidden}, {args.blocks} blocks, {args.nsamples} x {args.seqlen} tokens"
        )
        print(f"in-process stages   : {inprocess:8.1f} s")
        print(f"thanos prune-model  : {workflow:8.1f} s")
        print(f"overhead            : {100 * (workflow / inprocess - 1):8.1f} %")
        print(f"identical weights   : {same}")
        return
    config = {
        "models": {"bench": {"path": str(model)}},
        "calibration": {"source": str(text), "nsamples": args.nsamples, "seqlen": args.seqlen},
        "chain": "sequential",
        "granularity": args.granularity,
        "threads": threads,
        "device": "cpu",
        "recipes": {"r": {"method": args.method, "sparsity": args.sparsity}},
        "perplexity": {"enabled": False},
        "zeroshot": {"enabled": False},
        "evaluate_dense": False,
        "report": False,
    }
    (wf / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(wf)]
    cmd += ["--configfile", str(wf / "config.yaml"), "--cores", str(args.cores), "--quiet", "all"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    workflow = time.perf_counter() - t0
    jobs = (
        len(list((wf / ".snakemake" / "metadata").glob("*")))
        if (wf / ".snakemake" / "metadata").is_dir()
        else -1
    )

    same = all(
        (wf / "results" / "bench" / "r" / "model" / f.name).read_bytes() == f.read_bytes()
        for f in sorted((work / "model").glob("*.safetensors"))
    )
    print(
        f"model: llama hidden {args.hidden}, {args.blocks} blocks, {args.nsamples} x {args.seqlen} tokens; "
        f"{args.method} {args.sparsity}; granularity {args.granularity}; "
        f"--cores {args.cores} (threads/job {threads})"
    )
    print(f"in-process stages : {inprocess:8.1f} s")
    print(f"snakemake run     : {workflow:8.1f} s  ({jobs} outputs recorded)")
    print(f"overhead          : {100 * (workflow / inprocess - 1):8.1f} %")
    print(f"identical weights : {same}")


if __name__ == "__main__":
    main()
