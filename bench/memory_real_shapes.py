"""Peak RSS of every job at real shapes, against the memory budget of one block.

Builds a random-weight Llama (bf16, 1024-token vocabulary) whose blocks have the shapes of Llama-2-7B
(hidden 4096, MLP 11008, 32 heads; 2 blocks) or Llama-2-70B (hidden 8192, MLP 28672, 64 heads, 8 KV
heads; 1 block), then runs the jobs of one recipe as the workflow does, each a ``python -m thanos``
process of its own: model-info, embed, capture (block 0), prune (every layer of block 0, the
``prune_block`` job; the recipe job runs the same functions in turn) and propagate. The peak RSS of each
process is its ``ru_maxrss`` from ``os.wait4`` (that child alone).

The budget of a job (``--budget``) is the sum of the parts it holds, computed from the shapes:
``weights`` (one block, as stored), ``hessians`` (every group of the block, fp32: capture) or ``H`` (the
largest group, fp32: prune), ``factor`` (the inverse factor of the largest group, fp32, prune),
``W fp32`` (the largest layer in fp32, prune), plus ``constant`` (the peak RSS of a process that only
imports torch, transformers and the stages, measured) and, for capture, embed and propagate, the
activations of one batch, measured as the rest (peak - the parts above) and shown per 1k tokens of a batch,
so that it scales to other batch x seqlen sizes (``--seqlens`` runs capture at several sizes).

``--prune-model`` runs ``thanos prune-model`` on the model instead (every stage in its one process) and
samples the RSS of it and of every process it starts every 0.1 s (psutil), printing the peak of each;
``--recover-epochs N`` adds ``--recover`` (N epochs) and prints each block's recovery seconds and the peak
RSS its record gives (``pruning_report.json``), beside the seconds of the same command without recovery.

    OMP_WAIT_POLICY=PASSIVE python bench/memory_real_shapes.py --shape 7b --method sparsegpt --sparsity 0.5
    python bench/memory_real_shapes.py --shape 70b --method thanos --sparsity 2:4 --work /big/tmp
    OMP_WAIT_POLICY=PASSIVE python bench/memory_real_shapes.py --shape 7b --method thanos --sparsity 0.5 \
        --prune-model --recover-epochs 2 --nsamples 8 --seqlen 256
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "out"
MIB = 2**20
SHAPES = {
    "7b": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_heads": 32,
        "num_kv_heads": 32,
        "num_blocks": 2,
    },
    "70b": {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_heads": 64,
        "num_kv_heads": 8,
        "num_blocks": 1,
    },
}
# what a job imports: torch, transformers, the stages and the Llama modeling code (the generic adapter's)
IMPORTS = (
    "import torch, transformers, transformers.models.llama.modeling_llama; "
    "import thanos.stages.capture, thanos.stages.prune"
)


def job(*args: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``args`` as a child process; its peak RSS (MiB) and wall time (s). Raises if it fails."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    output = proc.stdout.read().decode() if proc.stdout else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{output[-3000:]}")
    return {"peak_mib": usage.ru_maxrss / 1024, "seconds": time.perf_counter() - started}


def sampled(args: list[str], interval: float = 0.1) -> dict[str, dict[str, float]]:
    """Run ``args``; the peak RSS (MiB, sampled) and lifetime of each process of its tree, by job name."""
    import psutil

    peaks: dict[str, dict[str, float]] = {}
    seen: dict[int, tuple[str, float]] = {}
    root = psutil.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while root.poll() is None:
        for proc in [root, *root.children(recursive=True)]:
            try:
                rss = proc.memory_info().rss / MIB
                if proc.pid not in seen:
                    seen[proc.pid] = (job_name(proc.cmdline()), time.perf_counter())
            except psutil.Error:
                continue
            name, started = seen[proc.pid]
            entry = peaks.setdefault(name, {"peak_mib": 0.0, "seconds": 0.0})
            entry["peak_mib"] = max(entry["peak_mib"], rss)
            entry["seconds"] = max(entry["seconds"], time.perf_counter() - started)
        time.sleep(interval)
    output = root.stdout.read().decode() if root.stdout else ""
    if root.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({root.returncode}):\n{output[-3000:]}")
    return peaks


def job_name(cmdline: list[str]) -> str:
    """``thanos <command>`` for the package's jobs, else the program's name."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg == "thanos" or arg.endswith("/thanos"):
            return f"thanos {cmdline[i + 1]}"
    return Path(cmdline[0]).name if cmdline else "?"


