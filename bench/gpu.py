"""The GPU check: one short call on a GPU machine, every number docs/benchmarks.md "GPU" records.

    python bench/gpu.py --out OUT [--authors DIR] [--parts kernels,models,consistency,workflow] [--work DIR]
    python bench/gpu.py --out /tmp/gpu --device cpu --small      # try the script itself on a CPU

Parts (each bounded in seconds, 550 in all: ``BUDGET``; each writes its table to OUT as soon as it has a
row, so a part that fails or runs out of time leaves the others' results; models and data go to
``--work``):

- ``kernels``: ``prune_layer`` on the issue's layer shapes (4096 x 4096, 11008 x 4096, 4096 x 11008; 8192
  tokens with heavy-tailed feature scales): Thanos 50 % (B = 128, the default, and 512), SparseGPT 50 %,
  Thanos 2:4 and structured 30 %, each against the authors' Thanos (their main.py settings: B = 512,
  v_blocksize = 256) and SparseGPT (B = 128) when ``--authors`` names a checkout of
  github.com/vectozavr/thanos; seconds (synchronised, after a warm-up call; best of 3, theirs best of 2)
  and the objective's ratio to the authors' (their code synchronises CUDA: on a CPU it is left out).
  Also ``kthvalue`` against a sort on half a million entries (``masks.kth``).
- ``consistency``: one 1024 x 1024 layer on the GPU and on the CPU (fp32 both): equal mask entries and the
  objectives; and ``thanos prune-model`` of a tiny Llama on both (bf16 on the GPU, fp32 on the CPU), Thanos
  50 %, ``depth:1`` (its block map fitted on the device) and ``depth:1+neurons:0.3``: perplexity on held-out
  text and equal mask entries.
- ``models``: a Llama-2-7B-shaped and a Llama-2-70B-shaped block (random weights, one block each) through
  ``thanos prune-model --device DEVICE`` (Thanos 50 %, 64 x 512 and 32 x 512 calibration tokens): seconds
  and peak GPU memory.
- ``workflow``: ``snakemake --cores 4`` on a small config with ``device: cuda`` (one job per layer through
  the GPU slot pool, then one per recipe) and the same with ``device: cpu``: equal mask entries.

Nothing here is a test: CI never runs it. Reading the authors' code needs matplotlib (and sklearn, replaced
by a stand-in when missing: only their plotting uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008))
OURS = (("thanos", "0.5", None), ("thanos", "0.5", 512), ("sparsegpt", "0.5", None), ("thanos", "2:4", None))
OURS += (("thanos", "structured:0.3", None),)
RECIPES = {
    "thanos_u50": {"method": "thanos", "sparsity": 0.5},
    "sparsegpt_2-4": {"method": "sparsegpt", "sparsity": "2:4"},
}
WORDS = (
    "the a one cat dog bird fish tree house river stone sun moon runs sees eats sleeps jumps and or".split()
)


class PartTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int):
    """Raise ``PartTimeout`` in this process after ``seconds`` (SIGALRM)."""
    import signal

    def expire(*_):
        raise PartTimeout(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn, *args, **kwargs):
    sync(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    sync(device)
    return time.perf_counter() - start, out


def heavy_tailed_layer(c: int, b: int, tokens: int, device: str, seed: int = 0):
    """W (c, b) and X (tokens, b) whose features' scales spread over two decades, as LLM activations do."""
    g = torch.Generator(device=device).manual_seed(seed)
    scale = torch.exp(1.5 * torch.randn(b, generator=g, device=device))
    mix = torch.randn(b, b, generator=g, device=device) / math.sqrt(b) + torch.eye(b, device=device)
    X = (torch.randn(tokens, b, generator=g, device=device) @ mix) * scale
    return torch.randn(c, b, generator=g, device=device) / math.sqrt(b), X


