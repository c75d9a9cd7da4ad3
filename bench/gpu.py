"""The GPU check: one short call on a GPU machine, every number docs/benchmarks.md "GPU" records.

    python bench/gpu.py --out OUT [--authors DIR] [--parts kernels,models,search] [--work DIR]
    python bench/gpu.py --out OUT --parts distill,consistency,workflow --text results/demo/data
    python bench/gpu.py --out /tmp/gpu --device cpu --small      # try the script itself on a CPU

Parts (each bounded in seconds: ``BUDGET``, 970 in all, more than one device call's 600: two calls, as
above; each writes its table to OUT as soon as it has a row, so a part that fails or runs out of time
leaves the others' results; models and data go to ``--work``):

- ``kernels``: ``prune_layer`` on the issue's layer shapes (4096 x 4096, 11008 x 4096, 4096 x 11008; 8192
  tokens with heavy-tailed feature scales): Thanos 50 % (B = 128, the default, and 512), SparseGPT 50 %,
  Thanos 2:4 and structured 30 %, each against the authors' Thanos (their main.py settings: B = 512,
  v_blocksize = 256) and SparseGPT (B = 128) when ``--authors`` names a checkout of
  github.com/vectozavr/thanos; seconds (synchronised, after a warm-up call; best of 3, theirs best of 2)
  and the objective's ratio to the authors' (their code synchronises CUDA: on a CPU it is left out).
  Also the host waits of one Thanos 50 % and 2:4 call on the first shape (CUDA's sync debug mode; on a
  CPU ``bench/kernel_calls.py``'s count on a GPU's path).
- ``models``: a Llama-2-7B-shaped and a Llama-2-70B-shaped block (random weights, one block each) through
  ``thanos prune-model --device DEVICE`` (Thanos 50 %, 64 x 512 and 32 x 512 calibration tokens): seconds
  and peak GPU memory.
- ``search``: ``thanos prune-model --sparsity params:0.25`` (the size search) of a Llama of 4 blocks of
  width 512 on the device and on the CPU: seconds, parameters kept, equal mask entries; "not available in
  this version" where the installed thanos refuses the sparsity.
- ``distill``: ``thanos distill`` of ``neurons:0.3`` (``prune-model`` on the device) toward the dense model
  on ``--text``'s train.jsonl (``thanos demo-data``'s output, 2.5 MB; without it random words) at each of
  ``--distill-tokens`` (1M and 10M; 4 windows of 512 a step, lr 3e-4, as docs/distillation.md's CPU curve):
  tokens/s, the held-out KL, the perplexity on test.jsonl and the share of the log-perplexity gap closed.
  The dense model is ``--distill-model DIR``; without it, or where DIR holds only a config and tokenizer,
  a random model of SmolLM2-135M's shape (of DIR's config) is built on the device: its tokens/s are
  SmolLM2-135M's, its KL and perplexity only show the part runs. SmolLM2-135M's weights (270 MB in bf16)
  do not fit the 64 MiB a device call carries: its curve needs a GPU machine that holds the model.
- ``consistency``: one 1024 x 1024 layer on the GPU and on the CPU (fp32 both): equal mask entries and the
  objectives; and ``thanos prune-model`` of a tiny Llama on both (bf16 on the GPU, fp32 on the CPU), Thanos
  50 %, ``depth:1`` (its block map fitted on the device) and ``depth:1+neurons:0.3``: perplexity on held-out
  text and equal mask entries.
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
# SmolLM2-135M's config (HuggingFaceTB/SmolLM2-135M): its shape, for tokens/s where its weights cannot travel
SMOLLM2 = {
    "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "max_position_embeddings": 8192,
    "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
}  # fmt: skip
SMALL_SHAPE = SMOLLM2 | {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
}  # fmt: skip
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
    c, b = shapes[0]
    W, X = heavy_tailed_layer(c, b, tokens, device)
    H = 2 * X.T @ X / X.shape[0]
    for pattern in ("0.5", "2:4"):
        waits = host_waits(device, W, H, pattern)
        blocks = -(-b // (128 if pattern == "0.5" else 512))
        lines.append(
            f"\nhost waits of Thanos {pattern} on {c} x {b}: {waits} ({blocks} block{'s' * (blocks > 1)})"
        )
    (out / "kernels.md").write_text("\n".join(lines) + "\n")
    return lines


def host_waits(device: str, W: torch.Tensor, H: torch.Tensor, pattern: str) -> int:
    """The times one ``prune_layer`` (Thanos) makes the host wait for the device: on a GPU the
    synchronising calls CUDA's sync debug mode reports, on a CPU ``bench/kernel_calls.py``'s count of the
    same calls on a GPU's path."""
    import warnings

    from thanos import prune_layer

    if not device.startswith("cuda"):
        sys.path.insert(0, str(REPO / "bench"))
        from kernel_calls import host_waits as counted

        return counted("thanos", pattern, W, H)
    prune_layer(W, H, "thanos", pattern)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            prune_layer(W, H, "thanos", pattern)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


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


