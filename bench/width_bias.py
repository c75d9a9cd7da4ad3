"""Width compensation by a bias, measured before building it: does moving the MLP's mean output error into a
bias help a ``neurons:p`` model beyond the least-squares update Thanos already applies?

For each block of the pruned model in order, on calibration windows run through the pruned model (with the
biases of the blocks before it), the mean over tokens of ``dense_mlp(a) - pruned_mlp(a)`` (``a``: the block's
MLP input; the dense MLP of the block it stands for) becomes the bias of its MLP output projection: the best
bias for those weights (it minimises the squared error of the MLP's output given them). The model is written
with ``mlp_bias: true`` (zero biases on the other MLP projections), and the perplexity of both models is
measured as ``bench/structures.py`` does (the first ``--ppl-windows`` windows of 512 tokens of
``DATA/test.jsonl``). Also printed: each block's relative MLP output error on the windows, before and after.

    OMP_WAIT_POLICY=PASSIVE python bench/width_bias.py --dense smollm2 --data demo-data \\
        --pruned bench-struct/out/neurons0.3 --out bench-bias/neurons0.3
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dense", type=Path, required=True, help="the dense model's directory")
    parser.add_argument("--data", type=Path, required=True, help="the demo's data (calib.jsonl, test.jsonl)")
    parser.add_argument("--pruned", type=Path, required=True, help="a neurons:p model of --dense")
    parser.add_argument("--out", type=Path, required=True, help="where the model with biases is written")
    parser.add_argument("--windows", type=int, default=64, help="calibration windows (default 64)")
    parser.add_argument("--seqlen", type=int, default=256, help="their length (default 256)")
    parser.add_argument("--ppl-windows", type=int, default=16, help="perplexity windows of 512 (default 16)")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from thanos.evaluation.perplexity import evaluate_perplexity

    dense = AutoModelForCausalLM.from_pretrained(args.dense, dtype=torch.float32).eval()
    pruned = AutoModelForCausalLM.from_pretrained(args.pruned, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.pruned)
    text = "\n\n".join(json.loads(line)["text"] for line in open(args.data / "calib.jsonl"))
    ids = tokenizer(text, return_tensors="pt").input_ids[0]
    starts = torch.randint(
        0, ids.numel() - args.seqlen, (args.windows,), generator=torch.Generator().manual_seed(0)
    )
    X = torch.stack([ids[s : s + args.seqlen] for s in starts])
    for i, layer in enumerate(pruned.model.layers):
        seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        hook = layer.mlp.register_forward_hook(
            lambda m, a, o, seen=seen: seen.append((a[0].detach(), o.detach()))
        )
        with torch.no_grad():
            for chunk in X.split(8):
                pruned.model(input_ids=chunk)
        hook.remove()
        mlp = dense.model.layers[i].mlp  # a neurons:p model keeps every block
        with torch.no_grad():
            targets = [mlp(a) for a, _ in seen]
            b = sum((y - o).sum((0, 1)) for y, (_, o) in zip(targets, seen, strict=True)) / X.numel()
            norm = sum(float((y**2).sum()) for y in targets)
            before = sum(float(((y - o) ** 2).sum()) for y, (_, o) in zip(targets, seen, strict=True)) / norm
            after = (
                sum(float(((y - o - b) ** 2).sum()) for y, (_, o) in zip(targets, seen, strict=True)) / norm
            )
        layer.mlp.down_proj.bias = torch.nn.Parameter(b)
        print(f"block {i}: relative MLP output error {before:.4f} -> {after:.4f} with the bias", flush=True)
    pruned.config.mlp_bias = True
    for layer in pruned.model.layers:
        for name in ("gate_proj", "up_proj"):
            linear = getattr(layer.mlp, name)
            linear.bias = torch.nn.Parameter(torch.zeros(linear.out_features))
    shutil.rmtree(args.out, ignore_errors=True)
    pruned.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    source = str(args.data / "test.jsonl")
    for label, model in (("dense", args.dense), ("pruned", args.pruned), ("pruned + bias", args.out)):
        result = evaluate_perplexity(
            str(model), source, seqlen=512, device="cpu", max_windows=args.ppl_windows, progress=False
        )
        print(f"{label}: perplexity {result.ppl:.2f}", flush=True)


if __name__ == "__main__":
    main()