def load_authors(directory: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """The authors' ``lib/thanos.py`` and ``lib/sparsegpt.py`` as modules."""
    import transformers

    if "sklearn" not in sys.modules and importlib.util.find_spec("sklearn") is None:
        sklearn, cluster = types.ModuleType("sklearn"), types.ModuleType("sklearn.cluster")
        cluster.KMeans = None
        sklearn.cluster = cluster
        sys.modules |= {"sklearn": sklearn, "sklearn.cluster": cluster}
    if not hasattr(transformers, "Conv1D"):  # moved in transformers 5; their isinstance checks read it
        from transformers import pytorch_utils

        transformers.Conv1D = pytorch_utils.Conv1D
    modules = []
    for name in ("thanos", "sparsegpt"):
        spec = importlib.util.spec_from_file_location(f"authors_{name}", directory / "lib" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules[0], modules[1]


def authors_prune(module: types.ModuleType, method: str, W: torch.Tensor, X: torch.Tensor, device: str):
    """Seconds of the authors' pruning call (H accumulated beforehand, as their add_batch does) and W."""
    layer = torch.nn.Linear(W.shape[1], W.shape[0], bias=False, device=device)
    layer.weight.data = W.clone()
    pruner = module.Thanos(layer) if method == "thanos" else module.SparseGPT(layer)
    for batch in X.split(512):
        pruner.add_batch(batch.unsqueeze(0), None)
    with contextlib.redirect_stdout(sys.stderr):
        if method == "thanos":
            seconds, _ = timed(device, pruner.snap, 0.5, blocksize=512, v_blocksize=256, perc_outliers=0.0)
        else:
            seconds, _ = timed(device, pruner.fasterprune, 0.5, blocksize=128)
    return seconds, layer.weight.data.float()


def part_kernels(args, out: Path) -> list[str]:
    from thanos import prune_layer
    from thanos.pruning.algorithms import masks
    from thanos.pruning.layer import layer_objective

    device, lines = args.device, []
    authors = load_authors(Path(args.authors)) if args.authors and device.startswith("cuda") else None
    shapes = ((512, 512), (512, 1024)) if args.small else SHAPES
    tokens = 1024 if args.small else 8192
    Ww, Xw = heavy_tailed_layer(256, 256, 512, device)  # warm-up: handles, kernels' first launches
    for method, pattern, blocksize in OURS:
        prune_layer(Ww, 2 * Xw.T @ Xw / Xw.shape[0], method, pattern, blocksize=blocksize)
    header = "| layer (rows x inputs) | " + " | ".join(f"{m} {p}{f' B={b}' if b else ''}" for m, p, b in OURS)
    lines += [header + " | authors' Thanos | authors' SparseGPT |", "|" + " --- |" * (len(OURS) + 3)]
    for c, b in shapes:
        W, X = heavy_tailed_layer(c, b, tokens, device)
        H = 2 * X.T @ X / X.shape[0]
        cells, objectives = [], {}
        for method, pattern, blocksize in OURS:
            runs = [timed(device, prune_layer, W, H, method, pattern, blocksize=blocksize) for _ in range(3)]
            seconds, result = min(runs, key=lambda run: run[0])
            objectives[method, pattern, blocksize] = result.stats.objective
            cells.append(f"{seconds:.3f} s")
        for method in ("thanos", "sparsegpt"):
            if authors is None:
                cells.append("-")
                continue
            runs = [authors_prune(authors[method == "sparsegpt"], method, W, X, device) for _ in range(2)]
            seconds, pruned = min(runs, key=lambda run: run[0])
            ours = objectives[method, "0.5", 512 if method == "thanos" else None]  # their block size
            cells.append(
                f"{seconds:.3f} s (objective ours/theirs {ours / layer_objective(pruned - W, H):.4f})"
            )
        lines.append(f"| {c} x {b} | " + " | ".join(cells) + " |")
        (out / "kernels.md").write_text("\n".join(lines) + "\n")
        if (c, b) == shapes[0]:
            profile_kernels(W, H, device, out / "kernels-profile.txt")
        del W, X, H
    values = torch.rand(1 << 19, device=device)
    for name, fn in (
        ("kthvalue", lambda: torch.kthvalue(values, 1 << 18).values),
        ("kth", lambda: masks.kth(values, 1 << 18)),
    ):
        fn()
        seconds = min(timed(device, fn)[0] for _ in range(5))
        lines.append(f"\n{name} on 2^19 entries: {seconds * 1e3:.3f} ms")
    (out / "kernels.md").write_text("\n".join(lines) + "\n")
    return lines


def profile_kernels(W: torch.Tensor, H: torch.Tensor, device: str, path: Path) -> None:
    """Where a layer's time goes: torch.profiler's busiest operators of Thanos 50 % and SparseGPT 50 %."""
    from torch.profiler import ProfilerActivity, profile

    from thanos import prune_layer

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    tables = []
    for method in ("thanos", "sparsegpt"):
        with profile(activities=activities) as prof:
            prune_layer(W, H, method, "0.5")
            sync(device)
        key = "cuda_time_total" if device.startswith("cuda") else "cpu_time_total"
        tables.append(f"{method} 0.5\n" + prof.key_averages().table(sort_by=key, row_limit=25))
    path.write_text("\n\n".join(tables))


def write_text(path: Path, docs: int, seed: int) -> Path:
    import random

    rng = random.Random(seed)
    with path.open("w") as handle:
        for _ in range(docs):
            handle.write(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(400)) + "."}) + "\n")
    return path


