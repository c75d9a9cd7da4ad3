"""Smaller and faster: MLP neurons, attention heads, whole blocks and a combination removed for real, on a
real model: parameters, file size, CPU decode and prefill speed against dense in the same process, and
perplexity on held-out text.

Every output is ``thanos prune-model --method thanos --sparsity S`` (compact: written smaller) calibrated on
``--nsamples`` x ``--seqlen`` tokens of ``DATA/calib.jsonl``, for S in ``--recipes`` (default: neurons:0.3,
heads:0.33, depth:6, depth:4+neurons:0.3, about a quarter fewer parameters on SmolLM2-135M, and
heads:0.33+neurons:0.3; ``@recover`` adds ``--recover`` with its defaults, here to the combination). Speed and
perplexity are measured as ``bench/compact.py`` measures them (alternating rounds, the median of the per-round
ratios to dense; the first ``--ppl-windows`` windows of 512 tokens of ``DATA/test.jsonl``).

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

from compact import add_measure_arguments, perplexities, safetensors_facts, speeds  # noqa: E402

RECIPES = (
    "neurons:0.3",
    "heads:0.33",
    "depth:6",
    "depth:6@nomap",
    "depth:4+neurons:0.3",
    "depth:4+neurons:0.3@nomap",
    "heads:0.33+neurons:0.3",
)


def prune_all(args: argparse.Namespace) -> dict[str, dict]:
    from thanos import prune_model

    outputs = {}
    for name in args.recipes:
        sparsity, _, extra = name.partition("@")
        out = Path(args.work) / "out" / name.replace(":", "").replace("+", "_").replace("@", "_")
        started = time.perf_counter()
        report = prune_model(
            args.model,
            "thanos",
            sparsity,
            recover=True if extra == "recover" else None,
            block_map=False if extra == "nomap" else None,
            out=out,
            calibration=str(Path(args.data) / "calib.jsonl"),
            nsamples=args.nsamples,
            seqlen=args.seqlen,
            device="cpu",
            cores=args.threads,
            workdir=Path(args.work) / "workdir",
            stream=io.StringIO(),
        )
        print(f"pruned {name}: {time.perf_counter() - started:.0f} s", flush=True)
        outputs[name] = {"dir": out, "report": report}
    return outputs


def shape(model_dir: Path) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    return (
        f"{config['num_hidden_layers']} x ({config['num_attention_heads']}/{config['num_key_value_heads']} "
        f"heads, MLP {config['intermediate_size']})"
    )


def other_metric(args: argparse.Namespace, outputs: dict[str, dict]) -> dict[str, Path]:
    """The depth recipe's model with its blocks chosen otherwise, from the same stores: the k blocks of the
    lowest influence with their maps (the run the maps replace best is the default; the lowest influence
    without maps is the ``@nomap`` row)."""
    from thanos.models import ModelHandle
    from thanos.pruning.sparsity import parse_sparsity
    from thanos.recipe import Recipe
    from thanos.stages.assemble import assemble
    from thanos.stages.depth import depth_plan

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
    add_measure_arguments(parser)
    args = parser.parse_args()
    args.recipes = args.recipes.split(",")

    import torch

    outputs = prune_all(args)
    models = {"dense": Path(args.model)} | {name: value["dir"] for name, value in outputs.items()}
    speed = speeds(args, models)
    metrics = other_metric(args, outputs)
    ppl = perplexities(args, models | {k: v for k, v in metrics.items() if v not in models.values()})
    dense_params, dense_bytes = safetensors_facts(Path(args.model))

    print()
    print(
        f"model {args.model}; torch {torch.__version__}, {args.threads} threads, float32 for speed; "
        f"{os.cpu_count()} CPUs (shared); {args.runs} alternating rounds: median of the per-round ratios; "
        f"perplexity on the first {args.ppl_windows} windows of 512 tokens of {args.data}/test.jsonl"
    )
    print()
    header = [
        "removed (Thanos)",
        "blocks x (heads, MLP)",
        "parameters",
        "vs dense",
        "safetensors",
        "vs dense",
    ]
    header += ["decode tok/s (b=1)", "vs dense", f"prefill {args.prefill} tok/s", "vs dense", "perplexity"]
    print("| " + " | ".join(header) + " |")
    print("| --- | --- |" + " --: |" * (len(header) - 2))
    for name, path in models.items():
        params, size = safetensors_facts(path)
        s = speed[name]
        print(
            f"| {'none (dense)' if name == 'dense' else name} | {shape(path)} | {params / 1e6:.2f} M | "
            f"{params / dense_params:.3f} | {size / 2**20:.1f} MiB | {size / dense_bytes:.3f} | "
            f"{s['decode']['median']:.1f} | {s['decode']['ratio']:.2f}x | {s['prefill']['median']:.0f} | "
            f"{s['prefill']['ratio']:.2f}x | {ppl[name]:.2f} |"
        )
    if metrics:
        print()
        print("| block score (depth) | perplexity |")
        print("| --- | --: |")
        for name, path in metrics.items():
            same = [key for key, value in models.items() if value == path]  # the recipe's own output
            print(f"| {name} | {ppl[same[0] if same else name]:.2f} |")
    record = {"speed": speed, "ppl": ppl, "outputs": {k: str(v["dir"]) for k, v in outputs.items()}}
    (Path(args.work) / "bench_structures.json").write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
