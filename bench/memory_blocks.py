"""Peak memory of capture + prune + propagate for one block does not grow with the depth of the model.

Builds two random Llama models of the same width (4 and 32 blocks), saves them as sharded safetensors,
then runs, each in a fresh subprocess: capture(block 1) -> prune(block 1, every layer) -> propagate(block 1),
recording the peak RSS (VmHWM, ``thanos.stages.memory.peak_rss_mib``) after each stage. For contrast, a third
subprocess per model loads the whole model with transformers (what a non-lazy pipeline would hold).
Prints a table and writes bench/out/memory_blocks.json.

``--chain``: instead, the peak RSS of a whole recipe job (``python -m thanos chain``, workflow
``granularity: recipe``: capture, prune and propagate of every block in one process, sequential chain) at
each depth, from ``os.wait4``, and the ratio of the deepest to the shallowest (flat in depth: about 1).

    python bench/memory_blocks.py [--hidden 512] [--blocks 4,32] [--nsamples 8] [--seqlen 128]
    python bench/memory_blocks.py --chain [--hidden 1024] [--blocks 4,16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from thanos.stages.memory import peak_rss_mib

OUT = Path(__file__).resolve().parent / "out" / "memory_blocks.json"
BLOCK = 1


def reset_peak() -> None:
    """Reset the peak RSS to the current RSS (Linux >= 4.0), so that each stage gets its own peak."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def build_model(out: Path, blocks: int, hidden: int) -> Path:
    """A random fp32 Llama model with ``blocks`` blocks, saved as 100 MB safetensors shards."""
    from thanos.demo.tiny import build_tiny_model

    return build_tiny_model(
        out / f"llama-{blocks}b-{hidden}h",
        "llama",
        hidden_size=hidden,
        intermediate_size=int(hidden * 2.75),
        num_blocks=blocks,
        num_heads=max(1, hidden // 64),
        max_position_embeddings=2048,
        vocab_size=1024,
        max_shard_size="100MB",
    )


def worker(model: Path, work: Path, nsamples: int, seqlen: int, method: str) -> dict[str, float]:
    """capture -> prune -> propagate of block ``BLOCK``; peak RSS (MiB) after each stage."""
    import torch

    from thanos.data.storage import write_activations
    from thanos.models import get_adapter, load_config
    from thanos.recipes.recipe import Recipe
    from thanos.stages.capture import capture, propagate
    from thanos.stages.prune import BlockInputs, prune

    hidden = get_adapter(load_config(model)).hidden_size
    inputs = work / "inputs.zarr"
    with write_activations(inputs, nsamples, seqlen, hidden, torch.float32, block=BLOCK) as writer:
        for i in range(nsamples):
            writer.write(i, torch.randn(1, seqlen, hidden, generator=torch.Generator().manual_seed(i)))
    peaks = {"imports+inputs": peak_rss_mib()}
    started = time.perf_counter()
    reset_peak()
    capture(model, BLOCK, inputs, work / "hessians.zarr", batch_size=1, device="cpu")
    peaks["capture"] = peak_rss_mib()
    reset_peak()
    recipe = Recipe(None, method, "0.5")
    prune(model, BLOCK, recipe, work / "pruned", inputs=BlockInputs(work / "hessians.zarr"), device="cpu")
    peaks["prune"] = peak_rss_mib()
    reset_peak()
    propagate(model, BLOCK, inputs, work / "next.zarr", work / "pruned", batch_size=1, device="cpu")
    peaks["propagate"] = peak_rss_mib()
    peaks["seconds"] = time.perf_counter() - started
    return peaks


def full_load(model: Path) -> dict[str, float]:
    """Peak RSS of loading the whole model with transformers (the non-lazy baseline)."""
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(model)
    sum(float(p.sum()) for p in loaded.parameters())  # touch every weight (mmapped pages count once read)
    return {"full_model_load": peak_rss_mib()}


def chain_inputs(model: Path, work: Path, nsamples: int, seqlen: int) -> None:
    """The dense chain's block 0 stores of ``model`` under ``work/dense``: random inputs, their Hessians."""
    import torch

    from thanos.data.storage import write_activations
    from thanos.models import get_adapter, load_config
    from thanos.stages.capture import capture

    hidden = get_adapter(load_config(model)).hidden_size
    inputs = work / "dense" / "inputs_0.zarr"
    with write_activations(inputs, nsamples, seqlen, hidden, torch.float32, block=0) as writer:
        for i in range(nsamples):
            writer.write(i, torch.randn(1, seqlen, hidden, generator=torch.Generator().manual_seed(i)))
    capture(model, 0, inputs, work / "dense" / "hessians_0.zarr", batch_size=8, device="cpu")


def chain_job(model: Path, work: Path, method: str) -> dict[str, float]:
    """``python -m thanos chain`` over every block of ``model``: its peak RSS (MiB) and wall time."""
    command = [sys.executable, "-m", "thanos", "chain", "--model", str(model), "--method", method]
    command += ["--sparsity", "0.5", "--dense-dir", str(work / "dense"), "--chain-dir", str(work / "own")]
    command += ["--pruned-root", str(work / "pruned"), "--out", str(work / "pruned" / "chain.json")]
    started = time.perf_counter()
    with (work / "chain.log").open("w") as log:
        process = subprocess.Popen([*command, "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"thanos chain failed; see {work / 'chain.log'}")
    return {"chain_peak": usage.ru_maxrss / 1024, "seconds": time.perf_counter() - started}


def chain_main(args: argparse.Namespace) -> None:
    """``--chain``: a recipe job's peak RSS per depth, and the deepest over the shallowest."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="thanos-bench-") as tmp:
        for blocks in (int(b) for b in args.blocks.split(",")):
            built = in_subprocess("--build", str(blocks), "--work", tmp, "--hidden", str(args.hidden))
            work = Path(tmp) / f"work-{blocks}"
            work.mkdir()
            in_subprocess("--inputs", built["path"], "--work", str(work), "--nsamples", str(args.nsamples),
                          "--seqlen", str(args.seqlen))  # fmt: skip
            rows.append({"blocks": blocks, **chain_job(Path(built["path"]), work, args.method)})
    print(
        f"peak RSS (MiB) of a recipe job (thanos chain, sequential, all blocks): hidden {args.hidden}, "
        f"{args.nsamples} x {args.seqlen} tokens, {args.method} 0.5, CPU"
    )
    print(" ".join(f"{c:>9}" for c in ("blocks", "peak", "sec")))
    for r in rows:
        print(f"{r['blocks']:>9} {r['chain_peak']:>9.1f} {r['seconds']:>9.1f}")
    print(
        f"peak {rows[-1]['blocks']} / {rows[0]['blocks']} blocks: "
        f"{rows[-1]['chain_peak'] / rows[0]['chain_peak']:.3f}x "
        f"({rows[-1]['chain_peak'] - rows[0]['chain_peak']:+.1f} MiB)"
    )
    out = OUT.with_name("memory_blocks_chain.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"hidden": args.hidden, "nsamples": args.nsamples, "seqlen": args.seqlen, "method": args.method}
    meta |= {"python": platform.python_version(), "machine": platform.machine()}
    out.write_text(json.dumps({"config": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


def in_subprocess(*args: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, cwd=Path.cwd()
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--hidden", type=int, default=None, help="default: 512, 1024 with --chain")
    parser.add_argument("--blocks", default=None, help="model depths, comma-separated (4,32; --chain: 4,16)")
    parser.add_argument("--chain", action="store_true", help="peak RSS of a whole recipe job per depth")
    parser.add_argument("--nsamples", type=int, default=8)
    parser.add_argument("--seqlen", type=int, default=128)
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--full-load", help=argparse.SUPPRESS)
    parser.add_argument("--build", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.hidden = args.hidden or (1024 if args.chain else 512)
    args.blocks = args.blocks or ("4,16" if args.chain else "4,32")
    if args.worker:
        print(json.dumps(worker(Path(args.worker), Path(args.work), args.nsamples, args.seqlen, args.method)))
        return
    if args.full_load:
        print(json.dumps(full_load(Path(args.full_load))))
        return
    if args.build:
        print(json.dumps({"path": str(build_model(Path(args.work), args.build, args.hidden))}))
        return
    if args.inputs:
        chain_inputs(Path(args.inputs), Path(args.work), args.nsamples, args.seqlen)
        print(json.dumps({}))
        return
    if args.chain:
        chain_main(args)
        return

    rows = []
    with tempfile.TemporaryDirectory(prefix="thanos-bench-") as tmp:
        for blocks in (int(b) for b in args.blocks.split(",")):
            # every model is built, used and fully loaded in its own process: the parent stays small
            built = in_subprocess("--build", str(blocks), "--work", tmp, "--hidden", str(args.hidden))
            model = Path(built["path"])
            size = sum(p.stat().st_size for p in model.glob("*.safetensors"))
            work = Path(tmp) / f"work-{blocks}"
            work.mkdir()
            stage = in_subprocess(
                "--worker", str(model), "--work", str(work), "--nsamples", str(args.nsamples),
                "--seqlen", str(args.seqlen), "--method", args.method,
            )  # fmt: skip
            baseline = in_subprocess("--full-load", str(model))
            rows.append({"blocks": blocks, "checkpoint_mib": size / 2**20, **stage, **baseline})
    print(
        f"peak RSS (MiB) of one process per stage sequence, block {BLOCK}: hidden {args.hidden}, "
        f"{args.nsamples} x {args.seqlen} tokens, {args.method} 0.5, CPU"
    )
    columns = ("blocks", "ckpt MiB", "imports", "capture", "prune", "propagate", "full load", "sec")
    print(" ".join(f"{c:>9}" for c in columns))
    for r in rows:
        values = (r["checkpoint_mib"], r["imports+inputs"], r["capture"], r["prune"], r["propagate"])
        values += (r["full_model_load"], r["seconds"])
        print(f"{r['blocks']:>9} " + " ".join(f"{v:>9.1f}" for v in values))
    stage_peak = [max(r["capture"], r["prune"], r["propagate"]) for r in rows]
    print(
        f"stage peak {rows[0]['blocks']} -> {rows[-1]['blocks']} blocks: "
        f"{stage_peak[-1] - stage_peak[0]:+.1f} MiB; "
        f"checkpoint {rows[-1]['checkpoint_mib'] - rows[0]['checkpoint_mib']:+.1f} MiB; "
        f"full load {rows[-1]['full_model_load'] - rows[0]['full_model_load']:+.1f} MiB"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {"hidden": args.hidden, "nsamples": args.nsamples, "seqlen": args.seqlen, "method": args.method}
    meta |= {"block": BLOCK, "python": platform.python_version(), "machine": platform.machine()}
    OUT.write_text(json.dumps({"config": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
