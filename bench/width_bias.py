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

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compensation import calibration_windows, models, parser, print_perplexities, write  # noqa: E402


def main() -> None:
    args = parser(
        __doc__, "a neurons:p model of --dense", "where the model with biases is written"
    ).parse_args()
    dense, pruned, tokenizer = models(args)
    X = calibration_windows(args, tokenizer)
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
    write(pruned, tokenizer, args.out)
    print_perplexities(args, [("dense", args.dense), ("pruned", args.pruned), ("pruned + bias", args.out)])


if __name__ == "__main__":
    main()