def thanos_cli(*argv: str) -> float:
    """``python -m thanos ARGV`` in this process; its wall seconds (raises on a non-zero exit)."""
    from thanos.cli import main

    start = time.perf_counter()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    if code not in (0, None):
        raise RuntimeError(f"thanos {' '.join(map(str, argv))} exited {code}")
    return time.perf_counter() - start


def zero_patterns(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    patterns = {}
    for path in sorted(directory.rglob("*.safetensors")):
        for name, tensor in load_file(path).items():
            if tensor.dim() == 2 and "embed" not in name and "lm_head" not in name:
                patterns[f"{path.relative_to(directory)}:{name}"] = tensor == 0
    return patterns


def equal_entries(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    same = sum(int((a[k] == b[k]).sum()) for k in a)
    return same / sum(a[k].numel() for k in a)


def part_consistency(args, out: Path) -> list[str]:
    from thanos import prune_layer

    lines = ["| check | GPU | CPU | equal mask entries |", "| --- | --: | --: | --: |"]
    W, X = heavy_tailed_layer(1024, 1024, 4096, "cpu")
    H = 2 * X.T @ X / X.shape[0]
    for method, pattern in (("thanos", "0.5"), ("sparsegpt", "0.5"), ("thanos", "2:4")):
        gpu = prune_layer(W.to(args.device), H.to(args.device), method, pattern)
        cpu = prune_layer(W, H, method, pattern)
        agree = float((gpu.mask.cpu() == cpu.mask).float().mean())
        lines.append(
            f"| {method} {pattern} layer objective | {gpu.stats.objective:.4f} | {cpu.stats.objective:.4f} | "
            f"{agree:.2%} |"
        )
    work = args.work / "work-consistency"
    work.mkdir(parents=True, exist_ok=True)
    model = work / "tiny-llama"
    thanos_cli(
        "make-tiny-model", "--family", "llama", "--hidden-size", 256, "--num-blocks", 4, "--out", model
    )
    calib, held_out = write_text(work / "calib.jsonl", 64, 0), write_text(work / "held.jsonl", 16, 1)
    for sparsity in ("0.5", "depth:1", "depth:1+neurons:0.3"):  # depth: the block map fitted on the device
        ppl, patterns = {}, {}
        for device in (args.device, "cpu"):
            tag = f"{device.replace(':', '')}-{sparsity.replace(':', '').replace('+', '-')}"
            thanos_cli(
                "prune-model", "--model", model, "--method", "thanos", "--sparsity", sparsity,
                "--calibration", calib, "--nsamples", 32, "--seqlen", 64, "--device", device,
                "--out", work / f"pruned-{tag}", "--evaluate", "ppl", "--ppl-source", held_out,
                "--workdir", work / f"wd-{tag}",
            )  # fmt: skip
            found = max(  # a combined recipe's last part evaluates the model it publishes
                (p for p in (work / f"wd-{tag}").rglob("eval/perplexity.json") if p.parts[-3] != "dense"),
                key=lambda p: p.stat().st_mtime,
            )
            ppl[device] = json.loads(found.read_text())["ppl"]
            patterns[device] = zero_patterns(work / f"pruned-{tag}")
        same_shapes = {k: v.shape for k, v in patterns[args.device].items()} == {
            k: v.shape for k, v in patterns["cpu"].items()
        }
        agree = (
            f"{equal_entries(patterns[args.device], patterns['cpu']):.2%}" if same_shapes else "other shapes"
        )
        lines.append(
            f"| tiny Llama prune-model {sparsity}: perplexity | {ppl[args.device]:.2f} | {ppl['cpu']:.2f} | "
            f"{agree} |"
        )
        (out / "consistency.md").write_text("\n".join(lines) + "\n")
    (out / "consistency.md").write_text("\n".join(lines) + "\n")
    return lines


def part_models(args, out: Path) -> list[str]:
    lines = ["| block | calibration | seconds | peak GPU memory |", "| --- | --- | --: | --: |"]
    work = args.work / "work-models"
    work.mkdir(parents=True, exist_ok=True)
    calib = write_text(work / "calib.jsonl", 256, 0)
    shapes = {"7B": (4096, 11008, 32, 32, 64), "70B": (8192, 28672, 64, 8, 32)}
    if args.small:
        shapes = {"small": (512, 1376, 8, 8, 8)}
    for name, (hidden, inter, heads, kv, nsamples) in shapes.items():
        model = work / f"llama-{name}"
        thanos_cli(
            "make-tiny-model", "--family", "llama", "--hidden-size", hidden, "--intermediate-size", inter,
            "--num-heads", heads, "--num-kv-heads", kv, "--num-blocks", 1, "--dtype", "bfloat16",
            "--max-position-embeddings", 512, "--out", model,
        )  # fmt: skip
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        seconds = thanos_cli(
            "prune-model", "--model", model, "--method", "thanos", "--sparsity", "0.5",
            "--calibration", calib, "--nsamples", nsamples, "--seqlen", 512, "--device", args.device,
            "--out", work / f"out-{name}", "--workdir", work / f"wd-{name}",
        )  # fmt: skip
        peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else float("nan")
        report = json.loads((work / f"out-{name}" / "pruning_report.json").read_text())
        kernel = sum(entry["seconds"] for entry in report["layers"])
        lines.append(
            f"| Llama-2-{name}-shaped (hidden {hidden}, MLP {inter}) | {nsamples} x 512 | {seconds:.1f} "
            f"(layers {kernel:.1f}) | {peak:.1f} GiB |"
        )
        (out / "models.md").write_text("\n".join(lines) + "\n")
    return lines


def part_workflow(args, out: Path) -> list[str]:
    import yaml

    work = args.work / "work-workflow"
    work.mkdir(parents=True, exist_ok=True)
    text = write_text(work / "text.jsonl", 64, 0)
    lines = ["| run | seconds | equal mask entries vs CPU |", "| --- | --: | --: |"]
    patterns = {}
    runs = [("cpu", "recipe"), (args.device, "layer"), (args.device, "recipe")]
    for device, granularity in runs:
        directory = work / f"{device.replace(':', '')}-{granularity}"
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "models": {"llama": {"path": "models/llama", "tiny": {"family": "llama", "hidden_size": 128}}},
            "calibration": {"source": str(text), "nsamples": 8, "seqlen": 64, "seed": 0},
            "chain": "sequential", "granularity": granularity, "device": device,
            "recipes": RECIPES, "perplexity": {"enabled": False}, "zeroshot": {"enabled": False},
            "evaluate_dense": False, "report": False,
        }  # fmt: skip
        (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(directory),
        ]
        command += ["--configfile", str(directory / "config.yaml"), "--cores", "4", "--nocolor"]
        if device != "cpu":
            command += ["--resources", "gpu=1"]
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode:
            (out / f"workflow-{directory.name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-40000:])
            lines.append(f"| {device}, granularity {granularity} | failed ({proc.returncode}) | - |")
            continue
        patterns[device, granularity] = zero_patterns(directory / "results")
        agree = equal_entries(patterns[device, granularity], patterns["cpu", "recipe"])
        jobs = proc.stderr.count("localrule") + proc.stderr.count("\nrule ")
        lines.append(f"| {device}, granularity {granularity} ({jobs} jobs) | {seconds:.1f} | {agree:.2%} |")
        (out / "workflow.md").write_text("\n".join(lines) + "\n")
    return lines


PARTS = {
    "kernels": part_kernels,
    "models": part_models,
    "consistency": part_consistency,
    "workflow": part_workflow,
}
BUDGET = {"kernels": 120, "models": 220, "consistency": 90, "workflow": 120}  # seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="where the tables go (markdown)")
    parser.add_argument("--authors", help="a checkout of github.com/vectozavr/thanos (its lib/ is read)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to try the script")
    parser.add_argument("--small", action="store_true", help="small shapes: a try of the script, not numbers")
    parser.add_argument("--work", type=Path, help="models, data and runs (default: beside --out)")
    parser.add_argument("--part-timeout", type=int, help="seconds per part (default: BUDGET's)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or args.out.parent
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"# {name}, torch {torch.__version__}, {os.cpu_count()} CPU cores", flush=True)
    for part in args.parts.split(","):
        start = time.perf_counter()
        try:
            with deadline(args.part_timeout or BUDGET[part]):
                lines = PARTS[part](args, args.out)
        except Exception as error:  # a part that fails leaves the others' numbers
            lines = [f"{part} failed: {type(error).__name__}: {error}"]
            import traceback

            (args.out / f"{part}-error.txt").write_text(traceback.format_exc()[-20000:])
        print(f"\n## {part} ({time.perf_counter() - start:.0f} s)\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
