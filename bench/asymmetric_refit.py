"""Compensation toward the dense chain, measured before building it: does refitting each kept block's
attention and MLP output projections so that the pruned model's block outputs match the DENSE model's (the
error passed on by the blocks before included) lower the perplexity of a structured model?

Thanos fits each pruned layer to its own dense output on the pruned chain's inputs (``W X~`` from ``X~``);
this refit targets the dense chain instead (GPTAQ-style asymmetric calibration), and for a depth recipe the
output of the last removed block. For each kept block j in order, on calibration windows run through the
pruned model (the blocks before it already refitted):

1. ``o_proj`` by ridge least squares: block input + ``z Wᵀ`` ≈ the dense block's residual after attention
   (``z``: the heads' outputs), pulled toward the current weights with ``--damp`` x the mean of diag(zᵀz);
2. the block run again, ``down_proj`` the same way: block output ≈ the output of the dense block that the next
   kept block follows (the run's last block for the block before a removed run).

``--exclude F`` leaves out of each fit the tokens whose target norm exceeds F x the median (the attention-sink
positions, whose hidden states are orders of magnitude larger). The model is written with the refitted weights
(same shapes, no parameter added) and both models' perplexity measured as ``bench/structures.py`` does.
``--blocks 13`` refits only block 13 of the pruned model (for ``depth:6``: the first kept block after the
run).

    OMP_WAIT_POLICY=PASSIVE python bench/asymmetric_refit.py --dense smollm2 --data demo-data \\
        --pruned bench-struct/out/neurons0.3 --out exp/asym-n03
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compensation import calibration_windows, models, parser, print_perplexities, write  # noqa: E402


class _Stop(Exception):
    """Raised by a hook once the block of interest has run."""


def kept_blocks(pruned: Path, blocks: int) -> list[int]:
    """The dense block each block of ``pruned`` stands for (its depth part's ``kept``, else all)."""
    report = json.loads((pruned / "pruning_report.json").read_text())
    records = [report] + [
        json.loads((Path(part["out"]) / "pruning_report.json").read_text())
        for part in (report.get("workflow", {}).get("combined") or {}).get("parts", [])
    ]
    for record in records:
        if "depth" in record:
            return list(record["depth"]["kept"])
    return list(range(blocks))


def dense_targets(model: nn.Module, X: torch.Tensor) -> tuple[dict, dict]:
    """Each dense block's output and its residual after attention, on the windows ``X``."""
    outs: dict[int, list] = {}
    mids: dict[int, list] = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: outs.setdefault(i, []).append(o)))
        hooks.append(
            layer.post_attention_layernorm.register_forward_pre_hook(
                lambda m, a, i=i: mids.setdefault(i, []).append(a[0])
            )
        )
    with torch.no_grad():
        for chunk in X.split(8):
            model.model(input_ids=chunk)
    for hook in hooks:
        hook.remove()
    flat = {i: torch.cat(v).flatten(0, 1) for i, v in outs.items()}
    return flat, {i: torch.cat(v).flatten(0, 1) for i, v in mids.items()}


def run_to(model: nn.Module, j: int, linear: nn.Linear, X: torch.Tensor) -> dict[str, torch.Tensor]:
    """Block j of ``model`` on ``X``: ``linear``'s inputs, the residual after attention, the block output."""
    layer = model.model.layers[j]
    got: dict[str, list] = {"inputs": [], "mid": [], "out": []}

    def stop(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        got["out"].append(out)
        raise _Stop

    hooks = [
        linear.register_forward_pre_hook(lambda m, a: got["inputs"].append(a[0])),
        layer.post_attention_layernorm.register_forward_pre_hook(lambda m, a: got["mid"].append(a[0])),
        layer.register_forward_hook(stop),
    ]
    with torch.no_grad():
        for chunk in X.split(8):
            try:
                model.model(input_ids=chunk)
            except _Stop:
                pass
    for hook in hooks:
        hook.remove()
    return {name: torch.cat(v).flatten(0, 1) for name, v in got.items()}


@torch.no_grad()
def refit(linear: nn.Linear, A: torch.Tensor, Y: torch.Tensor, T: torch.Tensor, damp: float, exclude: float):
    """``linear.weight`` <- argmin ||Y + A Wᵀ - T||² + λ||W - W0||² over the tokens kept; returns the
    relative error on them before and after."""
    norms = T.norm(dim=-1)
    keep = norms <= exclude * norms.median() if exclude else torch.ones_like(norms, dtype=torch.bool)
    A, Y, T = A[keep], Y[keep], T[keep]
    G = A.double().T @ A.double()
    lam = damp * G.diagonal().mean()
    W0 = linear.weight.double()
    rhs = A.double().T @ (T - Y).double() + lam * W0.T
    before = float(((Y + A @ linear.weight.T - T) ** 2).sum() / (T**2).sum())
    W = torch.linalg.solve(G + lam * torch.eye(G.shape[0], dtype=G.dtype), rhs).T
    linear.weight.data = W.float().contiguous()
    after = float(((Y + A @ linear.weight.T - T) ** 2).sum() / (T**2).sum())
    return before, after


def main() -> None:
    arguments = parser(__doc__, "a structured model of --dense", "where the refitted model is written")
    arguments.add_argument("--damp", type=float, default=0.01, help="ridge toward the current weights (0.01)")
    arguments.add_argument("--exclude", type=float, default=0.0, help="leave out tokens over F x the median")
    arguments.add_argument(
        "--blocks", default="", help="refit only these blocks of --pruned (comma-separated; default: all)"
    )
    args = arguments.parse_args()
    only = {int(block) for block in args.blocks.split(",") if block.strip()}
    dense, pruned, tokenizer = models(args)
    kept = kept_blocks(args.pruned, len(dense.model.layers))
    X = calibration_windows(args, tokenizer)
    started = time.monotonic()
    outs, mids = dense_targets(dense, X)
    last = len(dense.model.layers) - 1
    for j, layer in enumerate(pruned.model.layers):
        if only and j not in only:
            continue
        follows = kept[j + 1] - 1 if j + 1 < len(kept) else last
        o_proj, down_proj = layer.self_attn.o_proj, layer.mlp.down_proj
        got = run_to(pruned, j, o_proj, X)
        residual = got["mid"] - got["inputs"] @ o_proj.weight.T  # the block's input
        o = refit(o_proj, got["inputs"], residual, mids[kept[j]], args.damp, args.exclude)
        got = run_to(pruned, j, down_proj, X)
        residual = got["out"] - got["inputs"] @ down_proj.weight.T
        d = refit(down_proj, got["inputs"], residual, outs[follows], args.damp, args.exclude)
        print(
            f"block {j} (dense {kept[j]}, target {follows}): relative error o_proj {o[0]:.4f} -> {o[1]:.4f}, "
            f"down_proj {d[0]:.4f} -> {d[1]:.4f} ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    write(pruned, tokenizer, args.out)
    print_perplexities(args, [("pruned", args.pruned), ("refitted", args.out)])


if __name__ == "__main__":
    main()