def prune_model(args: argparse.Namespace, work: Path) -> dict:
    """``thanos prune-model`` on a real-shape model, the RSS of every job sampled."""
    shape = SHAPES[args.shape]
    model = build(work, shape)
    rng = np.random.default_rng(0)
    text = work / "calibration.txt"
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, size=5)) for _ in range(4000)]
    text.write_text("\n".join(" ".join(words[i : i + 20]) for i in range(0, len(words), 20)) * 20)
    command = [
        sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", args.method,
        "--sparsity", args.sparsity, "--calibration", str(text), "--nsamples", str(args.nsamples),
        "--seqlen", str(args.seqlen), "--device", "cpu", "--cores", str(os.cpu_count()),
    ]  # fmt: skip
    result: dict = {"budget_parts_mib": parts(shape)}
    runs = [("plain", [])]
    if args.recover_epochs:
        runs.append(("recovered", ["--recover", "--recover-epochs", str(args.recover_epochs)]))
    for name, extra in runs:  # the same workdir: the recovered run reuses the calibration and block 0's
        out = work / f"out-{name}"
        started = time.perf_counter()
        jobs = sampled([*command, "--workdir", str(work / "workdir"), "--out", str(out), *extra])
        result[name] = {"jobs": jobs, "seconds": time.perf_counter() - started}
        recovery = json.loads((out / "pruning_report.json").read_text()).get("recovery")
        if recovery:
            result[name]["recovery_blocks"] = recovery["blocks"]
    return result


def thanos(*args: str) -> dict[str, float]:
    """``python -m thanos ARGS`` as a job; its peak RSS and time are also logged when it ends."""
    measured = job(sys.executable, "-m", "thanos", *args)
    print(f"thanos {args[0]}: {measured['peak_mib']:,.0f} MiB, {measured['seconds']:.0f} s", file=sys.stderr)
    return measured


def parts(shape: dict[str, int]) -> dict[str, float]:
    """Budget parts (MiB) of one block from its shapes: bf16 weights, fp32 Hessians, factor, W fp32."""
    h, i = shape["hidden_size"], shape["intermediate_size"]
    kv = h * shape["num_kv_heads"] // shape["num_heads"]
    layers = {
        "q": (h, h),
        "k": (kv, h),
        "v": (kv, h),
        "o": (h, h),
        "gate": (i, h),
        "up": (i, h),
        "down": (h, i),
    }
    largest_b = max(b for _, b in layers.values())
    return {
        "weights": sum(c * b for c, b in layers.values()) * 2 / MIB,
        "hessians": (3 * h * h + i * i) * 4 / MIB,  # q/k/v, o, gate/up and down inputs
        "H": largest_b**2 * 4 / MIB,
        "factor": largest_b**2 * 4 / MIB,
        "W_fp32": max(c * b for c, b in layers.values()) * 4 / MIB,
        "fp32_block": (sum(c * b for c, b in layers.values()) * 4 + (3 * h * h + i * i) * 4) / MIB,
    }


def build(work: Path, shape: dict[str, int]) -> Path:
    code = (
        "import sys; from thanos.demo.tiny import build_tiny_model; "
        f"build_tiny_model(sys.argv[1], 'llama', dtype='bfloat16', vocab_size=1024, "
        f"max_position_embeddings=4096, max_shard_size='2GB', **{shape!r})"
    )
    job(sys.executable, "-c", code, str(work / "model"))
    return work / "model"


def tokens(path: Path, nsamples: int, seqlen: int) -> None:
    from thanos.data.storage import write_tokens

    ids = np.random.default_rng(0).integers(0, 1024, size=(nsamples, seqlen), dtype=np.int64)
    write_tokens(path, ids, {"source": "random", "nsamples": nsamples, "seqlen": seqlen})


def size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / MIB


