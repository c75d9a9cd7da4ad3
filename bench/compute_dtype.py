"""Capture and propagate seconds per block in each compute dtype, against the machine's matrix-product rate.

On a real bf16 checkpoint (e.g. SmolLM2-135M from ``python -m thanos real-model``), for the first
``--blocks`` blocks: ``capture`` (the dense block over its inputs, Hessians accumulated) and ``propagate``
(the block over its inputs, outputs stored) computed in bfloat16 (what every version before the
compute-dtype policy did) and in float32 (the policy's default on a CPU), alternating which goes first,
the median of ``--repeats`` runs each. Beside them, in the same process: ``F.linear`` of a batch of
activations through the model's MLP up projection shape in each dtype (GFLOP/s), and each pass's rate over
its linear layers (2 x tokens x weights / seconds), so the passes can be read against what the machine
multiplies at.

    OMP_WAIT_POLICY=PASSIVE python bench/compute_dtype.py --model results/real-llm/model \\
        --calibration results/demo/data/calib.jsonl --nsamples 64 --seqlen 256 --blocks 3

``ONEDNN_MAX_CPU_ISA=AVX2`` before the command makes an AVX-512 CPU multiply as an AVX2 one does (bf16
converted element by element), and the policy follows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from thanos.files.ledger import remove
from thanos.models import open_model
from thanos.stages.calibrate import calibrate
from thanos.stages.capture import capture, embed, propagate
from thanos.stages.common import compute_dtype

DTYPES = ("bfloat16", "float32")


def linear_rate(tokens: int, columns: int, rows: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """GFLOP/s of ``F.linear`` (tokens x columns) x (rows x columns)^T in ``dtype``, best of ``repeats``."""
    x = torch.randn(tokens, columns).to(dtype)
    w = torch.randn(rows, columns).to(dtype)
    F.linear(x, w)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        F.linear(x, w)
        best = min(best, time.perf_counter() - started)
    return 2 * tokens * columns * rows / best / 1e9


def timed(stage, *args) -> float:
    """Seconds of one ``stage(*args)`` call."""
    started = time.perf_counter()
    stage(*args)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", type=Path, required=True, help="a Hugging Face directory (a bf16 checkpoint)"
    )
    parser.add_argument("--calibration", type=Path, required=True, help="local calibration text/jsonl")
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    _, adapter, checkpoint = open_model(args.model)
    prefix = adapter.block_prefix(0)
    weights = sum(
        torch.Size(checkpoint.shape(f"{prefix}{layer}.weight")).numel() for layer in adapter.block_layers(0)
    )
    tokens = args.nsamples * args.seqlen
    up = checkpoint.shape(f"{prefix}mlp.up_proj.weight")
    auto = compute_dtype("auto", torch.device("cpu"), adapter.dtype)
    print(
        f"{args.model}: {adapter.model_type}, checkpoint {str(adapter.dtype).removeprefix('torch.')}, "
        f"{torch.get_num_threads()} threads; {args.nsamples} x {args.seqlen} calibration tokens, "
        f"batches of {args.batch_size}; ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')}: "
        f"auto is {str(auto).removeprefix('torch.')} here"
    )
    rates = {
        name: linear_rate(args.batch_size * args.seqlen, up[1], up[0], getattr(torch, name))
        for name in DTYPES
    }
    print(
        f"F.linear ({args.batch_size * args.seqlen} x {up[1]}) x ({up[0]} x {up[1]})^T: "
        + ", ".join(f"{name} {rate:.1f} GFLOP/s" for name, rate in rates.items())
    )
    flops = 2 * tokens * weights
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ids = work / "tokens.zarr"
        calibrate(args.model, str(args.calibration), ids, args.nsamples, args.seqlen, 0)
        inputs = work / "inputs_0.zarr"
        embed(args.model, ids, inputs, args.batch_size, "cpu", "float32")
        print("| block | stage | bfloat16 s | float32 s | speed-up | float32 GFLOP/s (linear layers) |")
        print("|---|---|---|---|---|---|")
        for block in range(args.blocks):
            seconds: dict[tuple[str, str], list[float]] = {}
            for repeat in range(args.repeats):
                order = DTYPES if repeat % 2 == 0 else DTYPES[::-1]
                for dtype in order:
                    hess, nxt = work / f"h_{dtype}.zarr", work / f"next_{dtype}.zarr"
                    remove(hess)
                    remove(nxt)
                    common = (args.model, block, inputs)
                    seconds.setdefault(("capture", dtype), []).append(
                        timed(capture, *common, hess, args.batch_size, "cpu", dtype)
                    )
                    seconds.setdefault(("propagate", dtype), []).append(
                        timed(propagate, *common, nxt, None, args.batch_size, "cpu", None, dtype)
                    )
            for stage in ("capture", "propagate"):
                bf16 = statistics.median(seconds[(stage, "bfloat16")])
                fp32 = statistics.median(seconds[(stage, "float32")])
                rate = flops / fp32 / 1e9
                print(
                    f"| {block} | {stage} | {bf16:.2f} | {fp32:.2f} | {bf16 / fp32:.2f}x | {rate:.1f} |",
                    flush=True,
                )
            following = work / f"inputs_{block + 1}.zarr"
            (work / "next_float32.zarr").rename(following)
            inputs = following


if __name__ == "__main__":
    main()
