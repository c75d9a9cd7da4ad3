"""``bench/gpu.py``'s parts that run ``thanos`` commands: ``models``, ``search``, ``distill``,
``consistency`` and ``workflow``."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
from gpu_kernels import heavy_tailed_layer  # bench/gpu_kernels.py

REPO = Path(__file__).resolve().parents[1]

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
    runs = list(dict.fromkeys([("cpu", "recipe"), (args.device, "layer"), (args.device, "recipe")]))
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
    model, (hidden, heads) = work / "llama", (96, 6) if args.small else (576, 9)
    thanos_cli(  # 3 key/value groups, as SmolLM2's: a head fewer per group keeps hidden a multiple of heads
        "make-tiny-model", "--family", "llama", "--hidden-size", hidden, "--num-heads", heads,
        "--num-kv-heads", 3, "--num-blocks", 4, "--out", model,
    )  # fmt: skip
    calib = write_text(work / "calib.jsonl", 64, 0)
    lines = ["| device | seconds | parameters kept |", "| --- | --: | --: |"]
    patterns = {}
    for device in dict.fromkeys([args.device, "cpu"]):
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
    if len(patterns) == 1:
        return lines
    shapes = [{k: v.shape for k, v in found.items()} for found in patterns.values()]
    agree = equal_entries(*patterns.values()) if shapes[0] == shapes[-1] else None
    lines.append(
        f"\nequal mask entries, {args.device} against the CPU: "
        + (f"{agree:.2%}" if agree else "other shapes")
    )
    (out / "search.md").write_text("\n".join(lines) + "\n")
    return lines
