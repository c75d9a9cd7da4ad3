"""The generic adapter against the hand-written Llama adapter: capture and prune time and peak memory per
block, on the same model, calibration and stores.

Each (adapter, repeat) runs in its own process (peak RSS is per process): open the model (the adapter is
built once a process, timed on its own), embed the calibration tokens, then for each block: ``capture``
(the dense block's Hessians), ``prune`` (Thanos, unstructured 50 %, every layer of the block) and
``propagate`` (the next block's inputs). The generic adapter is forced by emptying
``thanos.models.ADAPTERS`` in that process, so a Llama model goes through ``thanos/models/generic.py``.
The adapters alternate, repeat after repeat; the table shows medians and the generic/hand-written ratio.
Feed it the real model of ``python -m thanos real-model`` (SmolLM2-135M, a Llama) for LLM activations,
or ``--shape 7b`` for a random-weight bf16 Llama with Llama-2-7B's block shape (hidden 4096, MLP 11008,
32 heads), built in a temporary directory, where a block's working set is that of a real LLM.

    OMP_WAIT_POLICY=PASSIVE python bench/generic_adapter.py (--model DIR | --shape 7b) --calibration FILE
        [--blocks 4] [--nsamples 16] [--seqlen 256] [--repeats 3] [--method thanos --sparsity 0.5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ADAPTERS = ("hand-written", "generic")
SHAPES = {"7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_heads": 32}}
STEPS = ("capture", "prune", "propagate")


def worker(args: argparse.Namespace) -> None:
    """One process: the stages on ``--blocks`` blocks with one adapter; prints a JSON line."""
    import torch

    import thanos.models
    from thanos.stages.calibrate import calibrate
    from thanos.stages.capture import capture, embed, propagate
    from thanos.stages.prune import prune

    torch.set_num_threads(1)
    if args.adapter == "generic":
        thanos.models.ADAPTERS = ()
    work = Path(args.work)
    start = time.perf_counter()
    thanos.models.open_model(args.model)  # built once per process, shared by the stages (open_model)
    built = time.perf_counter() - start
    seconds: dict[str, list[float]] = {step: [] for step in STEPS}
    calibrate(args.model, args.calibration, work / "tokens.zarr", args.nsamples, args.seqlen)
    embed(args.model, work / "tokens.zarr", work / "inputs_0.zarr", device="cpu")
    for block in range(args.blocks):
        start = time.perf_counter()
        capture(
            args.model, block, work / f"inputs_{block}.zarr", work / f"hessians_{block}.zarr", device="cpu"
        )
        seconds["capture"].append(time.perf_counter() - start)
        start = time.perf_counter()
        hessians = work / f"hessians_{block}.zarr"
        prune(
            args.model,
            block,
            None,
            args.method,
            args.sparsity,
            work / f"pruned_{block}",
            hessians,
            device="cpu",
        )
        seconds["prune"].append(time.perf_counter() - start)
        start = time.perf_counter()
        propagate(
            args.model, block, work / f"inputs_{block}.zarr", work / f"inputs_{block + 1}.zarr",
            pruned_dir=work / f"pruned_{block}", device="cpu",
        )  # fmt: skip
        seconds["propagate"].append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    weights = {}
    for block in range(args.blocks):
        for file in sorted((work / f"pruned_{block}").glob("*.safetensors")):
            weights[f"{block}/{file.name}"] = file.read_bytes()
    digest = __import__("hashlib").sha256(b"".join(weights[k] for k in sorted(weights))).hexdigest()
    print(json.dumps({"seconds": seconds, "peak_mib": peak, "pruned_sha256": digest, "built": built}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a Llama-family model directory")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), help="instead of --model: a random bf16 Llama of this block shape"
    )
    parser.add_argument("--calibration", required=True, help="text/jsonl corpus")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--nsamples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--adapter", choices=ADAPTERS, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.adapter:
        worker(args)
        return
    if (args.model is None) == (args.shape is None):
        parser.error("give --model DIR or --shape")
    with tempfile.TemporaryDirectory() as built:
        if args.shape:
            args.model = str(build(Path(built) / "model", args.shape, args.blocks))
        compare(args)


def build(out: Path, shape: str, blocks: int) -> Path:
    """A random bf16 Llama with the block shape ``shape`` and ``blocks`` blocks (1,024-token vocabulary)."""
    from thanos.models.tiny import build_tiny_model

    return build_tiny_model(
        out, "llama", dtype="bfloat16", vocab_size=1024, max_position_embeddings=4096, num_blocks=blocks,
        max_shard_size="2GB", **SHAPES[shape],
    )  # fmt: skip


def compare(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict]] = {name: [] for name in ADAPTERS}
    for _ in range(args.repeats):
        for name in ADAPTERS:
            with tempfile.TemporaryDirectory() as work:
                cmd = [sys.executable, __file__, "--adapter", name, "--work", work]
                cmd += [
                    "--model",
                    args.model,
                    "--calibration",
                    args.calibration,
                    "--blocks",
                    str(args.blocks),
                ]
                cmd += ["--nsamples", str(args.nsamples), "--seqlen", str(args.seqlen)]
                cmd += ["--method", args.method, "--sparsity", args.sparsity]
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if out.returncode:
                    raise SystemExit(out.stderr[-3000:])
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    shape = f"{args.blocks} blocks, {args.nsamples} x {args.seqlen} tokens, {args.repeats} repeats"
    model = f"random bf16 Llama, {args.shape} block shape" if args.shape else args.model
    print(f"model {model}: {shape}; {args.method} {args.sparsity}")
    print(f"{'per block (median s)':24s} {'hand-written':>12s} {'generic':>10s} {'ratio':>7s}")
    for step in STEPS:
        med = {
            name: statistics.median(s for run in runs[name] for s in run["seconds"][step])
            for name in ADAPTERS
        }
        hand, generic = med["hand-written"], med["generic"]
        print(f"{step:24s} {hand:12.3f} {generic:10.3f} {generic / hand:7.3f}")
    built = {name: statistics.median(run["built"] for run in runs[name]) for name in ADAPTERS}
    hand, generic = built["hand-written"], built["generic"]
    print(f"{'adapter (once a process)':24s} {hand:12.3f} {generic:10.3f} {'':>7s}")
    peak = {name: statistics.median(run["peak_mib"] for run in runs[name]) for name in ADAPTERS}
    hand, generic = peak["hand-written"], peak["generic"]
    print(f"{'peak RSS (MiB)':24s} {hand:12.0f} {generic:10.0f} {generic / hand:7.3f}")
    same = {run["pruned_sha256"] for name in ADAPTERS for run in runs[name]}
    print(f"pruned weights identical across adapters and repeats: {len(same) == 1}")


if __name__ == "__main__":
    main()
