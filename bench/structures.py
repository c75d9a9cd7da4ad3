"""Smaller and faster: MLP neurons, attention heads, whole blocks and a combination removed for real, on a
real model: parameters, file size, CPU decode and prefill speed against dense in the same process, and
perplexity on held-out text.

Every output is ``thanos prune-model --method thanos --sparsity S`` (compact: written smaller) calibrated on
``--nsamples`` x ``--seqlen`` tokens of ``DATA/calib.jsonl`` (``--calibration`` another file), for S in
``--recipes`` (default: neurons:0.3, heads:0.33, depth:6, vocab:0.3, vocab:0.5, depth:4+neurons:0.3, about a
quarter fewer parameters on SmolLM2-135M, heads:0.33+neurons:0.3, and the sizes params:0.15, params:0.25,
params:0.35, whose whole command's time (its search, then its write) is printed beside the time of writing
the recipe it chose on its own, in a working directory of its own (candidates measured by an earlier run or an
earlier size are read, not measured; the seconds its candidates took when each was measured, summed, beside);
``@recover`` adds ``--recover`` with its defaults). Speed and perplexity are measured as ``bench/compact.py``
measures them (alternating rounds, the median of the per-round ratios to dense, the prompts' token ids ones
every model has; the first ``--ppl-windows`` windows of 512 tokens of ``DATA/test.jsonl``, per token of the
dense model's tokenization where the vocabulary was pruned, and in bits per byte).

``@nomap`` runs a depth recipe with ``block_map=False`` (the removed blocks left out without a fitted map,
the lowest-influence blocks); it also compares, for the depth recipe, the default choice (the run of blocks
whose map replaces it best) with the lowest-influence blocks given maps too, by perplexity.

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    OMP_WAIT_POLICY=PASSIVE python bench/structures.py --model smollm2 --data demo-data \
        --work bench-struct --nsamples 64
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).parent))

from compact import add_measure_arguments, perplexity_results, safetensors_facts, speeds  # noqa: E402

RECIPES = (
    "neurons:0.3",
    "heads:0.33",
    "depth:6",
    "depth:6@nomap",
    "vocab:0.3",
    "vocab:0.5",
    "depth:4+neurons:0.3",
    "depth:4+neurons:0.3@nomap",
    "heads:0.33+neurons:0.3",
    "params:0.15",
    "params:0.25",
    "params:0.35",
)


def prune(args: argparse.Namespace, name: str, out: Path, workdir: Path) -> tuple[dict, float]:
    """``name`` (a ``--recipes`` entry) pruned to ``out``: its report and the seconds it took."""
    from thanos import prune_model

    sparsity, _, extra = name.partition("@")
    started = time.perf_counter()
    report = prune_model(
        args.model,
        "thanos",
        sparsity,
        recover=True if extra == "recover" else None,
        block_map=False if extra == "nomap" else None,
        out=out,
        calibration=args.calibration or str(Path(args.data) / "calib.jsonl"),
        nsamples=args.nsamples,
        seqlen=args.seqlen,
        device="cpu",
        cores=args.threads,
        workdir=workdir,
        stream=io.StringIO(),
    )
    return report, time.perf_counter() - started


def prune_all(args: argparse.Namespace) -> dict[str, dict]:
    """Every recipe in one working directory (they share its steps); a size's chosen recipe also written
    alone in a working directory of its own (``alone_seconds``: what its search's time compares with)."""
    outputs = {}
    for name in args.recipes:
        out = Path(args.work) / "out" / name.replace(":", "").replace("+", "_").replace("@", "_")
        report, seconds = prune(args, name, out, Path(args.work) / "workdir")
        print(f"pruned {name}: {seconds:.0f} s", flush=True)
        outputs[name] = {"dir": out, "report": report}
        if "search" in report:
            report["search"]["command_seconds"] = seconds
            chosen, alone = report["search"]["chosen"], Path(args.work) / "alone" / out.name
            _, report["search"]["alone_seconds"] = prune(args, chosen, alone / "out", alone / "workdir")
            print(f"pruned {chosen} alone: {report['search']['alone_seconds']:.0f} s", flush=True)
    return outputs


def shape(model_dir: Path) -> str:
    """``30 x (9/3, 1536), 49,152 tokens``: blocks x (query/kv heads, MLP width), vocabulary."""
    config = json.loads((model_dir / "config.json").read_text())
    return (
        f"{config['num_hidden_layers']} x ({config['num_attention_heads']}/{config['num_key_value_heads']}, "
        f"{config['intermediate_size']}), {config['vocab_size']:,} tokens"
    )


def label(name: str, outputs: dict[str, dict]) -> str:
    """A row's first cell: the recipe (``--no-block-map`` for ``@nomap``), a size with the mix it chose."""
    if name == "dense":
        return "nothing (dense)"
    sparsity, _, extra = name.partition("@")
    text = f"`{sparsity}`" + (" `--no-block-map`" if extra == "nomap" else "")
    search = outputs[name]["report"].get("search")
    return f"{text} -> `{search['chosen']}`" if search else text


def other_metric(args: argparse.Namespace, outputs: dict[str, dict]) -> dict[str, Path]:
    """The depth recipe's model with its blocks chosen otherwise, from the same stores: the k blocks of the
    lowest influence with their maps (the run the maps replace best is the default; the lowest influence
    without maps is the ``@nomap`` row)."""
    from thanos.models import ModelHandle
    from thanos.pruning.sparsity import parse_sparsity
    from thanos.recipes.recipe import Recipe
    from thanos.stages.assemble import assemble
    from thanos.stages.depth.blocks import depth_plan

    depth = next((s for s in args.recipes if s.startswith("depth") and "+" not in s and "@" not in s), None)
    if depth is None:
        return {}
    plan_file = next(Path(args.work, "workdir").rglob(f"thanos_{depth.replace(':', '')}/depth.json"))
    stores = sorted(
        plan_file.parents[1].glob("chains/dense/inputs_*"), key=lambda p: int(p.stem.split("_")[1])
    )
    work = Path(args.work) / "depth-influence-maps"
    plan = depth_plan(
        stores, parse_sparsity(depth), work / "depth.json", "influence", ModelHandle.open(args.model), True
    )
    print(f"{depth}, lowest influence with maps: blocks {plan['removed']}", flush=True)
    out = Path(args.work) / "out" / f"{depth.replace(':', '')}-influence-maps"
    if not out.is_dir():
        assemble(args.model, work, Recipe("d", "thanos", depth), out, depth=work / "depth.json")
    return {
        f"{depth} (run the maps replace best, with maps)": outputs[depth]["dir"],
        f"{depth} (lowest influence, with maps)": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the model directory (python -m thanos real-model)")
    parser.add_argument("--data", required=True, help="demo data directory (python -m thanos demo-data)")
    parser.add_argument("--work", required=True, help="working directory (outputs, intermediates)")
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated --sparsity values")
    parser.add_argument("--calibration", default=None, help="the calibration text (default DATA/calib.jsonl)")
    add_measure_arguments(parser)
    args = parser.parse_args()
    args.recipes = args.recipes.split(",")

    import torch

    outputs = prune_all(args)
    models = {"dense": Path(args.model)} | {name: value["dir"] for name, value in outputs.items()}
    speed = speeds(args, models)
    metrics = other_metric(args, outputs)
    results = perplexity_results(
        args, models | {k: v for k, v in metrics.items() if v not in models.values()}
    )
    ppl = {name: result["ppl"] for name, result in results.items()}
    dense_params, dense_bytes = safetensors_facts(Path(args.model))

    print()
    print(
        f"model {args.model}; torch {torch.__version__}, {args.threads} threads, float32 for speed; "
        f"{os.cpu_count()} CPUs (shared); {args.runs} alternating rounds: median of the per-round ratios; "
        f"perplexity on the first {args.ppl_windows} windows of 512 tokens of {args.data}/test.jsonl"
    )
    print()
    print(
        "| removed | blocks x (query/kv heads, MLP), vocabulary | parameters | file | CPU decode | "
        "CPU prefill (512) | perplexity (x dense) | bits per byte |"
    )
    print("| :-- | :-- | --: | --: | --: | --: | --: | --: |")
    for name, path in models.items():
        params, size = safetensors_facts(path)
        s, result = speed[name], results[name]
        removed = "" if name == "dense" else f"{100 * (params / dense_params - 1):+.1f} %"
        print(
            f"| {label(name, outputs)} | {shape(path)} | {removed or f'{params / 1e6:.1f} M'} | "
            f"{size / 2**20:.1f} MiB | {s['decode']['ratio']:.2f}x | {s['prefill']['ratio']:.2f}x | "
            f"{ppl[name]:.2f} ({ppl[name] / ppl['dense']:.2f}x) | {result['bits_per_byte']:.3f} |"
        )
    searched = {
        name: value["report"]["search"] for name, value in outputs.items() if "search" in value["report"]
    }
    if searched:
        print()
        print(
            "| size | chosen | candidates | whole command | its search | its write | the chosen recipe "
            "pruned alone (fresh) | ratio | its candidates' own seconds, summed |"
        )
        print("| --- | --- | --: | --: | --: | --: | --: | --: | --: |")
        for name, search in searched.items():
            took, alone = search["command_seconds"], search["alone_seconds"]
            fresh = sum(candidate["seconds"] for candidate in search["candidates"])
            print(
                f"| `{name}` | `{search['chosen']}` | {len(search['candidates'])} | {took:.0f} s | "
                f"{search['seconds']:.0f} s | {search['write_seconds']:.0f} s | {alone:.0f} s | "
                f"{took / alone:.1f}x | {fresh:.0f} s |"
            )
    if metrics:
        print()
        print("| block score (depth) | perplexity |")
        print("| --- | --: |")
        for name, path in metrics.items():
            same = [key for key, value in models.items() if value == path]  # the recipe's own output
            print(f"| {name} | {ppl[same[0] if same else name]:.2f} |")
    record = {"speed": speed, "ppl": results, "outputs": {k: str(v["dir"]) for k, v in outputs.items()}}
    record["searches"] = searched
    (Path(args.work) / "bench_structures.json").write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