def shaped_model(path: Path, small: bool, like: Path | None = None) -> Path:
    """A random Llama in bf16 of SmolLM2-135M's shape (``SMOLLM2``; ``small``: 2 blocks of width 64) with
    the tiny models' byte-level tokenizer, or of the shape of ``like``'s config.json with its tokenizer."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    from thanos.demo.tiny import build_tokenizer

    torch.manual_seed(0)
    if like is not None:
        config = AutoConfig.from_pretrained(like)
    else:
        config = LlamaConfig(**(SMALL_SHAPE if small else SMOLLM2))
    AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(path)
    if like is None:
        build_tokenizer().save_pretrained(path)
    else:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"):
            if (like / name).exists():
                shutil.copy(like / name, path / name)
    return path


def text_dir(args, work: Path) -> Path:
    """``--text`` (train.jsonl, test.jsonl), else a stand-in of random words written under ``work``."""
    if args.text:
        return Path(args.text)
    write_text(work / "train.jsonl", 256, 0)
    write_text(work / "test.jsonl", 32, 1)
    return work


def perplexity(model: Path, text: Path, args) -> float:
    from thanos.evaluation.perplexity import evaluate_perplexity

    seqlen, windows = (128, 4) if args.small else (512, 16)
    result = evaluate_perplexity(
        str(model), str(text / "test.jsonl"), seqlen=seqlen, device=args.device, max_windows=windows,
        progress=False,
    )  # fmt: skip
    return result.ppl


def part_distill(args, out: Path) -> list[str]:
    work = args.work / "work-distill"
    work.mkdir(parents=True, exist_ok=True)
    text = text_dir(args, work)
    model = Path(args.distill_model) if args.distill_model else None
    if model is None or not any(model.glob("*.safetensors")):
        model = shaped_model(work / "dense", args.small, like=model)
    seqlen = 128 if args.small else 512
    pruned = work / "pruned-neurons0.3"
    thanos_cli(
        "prune-model", "--model", model, "--method", "thanos", "--sparsity", "neurons:0.3",
        "--calibration", text / "train.jsonl", "--nsamples", 8 if args.small else 64, "--seqlen", seqlen,
        "--device", args.device, "--out", pruned, "--workdir", work / "wd",
    )  # fmt: skip
    dense_ppl, pruned_ppl = perplexity(model, text, args), perplexity(pruned, text, args)
    lines = [
        f"perplexity on {text}/test.jsonl: {dense_ppl:.2f} dense ({model}), {pruned_ppl:.2f} `neurons:0.3`",
        "",
        "| tokens | steps | tokens/s | held-out KL | distilled perplexity | gap closed | seconds |",
        "| --: | --: | --: | --: | --: | --: | --: |",
    ]
    for tokens in args.distill_tokens:
        distilled = work / f"distilled-{tokens}"
        seconds = thanos_cli(
            "distill", "--student", pruned, "--teacher", model, "--source", text / "train.jsonl",
            "--tokens", tokens, "--seqlen", seqlen, "--batch-size", 4, "--lr", "3e-4", "--out", distilled,
            "--work", work / f"checkpoints-{tokens}", "--device", args.device, "--no-progress", "--overwrite",
        )  # fmt: skip
        record = json.loads((distilled / "distillation.json").read_text())
        ppl = perplexity(distilled, text, args)
        gap = math.log(pruned_ppl / dense_ppl)
        closed = f"{1 - math.log(ppl / dense_ppl) / gap:.1%}" if gap > 0 else "no gap"
        kl = f"{record['heldout'][0]['kl']:.3g} -> {record['best']['kl']:.3g}"
        lines.append(
            f"| {tokens:,} | {record['steps']} | {record['tokens_per_second']:.0f} | {kl} | {ppl:.2f} | "
            f"{closed} | {seconds:.0f} |"
        )
        (out / "distill.md").write_text("\n".join(lines) + "\n")
    return lines


def parameters(directory: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in directory.rglob("*.safetensors"):
        with safe_open(str(path), "pt") as handle:
            total += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    return total


def part_search(args, out: Path) -> list[str]:
    """``prune-model --sparsity params:0.25`` on the device and on the CPU, where the installed thanos
    has the size search; "not available in this version" where it refuses the sparsity."""
    import io

    work = args.work / "work-search"
    work.mkdir(parents=True, exist_ok=True)
    model, hidden = work / "llama", 128 if args.small else 512
    thanos_cli(
        "make-tiny-model", "--family", "llama", "--hidden-size", hidden, "--num-blocks", 4, "--out", model
    )
    calib = write_text(work / "calib.jsonl", 64, 0)
    lines = [
        "| device | seconds | parameters kept | equal mask entries vs CPU |",
        "| --- | --: | --: | --: |",
    ]
    patterns = {}
    for device in (args.device, "cpu"):
        pruned, errors = work / f"pruned-{device.replace(':', '')}", io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                seconds = thanos_cli(
                    "prune-model", "--model", model, "--method", "thanos", "--sparsity", "params:0.25",
                    "--calibration", calib, "--nsamples", 32, "--seqlen", 128, "--device", device,
                    "--out", pruned, "--workdir", work / f"wd-{device.replace(':', '')}",
                )  # fmt: skip
        except RuntimeError:
            if "cannot parse 'params:0.25'" in errors.getvalue():
                return [
                    "search params:0.25: not available in this version (prune-model refuses the sparsity)"
                ]
            raise RuntimeError(errors.getvalue()[-4000:]) from None
        patterns[device] = zero_patterns(pruned)
        kept = parameters(pruned) / parameters(model)
        lines.append(f"| {device} | {seconds:.1f} | {kept:.1%} |")
        (out / "search.md").write_text("\n".join(lines) + "\n")
    shapes = [{k: v.shape for k, v in found.items()} for found in patterns.values()]
    agree = equal_entries(*patterns.values()) if shapes[0] == shapes[-1] else None
    lines.append(
        f"\nequal mask entries, {args.device} against the CPU: "
        + (f"{agree:.2%}" if agree else "other shapes")
    )
    (out / "search.md").write_text("\n".join(lines) + "\n")
    return lines


PARTS = {
    "kernels": part_kernels,
    "models": part_models,
    "search": part_search,
    "distill": part_distill,
    "consistency": part_consistency,
    "workflow": part_workflow,
}
BUDGET = {"kernels": 120, "models": 220, "search": 120, "distill": 300, "consistency": 90, "workflow": 120}


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
    parser.add_argument(
        "--text", help="distill: a directory with train.jsonl and test.jsonl (thanos demo-data)"
    )
    parser.add_argument(
        "--distill-model", help="distill: the dense model (with only config and tokenizer: random weights)"
    )
    parser.add_argument(
        "--distill-tokens",
        type=int,
        nargs="+",
        help="distill: token budgets (default 1M 10M; --small 8k 16k)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or args.out.parent
    args.distill_tokens = args.distill_tokens or ([8192, 16384] if args.small else [1 << 20, 10 << 20])
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