def run(args: argparse.Namespace, work: Path) -> dict:
    shape = SHAPES[args.shape]
    budget = parts(shape)
    started = time.perf_counter()
    model = build(work, shape)
    build_seconds = time.perf_counter() - started
    constant = job(sys.executable, "-c", IMPORTS)["peak_mib"]
    jobs: dict[str, dict[str, float]] = {}
    device = ["--device", "cpu"]
    batch = ["--batch-size", str(args.batch_size)]
    info = ["--model-info", str(work / "info.json")]  # the prune jobs read the layers' names there
    tokens(work / "tokens.zarr", args.nsamples, args.seqlen)
    jobs["model_info"] = thanos("model-info", "--model", str(model), "--out", str(work / "info.json"))
    jobs["embed"] = thanos(
        "embed", "--model", str(model), "--tokens", str(work / "tokens.zarr"),
        "--out", str(work / "inputs_0.zarr"), *batch, *device,
    )  # fmt: skip
    jobs["capture"] = thanos(
        "capture", "--model", str(model), "--block", "0", "--inputs", str(work / "inputs_0.zarr"),
        "--out", str(work / "hessians_0.zarr"), *batch, *device,
    )  # fmt: skip
    jobs["prune"] = thanos(
        "prune", "--model", str(model), "--block", "0", "--method", args.method, "--sparsity", args.sparsity,
        "--hessians", str(work / "hessians_0.zarr"), "--out-dir", str(work / "pruned"), *device, *info,
    )  # fmt: skip
    jobs["propagate"] = thanos(
        "propagate", "--model", str(model), "--block", "0", "--inputs", str(work / "inputs_0.zarr"),
        "--pruned-dir", str(work / "pruned"), "--out", str(work / "inputs_1.zarr"), *batch, *device,
    )  # fmt: skip
    objectives = {f"{args.method} {args.sparsity}": _objectives(work / "pruned")}
    for number, recipe in enumerate(args.also):
        method, sparsity = recipe.split("/")
        out_dir = work / f"pruned_also{number}"
        jobs[f"prune {method} {sparsity}"] = thanos(
            "prune", "--model", str(model), "--block", "0", "--method", method, "--sparsity", sparsity,
            "--hessians", str(work / "hessians_0.zarr"), "--out-dir", str(out_dir), *device, *info,
        )  # fmt: skip
        objectives[f"{method} {sparsity}"] = _objectives(out_dir)
    scaling = []
    for seqlen in args.seqlens:
        name = f"s{seqlen}"
        tokens(work / f"tokens_{name}.zarr", args.batch_size, seqlen)
        thanos(
            "embed", "--model", str(model), "--tokens", str(work / f"tokens_{name}.zarr"),
            "--out", str(work / f"inputs_{name}.zarr"), *batch, *device,
        )  # fmt: skip
        peak = thanos(
            "capture", "--model", str(model), "--block", "0", "--inputs", str(work / f"inputs_{name}.zarr"),
            "--out", str(work / f"hessians_{name}.zarr"), *batch, *device,
        )["peak_mib"]  # fmt: skip
        scaling.append({"seqlen": seqlen, "capture_peak_mib": peak})
    disk = {
        "model": size_mib(model),
        "inputs_0": size_mib(work / "inputs_0.zarr"),
        "hessians_0": size_mib(work / "hessians_0.zarr"),
        "pruned_block": size_mib(work / "pruned"),
    }
    pruned = work / "pruned"
    if args.keep_pruned:
        args.keep_pruned.mkdir(parents=True, exist_ok=True)
        for f in pruned.glob("*.safetensors"):
            (args.keep_pruned / f.name).write_bytes(f.read_bytes())
    return {
        "budget_parts_mib": budget | {"constant": constant},
        "jobs": jobs,
        "scaling": scaling,
        "disk_mib": disk,
        "objectives": objectives,
        "build_seconds": build_seconds,
    }


def _objectives(pruned: Path) -> dict[str, float]:
    """Each pruned layer's objective, from its stats file."""
    return {f.stem: json.loads(f.read_text())["objective"] for f in sorted(pruned.glob("*.json"))}


