"""Workflow overhead: the Snakemake run against the same stages called one after another in one process.

Builds a random Llama (default hidden 1024, 4 blocks), writes a calibration text, then times
  (a) in-process: model-info, calibrate, embed, then per recipe capture/prune/propagate for every block
      (block 0's Hessians shared by the recipes, as the workflow shares them) and assemble, each through
      ``thanos.cli.main`` in this one Python process (no process starts, no scheduling): what a single
      in-process pruning script does;
  (b) ``snakemake --cores C`` on the same config (``--granularity auto``, the default: the config has no
      granularity key, as a new user's), or with ``--runner prune-model`` one ``thanos prune-model``
      command per recipe (one work directory: the recipes share calibration and block 0),
and prints both wall times and the overhead. It also checks that both produce byte-identical weights.

    python bench/workflow_overhead.py --hidden 256 --recipes 6          # the default config, 6 recipes
    python bench/workflow_overhead.py --hidden 2048 --granularity layer # per-layer jobs
    python bench/workflow_overhead.py --hidden 64 --runner prune-model  # the one-command path
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
RECIPES = {  # name: (method, sparsity)
    "thanos_u50": ("thanos", "0.5"),
    "sparsegpt_u50": ("sparsegpt", "0.5"),
    "wanda_u50": ("wanda", "0.5"),
    "magnitude_u50": ("magnitude", "0.5"),
    "thanos_2-4": ("thanos", "2:4"),
    "thanos_s30": ("thanos", "structured:0.3"),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--nsamples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=128)
    parser.add_argument(
        "--recipes", type=int, default=1, choices=range(1, len(RECIPES) + 1), help="the first N of RECIPES"
    )
    parser.add_argument("--granularity", choices=("auto", "layer", "block", "recipe"), default="auto")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--runner", choices=("snakemake", "prune-model"), default="snakemake")
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "workflow_overhead"))
    args = parser.parse_args()

    from thanos.cli import main as thanos_main
    from thanos.demo.tiny import build_tiny_model
    from thanos.pruning import methods
    from thanos.recipes.recipe import Recipe

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
    recipes = dict(list(RECIPES.items())[: args.recipes])
    from thanos.jobs.granularity import choose_granularity

    granularity = choose_granularity(args.granularity, cluster=False, gpus=0)[0]  # device cpu, local
    threads = args.cores if granularity in ("block", "recipe") else 1

    # (a) the same stages in one process
    work = out / "inprocess"

    def stage(*argv: object) -> None:
        if thanos_main([str(a) for a in argv]) != 0:
            raise SystemExit(f"stage failed: {argv}")

    t0 = time.perf_counter()
    stage("model-info", "--model", model, "--out", work / "info.json")
    info = json.loads((work / "info.json").read_text())
    tokens = work / "tokens.zarr"
    calib = ["--source", text, "--nsamples", args.nsamples, "--seqlen", args.seqlen]
    stage("calibrate", "--model", model, *calib, "--out", tokens)
    stage("embed", "--model", model, "--tokens", tokens, "--device", "cpu", "--out", work / "inputs_0.zarr")
    layers = ",".join(info["layers"])
    for name, (method, sparsity) in recipes.items():
        calibrated = methods.get(method).needs_hessian
        chain = work / name
        for block in range(info["num_blocks"]):
            inputs = (work if block == 0 else chain) / f"inputs_{block}.zarr"
            hessians = (work if block == 0 else chain) / f"hessians_{block}.zarr"
            pruned = chain / "pruned" / f"block{block}"
            at_block = ("--model", model, "--block", block, "--device", "cpu")
            if calibrated and not hessians.exists():
                stage("capture", *at_block, "--inputs", inputs, "--out", hessians)
            options = ("--method", method, "--sparsity", sparsity, "--layers", layers, "--out-dir", pruned)
            stage("prune", *at_block, *options, *(("--hessians", hessians) if calibrated else ()))
            if calibrated and block + 1 < info["num_blocks"]:
                nxt = chain / f"inputs_{block + 1}.zarr"
                stage("propagate", *at_block, "--inputs", inputs, "--pruned-dir", pruned, "--out", nxt)
        recipe = Recipe(name, method, sparsity, chain="sequential")
        stage(
            "assemble",
            *("--model", model, "--pruned-root", chain / "pruned", "--recipe", recipe.to_json()),
            *(("--calibration", tokens) if calibrated else ()),
            *("--model-info", work / "info.json", "--out", chain / "model"),
        )
    inprocess = time.perf_counter() - t0

    # (b) snakemake, or thanos prune-model
    wf = out / "workflow"
    wf.mkdir()
    if args.runner == "prune-model":
        t0 = time.perf_counter()
        for name, (method, sparsity) in recipes.items():
            cmd = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", method]
            cmd += ["--sparsity", sparsity, "--calibration", str(text), "--nsamples", str(args.nsamples)]
            cmd += ["--seqlen", str(args.seqlen), "--device", "cpu", "--cores", str(args.cores)]
            subprocess.run([*cmd, "--workdir", str(wf / "work"), "--out", str(wf / "out" / name)], check=True)
        workflow = time.perf_counter() - t0
        published = {name: wf / "out" / name for name in recipes}
        jobs = -1
    else:
        config = {
            "models": {"bench": {"path": str(model)}},
            "calibration": {"source": str(text), "nsamples": args.nsamples, "seqlen": args.seqlen},
            "chain": "sequential",
            **({} if args.granularity == "auto" else {"granularity": args.granularity}),
            "threads": threads,
            "device": "cpu",
            "recipes": {name: {"method": m, "sparsity": p} for name, (m, p) in recipes.items()},
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
        metadata = wf / ".snakemake" / "metadata"
        jobs = len(list(metadata.glob("*"))) if metadata.is_dir() else -1
        published = {name: wf / "results" / "bench" / name / "model" for name in recipes}

    same = all(
        (published[name] / f.name).read_bytes() == f.read_bytes()
        for name in recipes
        for f in sorted((work / name / "model").glob("*.safetensors"))
    )
    print(
        f"model: llama hidden {args.hidden}, {args.blocks} blocks, {args.nsamples} x {args.seqlen} tokens; "
        f"{len(recipes)} recipe(s) {', '.join(recipes)}; granularity {args.granularity} -> {granularity}; "
        f"--cores {args.cores} (threads/job {threads})"
    )
    print(f"in-process stages : {inprocess:8.1f} s")
    print(f"{args.runner:<18}: {workflow:8.1f} s  ({jobs} outputs recorded)")
    ratio = workflow / inprocess
    print(f"overhead          : {100 * (ratio - 1):8.1f} %  (ratio {ratio:.2f}x)")
    print(f"identical weights : {same}")


if __name__ == "__main__":
    main()
