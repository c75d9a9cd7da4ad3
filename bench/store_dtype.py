"""What rounding the activation stores to the checkpoint's dtype costs, against keeping them in float32.

Computing a bf16 checkpoint's blocks in float32 (``--compute-dtype float32``, the policy's default on a CPU
without bf16 instructions), the stores hold each block's outputs rounded to bf16 (the checkpoint's dtype:
disk as before). The alternative keeps them in float32: exact, twice the disk. This bench measures both
with the same code, beside the computation in bf16 (the policy's choice on a CPU with bf16
instructions, and what every earlier version computed):

  computed in bf16, bf16 stores: ``prune-model --compute-dtype bfloat16`` on the bf16 checkpoint;
  computed in fp32, bf16 stores: ``prune-model --compute-dtype float32`` on the bf16 checkpoint;
  computed in fp32, fp32 stores: the same on an exact float32 copy of the checkpoint (bf16 -> fp32 loses
                nothing), whose stores are then float32; its pruned weights are rounded to bf16
                afterwards, as the other runs write them;

then the perplexity of each (and of the dense model) with the same ``thanos perplexity --dtype float32``,
and each working directory's size.

    OMP_WAIT_POLICY=PASSIVE python bench/store_dtype.py --model results/real-llm/model \\
        --calibration results/demo/data/calib.jsonl --heldout results/demo/data/test.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def copy_in(source: Path, out: Path, dtype: torch.dtype, skip: tuple[str, ...] = ()) -> Path:
    """``source``'s files in ``out``, its floating tensors in ``dtype`` and config.json saying so."""
    out.mkdir(parents=True)
    for path in source.iterdir():
        if path.name in skip or not path.is_file():
            continue
        if path.suffix == ".safetensors":
            tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(path).items()}
            save_file(tensors, out / path.name, metadata={"format": "pt"})
        elif path.name == "config.json":
            config = json.loads(path.read_text())
            config["dtype"] = config["torch_dtype"] = str(dtype).removeprefix("torch.")
            (out / path.name).write_text(json.dumps(config, indent=2))
        else:
            shutil.copy2(path, out / path.name)
    return out


def thanos(*args: str | Path) -> None:
    subprocess.run([sys.executable, "-m", "thanos", *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def perplexity(model: Path, heldout: Path, args: argparse.Namespace, out: Path) -> float:
    thanos("perplexity", "--model", model, "--source", heldout, "--seqlen", args.eval_seqlen, "--dtype",
           "float32", "--max-windows", args.max_windows, "--device", "cpu", "--no-progress",
           "--out", out)  # fmt: skip
    return json.loads(out.read_text())["ppl"]


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="a bf16 Hugging Face directory")
    parser.add_argument("--calibration", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--eval-seqlen", type=int, default=512)
    parser.add_argument("--max-windows", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fp32 = copy_in(args.model, work / "model-fp32", torch.float32)
        dense = perplexity(args.model, args.heldout, args, work / "dense.json")
        rows = []
        runs = (  # (row, model, compute dtype)
            ("computed in bf16, bf16 stores", args.model, "bfloat16"),
            ("computed in fp32, bf16 stores", args.model, "float32"),
            ("computed in fp32, fp32 stores", fp32, "float32"),
        )
        for name, model, compute in runs:
            slug = f"{compute}-{name.split()[-2]}"
            started = time.monotonic()
            wd, out = work / f"wd-{slug}", work / f"out-{slug}"
            thanos("prune-model", "--model", model, "--method", args.method, "--sparsity", args.sparsity,
                   "--calibration", args.calibration, "--nsamples", args.nsamples, "--seqlen", args.seqlen,
                   "--device", "cpu", "--compute-dtype", compute, "--workdir", wd,
                   "--out", out)  # fmt: skip
            seconds = time.monotonic() - started
            pruned = out
            if model == fp32:  # the weights as the bf16 checkpoint's run writes them
                pruned = copy_in(
                    out, work / "out-fp32-as-bf16", torch.bfloat16, skip=("pruning_report.json",)
                )
            ppl = perplexity(pruned, args.heldout, args, work / f"ppl-{slug}.json")
            rows.append((name, ppl, seconds, size_mib(wd / "results")))
        print(
            f"{args.model}: {args.method} {args.sparsity}, {args.nsamples} x {args.seqlen} calibration; "
            f"perplexity on {args.heldout.name} ({args.max_windows} windows of {args.eval_seqlen}); "
            f"dense {dense:.3f}"
        )
        print(f"| run | perplexity | vs {rows[0][0]} | prune-model s | workdir MiB |")
        print("|---|---|---|---|---|")
        for name, ppl, seconds, mib in rows:
            print(
                f"| {name} | {ppl:.3f} | {100 * (ppl / rows[0][1] - 1):+.2f} % | {seconds:.0f} | {mib:.0f} |"
            )


if __name__ == "__main__":
    main()
