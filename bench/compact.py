"""MLP-neuron removal with a compact output, on a real model: size, CPU speed and perplexity against dense.

For each method (Thanos structured at alpha 0, the Wanda metric and magnitude, without update for the last
two) and each fraction of MLP neurons removed, ``thanos prune-model --sparsity neurons:P`` (compact output,
the default) on the model, calibrated on ``--nsamples`` x ``--seqlen`` tokens of ``DATA/calib.jsonl`` (the
demo's Wikipedia text, ``thanos demo-data``); beside them the paper's structured 30 % (Thanos, alpha 0.1,
every layer, zeros in the original shape). Then

- parameters and safetensors bytes of every output against the dense model;
- CPU speed, in this one process, dense and the compact models (one per fraction: the speed depends on the
  shapes only, and Thanos' output is taken) loaded in float32, measured in ``--runs`` rounds that alternate
  the models: greedy decoding of ``--new-tokens`` tokens at batch 1 after a 16-token prompt (tokens/s of
  the decode), and the prefill of ``--prefill`` tokens at batch 1 (one forward, tokens/s). The ratio to
  dense is taken within each round and its median reported, so load from other processes on a shared
  machine cancels as far as it can;
- perplexity of every output and of dense on the first ``--ppl-windows`` windows of 512 tokens of
  ``DATA/test.jsonl`` (the real-model workflow's setting, ``workflow/configs/real-llm.yaml``).

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    OMP_WAIT_POLICY=PASSIVE python bench/compact.py --model smollm2 --data demo-data --work bench-compact
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

METHODS = ("thanos", "wanda", "magnitude")


def safetensors_facts(model_dir: Path) -> tuple[int, int]:
    """(parameters, bytes of the safetensors files) of a model directory."""
    import math

    from safetensors import safe_open

    params = size = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        size += file.stat().st_size
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():  # noqa: SIM118
                params += math.prod(handle.get_slice(name).get_shape())
    return params, size


def prune_all(args: argparse.Namespace) -> dict[str, dict]:
    """Every output (pruned once; a rerun finds them in the working directory and publishes again)."""
    from thanos import prune_model

    calib = str(Path(args.data) / "calib.jsonl")
    jobs = {}
    for fraction in args.fractions:
        for method in args.methods:
            jobs[f"{method}-n{fraction:g}"] = (method, f"neurons:{fraction:g}", None, fraction)
    jobs["thanos-s0.3-a0.1"] = ("thanos", "structured:0.3", 0.1, None)
    outputs = {}
    for name, (method, sparsity, alpha, fraction) in jobs.items():
        out = Path(args.work) / "out" / name
        started = time.perf_counter()
        report = prune_model(
            args.model,
            method,
            sparsity,
            alpha=alpha,
            out=out,
            calibration=calib,
            nsamples=args.nsamples,
            seqlen=args.seqlen,
            device="cpu",
            cores=args.threads,
            workdir=Path(args.work) / "workdir",
            stream=io.StringIO(),
        )
        seconds = time.perf_counter() - started
        compact = report.get("compact")
        print(
            f"pruned {name}: {seconds:.0f} s"
            + (f", width {compact['original_width']} -> {compact['kept_width']}" if compact else ""),
            flush=True,
        )
        outputs[name] = {
            "dir": out,
            "method": method,
            "sparsity": sparsity,
            "fraction": fraction,
            "compact": compact,
        }
    return outputs


def perplexities(args: argparse.Namespace, models: dict[str, Path]) -> dict[str, float]:
    """Each model's perplexity on the held-out articles: per token, and per token of the dense model's
    tokenization where the model's tokenizer differs (a pruned vocabulary: from its bits per byte)."""
    return {name: result["ppl"] for name, result in perplexity_results(args, models).items()}


def perplexity_results(args: argparse.Namespace, models: dict[str, Path]) -> dict[str, dict]:
    """``perplexities``' results in full (``perplexity.json``'s fields), ``ppl`` per original token, the
    model's own per token as ``ppl_own``; ``models`` starts with the dense one."""
    from thanos.evaluation.perplexity import evaluate_perplexity
    from thanos.recipes.labels import per_original_token

    source = str(Path(args.data) / "test.jsonl")
    found: dict[str, dict] = {}
    for name, path in models.items():
        result = evaluate_perplexity(
            str(path),
            source,
            seqlen=args.ppl_seqlen,
            device="cpu",
            max_windows=args.ppl_windows,
            progress=False,
        ).to_dict()
        dense = next(iter(found.values()), result)
        result["ppl_own"] = result["ppl"]
        if result["text_tokens"] != dense["text_tokens"]:
            result["ppl"] = per_original_token(result, dense)
        found[name] = result
        print(
            f"perplexity {name}: {result['ppl']:.3f} per original token, "
            f"{result['bits_per_byte']:.4f} bits per byte",
            flush=True,
        )
    return found