def report(args: argparse.Namespace, result: dict) -> None:
    p = result["budget_parts_mib"]
    tokens_per_batch = args.batch_size * args.seqlen
    held = {
        "model_info": 0.0,
        "embed": 0.0,
        "capture": p["weights"] + p["hessians"],
        "prune": p["weights"] + p["H"] + p["factor"] + p["W_fp32"],
        "propagate": p["weights"],
    }
    print(
        f"{args.shape}-shaped block(s), {args.method} {args.sparsity}, "
        f"{args.nsamples} x {args.seqlen} tokens, batch {args.batch_size}, CPU, {os.cpu_count()} cores"
    )
    print(
        "budget parts (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in p.items() if k != "fp32_block")
        + f"; fp32 block weights + Hessians {p['fp32_block']:,.0f}"
    )  # fmt: skip
    print(f"{'job':>22} {'peak MiB':>9} {'parts':>9} {'rest':>8} {'rest/1k tok':>11} {'sec':>7}")
    for name, measured in result["jobs"].items():
        held[name] = held[name.split()[0]]
        rest = measured["peak_mib"] - p["constant"] - held[name]
        per_k = (
            f"{rest / tokens_per_batch * 1000:>11.1f}"
            if name in ("embed", "capture", "propagate")
            else " " * 11
        )
        print(
            f"{name:>22} {measured['peak_mib']:>9,.0f} {p['constant'] + held[name]:>9,.0f} "
            f"{rest:>8,.0f} {per_k} {measured['seconds']:>7.1f}"
        )
    largest = max(m["peak_mib"] for m in result["jobs"].values())
    print(f"largest job {largest:,.0f} MiB = {largest / p['fp32_block']:.2f} x fp32 block weights + Hessians")
    for row in result["scaling"]:
        tok = args.batch_size * row["seqlen"]
        rest = row["capture_peak_mib"] - p["constant"] - held["capture"]
        print(
            f"capture, batch {args.batch_size} x seqlen {row['seqlen']} ({tok} tokens): peak "
            f"{row['capture_peak_mib']:,.0f} MiB, activations {rest:,.0f} MiB "
            f"({rest / tok * 1000:.1f} per 1k tokens)"
        )
    print("disk (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in result["disk_mib"].items()))
    for recipe, values in result["objectives"].items():
        print(f"objectives {recipe}: " + ", ".join(f"{k} {v:.7g}" for k, v in values.items()))


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    parser.add_argument("--method", default="sparsegpt")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--nsamples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--seqlens",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[],
        help="also run capture at batch x these seqlens (activation scaling)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch directory (default: a temporary one)"
    )
    parser.add_argument(
        "--also",
        type=lambda s: [x for x in s.split(",") if x],
        default=[],
        help="more prune jobs on the same Hessians, e.g. thanos/2:4,sparsegpt/2:4",
    )
    parser.add_argument("--keep-pruned", type=Path, default=None, help="copy the pruned layers here")
    parser.add_argument("--prune-model", action="store_true", help="sample the jobs of `thanos prune-model`")
    parser.add_argument(
        "--recover-epochs",
        type=int,
        default=0,
        help="with --prune-model: run it again with --recover and this many epochs",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="thanos-real-", dir=args.work) as tmp:
        result = prune_model(args, Path(tmp)) if args.prune_model else run(args, Path(tmp))
    if args.prune_model:
        print(
            f"thanos prune-model, {args.shape}-shaped block(s), {args.method} {args.sparsity}, "
            f"{args.nsamples} x {args.seqlen} tokens, CPU: peak RSS (MiB, sampled every 0.1 s) per job"
        )
        for run_name in ("plain", "recovered"):
            if run_name not in result:
                continue
            measured = result[run_name]
            print(f"{run_name}: wall {measured['seconds']:.0f} s")
            for name, job_peak in sorted(measured["jobs"].items(), key=lambda item: -item[1]["peak_mib"]):
                print(f"{name:>24} {job_peak['peak_mib']:>9,.0f} {job_peak['seconds']:>8.1f} s")
            for block in measured.get("recovery_blocks", []):
                print(
                    f"  recovery block {block['block']}: {block['seconds']:.1f} s, peak RSS "
                    f"{block['peak_rss_mib']:,.0f} MiB, held-out loss {block['loss_before']:.4g} -> "
                    f"{block['loss_after']:.4g} ({block['epochs_kept']} epoch(s) kept)"
                )
    else:
        report(args, result)
    OUT.mkdir(parents=True, exist_ok=True)
    meta = vars(args) | {"python": platform.python_version(), "machine": platform.machine()}
    meta = {k: str(v) if isinstance(v, Path) else v for k, v in meta.items()}
    kind = "prune_model_" if args.prune_model else ""
    out = OUT / f"memory_real_shapes_{kind}{args.shape}_{args.method}_{args.sparsity.replace(':', 'of')}.json"
    out.write_text(json.dumps({"config": meta, **result}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