def speeds(args: argparse.Namespace, models: dict[str, Path]) -> dict[str, dict]:
    """Decode and prefill tokens/s per model per round, rounds alternating the models."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    loaded = {
        name: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        for name, path in models.items()
    }
    generator = torch.Generator().manual_seed(0)
    vocab = min(model.config.vocab_size for model in loaded.values())  # ids every model has (vocab: pruned)
    prompt = torch.randint(100, vocab, (1, 16), generator=generator)
    long = torch.randint(100, vocab, (1, args.prefill), generator=generator)
    rounds: dict[str, dict[str, list[float]]] = {name: {"decode": [], "prefill": []} for name in loaded}

    def decode(model) -> float:
        started = time.perf_counter()
        model.generate(
            prompt,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        return args.new_tokens / (time.perf_counter() - started)

    def prefill(model) -> float:
        started = time.perf_counter()
        model(long, use_cache=False)
        return args.prefill / (time.perf_counter() - started)

    with torch.inference_mode():
        for model in loaded.values():  # warm-up
            decode(model)
            prefill(model)
        for r in range(args.runs):
            order = list(loaded) if r % 2 == 0 else list(reversed(loaded))
            for name in order:
                rounds[name]["decode"].append(decode(loaded[name]))
                rounds[name]["prefill"].append(prefill(loaded[name]))
    dense = rounds["dense"]
    result = {}
    for name, measured in rounds.items():
        result[name] = {
            kind: {
                "median": statistics.median(values),
                "ratio": statistics.median(v / d for v, d in zip(values, dense[kind], strict=True)),
                "best": max(values),
                "best_ratio": max(values) / max(dense[kind]),
                "all": values,
            }
            for kind, values in measured.items()
        }
    return result


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """The calibration and the measurements' options (what ``speeds`` and ``perplexities`` read, with
    ``--data``), shared with ``bench/structures.py``."""
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--ppl-windows", type=int, default=16)
    parser.add_argument("--ppl-seqlen", type=int, default=512, help="tokens per perplexity window")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prefill", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the model directory (python -m thanos real-model)")
    parser.add_argument("--data", required=True, help="demo data directory (python -m thanos demo-data)")
    parser.add_argument("--work", required=True, help="working directory (outputs, workflow intermediates)")
    parser.add_argument("--fractions", default="0.2,0.3,0.5", help="fractions of MLP neurons removed")
    parser.add_argument("--methods", default=",".join(METHODS))
    add_measure_arguments(parser)
    parser.add_argument("--skip-ppl", action="store_true", help="reuse the perplexities of an earlier run")
    args = parser.parse_args()
    args.fractions = [float(f) for f in args.fractions.split(",")]
    args.methods = args.methods.split(",")

    import torch

    outputs = prune_all(args)
    dense_params, dense_bytes = safetensors_facts(Path(args.model))
    timed = {"dense": Path(args.model)}
    for fraction in args.fractions:
        timed[f"n{fraction:g}"] = outputs[f"{args.methods[0]}-n{fraction:g}"]["dir"]
    speed = speeds(args, timed)
    record_file = Path(args.work) / "bench_compact.json"
    if args.skip_ppl:  # the perplexities of an earlier run, if any
        ppl = json.loads(record_file.read_text())["ppl"] if record_file.is_file() else {}
    else:
        ppl = perplexities(args, {"dense": Path(args.model)} | {k: v["dir"] for k, v in outputs.items()})

    print()
    print(
        f"model {args.model}; torch {torch.__version__}, {args.threads} threads, float32 for speed; "
        f"{os.cpu_count()} CPUs (shared); {args.runs} alternating rounds: median of the per-round ratios, "
        "and the best round of each model against dense's best"
    )
    print()
    header = ["neurons removed", "MLP width", "parameters", "vs dense", "safetensors", "vs dense"]
    header += ["decode tok/s (b=1)", "vs dense", "best-of-N vs dense"]
    header += [f"prefill {args.prefill} tok/s", "vs dense", "best-of-N vs dense"]
    print("| " + " | ".join(header) + " |")
    print("| --- | --- |" + " --: |" * (len(header) - 2))
    for name, path in timed.items():
        params, size = safetensors_facts(path)
        if name == "dense":
            label, width = (
                "0 % (dense)",
                str(json.loads((path / "config.json").read_text()).get("intermediate_size")),
            )
        else:
            compact = outputs[f"{args.methods[0]}-{name}"]["compact"]
            removed = compact["removed_per_block"] / compact["original_width"]
            label = f"{100 * float(name[1:]):g} % asked, {100 * removed:.1f} % removed"
            width = f"{compact['original_width']} -> {compact['kept_width']}"
        s = speed[name]
        print(
            f"| {label} | {width} | {params / 1e6:.2f} M | {params / dense_params:.3f} | "
            f"{size / 2**20:.1f} MiB | "
            f"{size / dense_bytes:.3f} | {s['decode']['median']:.1f} | {s['decode']['ratio']:.2f}x | "
            f"{s['decode']['best_ratio']:.2f}x | {s['prefill']['median']:.0f} | "
            f"{s['prefill']['ratio']:.2f}x | {s['prefill']['best_ratio']:.2f}x |"
        )
    if ppl:
        print()
        print(
            f"Perplexity, first {args.ppl_windows} windows of 512 tokens of {args.data}/test.jsonl "
            f"(dense {ppl['dense']:.2f}):"
        )
        print()
        print("| MLP neurons removed | " + " | ".join(m.capitalize() for m in args.methods) + " |")
        print("| --- |" + " --: |" * len(args.methods))
        for fraction in args.fractions:
            values = [ppl[f"{m}-n{fraction:g}"] for m in args.methods]
            best = min(values)
            cells = [f"**{v:.2f}**" if v == best else f"{v:.2f}" for v in values]
            print(f"| {100 * fraction:g} % | " + " | ".join(cells) + " |")
        print()
        print(
            "Paper's structured 30 % (Thanos, alpha 0.1, every layer, zeros in the original shape): "
            f"{ppl['thanos-s0.3-a0.1']:.2f}"
        )
    record = {
        "speed": speed,
        "ppl": ppl,
        "outputs": {k: {**v, "dir": str(v["dir"])} for k, v in outputs.items()},
    }
    record_file.write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
