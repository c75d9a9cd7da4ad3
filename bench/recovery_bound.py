"""How much training on the calibration tokens can close a pruned model's perplexity gap: block-wise
reconstruction variants and whole-model distillation, in one process, in fp32 (an experiment beside the
pipeline, for Llama-family checkpoints: it runs the decoder layers of ``transformers`` directly).

Given the dense model and a compact pruned model written by ``thanos prune-model`` (``neurons:p``,
``heads:p``: every weight it holds is kept, so every weight is trained; a model with zeros inside its
matrices is refused, as this trains them), it

- trains the pruned model's blocks one after the other as ``--recover`` does (each block's linear weights
  by Adam, the learning rate decayed linearly to 0, to the dense model's outputs of that block, the inputs
  from the blocks already trained, the best epoch on the last eighth of the windows kept), with variants
  the pipeline does not offer: the norms trained too (``--norms``), the error of each feature divided by
  its mean square in the targets (``--loss featnorm``), ``--group`` consecutive blocks trained together;
- or, with ``--distill-epochs`` (and ``--no-blockwise``), distils the whole model at once: the pruned
  model's next-token distribution trained to the dense model's (KL divergence on the calibration windows
  the block-wise runs train on): what training the whole model at once reaches on the same tokens;

then prints the perplexity on the held-out text and the gap closed,
``(ln p_pruned - ln p_recovered) / (ln p_pruned - ln p_dense)``.

    OMP_WAIT_POLICY=PASSIVE python bench/recovery_bound.py --dense smollm2 --pruned smol-n30 \\
        --calibration demo-data/calib.jsonl --heldout demo-data/test.jsonl --no-blockwise --distill-epochs 4
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from thanos.data.calibration import load_source, sample_windows
from thanos.evaluation.perplexity import load_eval_text, tokenize_windows, window_nll
from thanos.pruning.recovery import batched, recover_block, split_windows


def perplexity(model: nn.Module, windows: torch.Tensor) -> float:
    nll = window_nll(model, windows, "cpu", progress=False)
    return math.exp(nll / (windows.shape[0] * (windows.shape[1] - 1)))


def run(layers: list[nn.Module], X: torch.Tensor, rotary: nn.Module) -> torch.Tensor:
    """``layers`` one after the other over ``X`` (causal attention, positions 0..seqlen-1)."""
    positions = torch.arange(X.shape[1])[None]
    for layer in layers:
        X = layer(X, position_embeddings=rotary(X, positions), position_ids=positions)
    return X


def over(layers: list[nn.Module], X: torch.Tensor, rotary: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([run(layers, X[i : i + 8], rotary) for i in range(0, X.shape[0], 8)])


def train_group(
    trained: list[nn.Module], X: torch.Tensor, Y: torch.Tensor, rotary: nn.Module, args: argparse.Namespace
) -> tuple[float, float]:
    """``trained``'s weights fitted to ``Y`` from ``X`` by the pipeline's ``recover_block`` (the last eighth
    of the windows held out); return the held-out loss before and after. ``--loss featnorm``: outputs and
    targets divided by each feature's root mean square in the training targets (the held-out loss too)."""
    ntrain = X.shape[0] - X.shape[0] // 8
    weights = {
        f"{i}.{name}": p
        for i, layer in enumerate(trained)
        for name, p in layer.named_parameters()
        if name.endswith("proj.weight") or (args.norms and "norm" in name)
    }
    for p in weights.values():
        p.requires_grad_(True)
    scale = Y[:ntrain].pow(2).mean(dim=(0, 1)).clamp_min(1e-6).sqrt() if args.loss == "featnorm" else 1.0
    train_idx, val_idx = split_windows(X.shape[0], X.shape[0] // 8)

    def pairs(indices: list[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in batched(indices, args.batch_size):
            yield X[batch], Y[batch] / scale

    def train(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(ntrain, generator=torch.Generator().manual_seed(epoch))
        return pairs(order.tolist())

    result = recover_block(
        lambda X: run(trained, X, rotary) / scale,
        weights,
        {name: torch.ones_like(p, dtype=torch.bool) for name, p in weights.items()},  # compact: all kept
        train,
        len(batched(train_idx, args.batch_size)),
        lambda: pairs(val_idx),
        args.epochs,
        args.lr,
    )
    for p in weights.values():
        p.requires_grad_(False)
    return result.loss_before, result.loss_after


def blockwise(dense: nn.Module, pruned: nn.Module, calib: torch.Tensor, args: argparse.Namespace) -> None:
    """The pruned model's blocks trained in order (``args.group`` at a time), in place: each on what the
    blocks trained before it give, to the dense model's outputs."""
    rotary = pruned.model.rotary_emb
    with torch.no_grad():
        Xp = pruned.model.embed_tokens(calib)
    Xd = Xp.clone()
    blocks = len(pruned.model.layers)
    for first in range(0, blocks, args.group):
        ids = list(range(first, min(blocks, first + args.group)))
        trained, frozen = [pruned.model.layers[i] for i in ids], [dense.model.layers[i] for i in ids]
        Y = over(frozen, Xd, rotary)
        before, after = train_group(trained, Xp, Y, rotary, args)
        Xp, Xd = over(trained, Xp, rotary), Y
        print(f"blocks {ids}: held-out loss {before:.5g} -> {after:.5g}", flush=True)


def distill(dense: nn.Module, pruned: nn.Module, calib: torch.Tensor, args: argparse.Namespace) -> None:
    """The whole pruned model's linear weights trained to the dense model's next-token distributions."""
    ntrain = calib.shape[0] - calib.shape[0] // 8
    for name, p in pruned.named_parameters():
        p.requires_grad_(name.endswith("proj.weight"))
    optimizer = torch.optim.Adam([p for p in pruned.parameters() if p.requires_grad], lr=args.distill_lr)
    starts = range(0, ntrain, args.batch_size)
    with torch.no_grad():
        teacher = [dense(input_ids=calib[i : i + args.batch_size]).logits.log_softmax(-1) for i in starts]
    for epoch in range(1, args.distill_epochs + 1):
        total = 0.0
        for target, i in zip(teacher, starts, strict=True):
            student = pruned(input_ids=calib[i : i + args.batch_size]).logits.log_softmax(-1)
            loss = F.kl_div(student, target, log_target=True, reduction="batchmean") / calib.shape[1]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        print(f"distillation epoch {epoch}: mean KL per token {total / len(starts):.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dense", type=Path, required=True, help="the dense checkpoint")
    parser.add_argument("--pruned", type=Path, required=True, help="thanos prune-model's --out")
    parser.add_argument("--calibration", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--max-windows", type=int, default=16, help="held-out windows of 512 tokens")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--norms", action="store_true", help="train the norms' weights too")
    parser.add_argument("--loss", choices=["mse", "featnorm"], default="mse")
    parser.add_argument("--group", type=int, default=1, help="consecutive blocks trained together")
    parser.add_argument("--no-blockwise", action="store_true", help="skip the block-wise training")
    parser.add_argument("--distill-epochs", type=int, default=0)
    parser.add_argument("--distill-lr", type=float, default=3e-4)
    args = parser.parse_args()
    record = args.pruned / "sparsity.json"
    if not record.is_file() or "compact" not in json.loads(record.read_text()):
        raise SystemExit(
            f"{args.pruned}: not a compact model written by thanos prune-model (its sparsity.json has no "
            "'compact'); this bench trains every weight, so it takes neurons:p or heads:p models only "
            "(bench/recovery.py measures the others with their zeros kept)"
        )
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.dense)
    dense = AutoModelForCausalLM.from_pretrained(args.dense, dtype=torch.float32).eval()
    pruned = AutoModelForCausalLM.from_pretrained(args.pruned, dtype=torch.float32).eval()
    blocks = (len(pruned.model.layers), len(dense.model.layers))
    if not args.no_blockwise and blocks[0] != blocks[1]:
        raise SystemExit(
            f"{args.pruned} has {blocks[0]} blocks, the dense model {blocks[1]}: "
            "block-wise training pairs block l with block l; pass --no-blockwise --distill-epochs N"
        )
    dense.requires_grad_(False)
    pruned.requires_grad_(False)
    documents, _ = load_source(args.calibration)
    calib = torch.from_numpy(sample_windows(documents, tokenizer, args.nsamples, args.seqlen).astype("int64"))
    heldout = tokenize_windows(tokenizer, load_eval_text(str(args.heldout)).text, 512)[0][: args.max_windows]
    p_dense, p_pruned = perplexity(dense, heldout), perplexity(pruned, heldout)
    started = time.monotonic()
    if not args.no_blockwise:
        blockwise(dense, pruned, calib, args)
    if args.distill_epochs:
        distill(dense, pruned, calib, args)
    seconds = time.monotonic() - started
    p_rec = perplexity(pruned, heldout)
    closed = (math.log(p_pruned) - math.log(p_rec)) / (math.log(p_pruned) - math.log(p_dense))
    print(
        f"dense {p_dense:.2f}, pruned {p_pruned:.2f}, recovered {p_rec:.2f}: {100 * closed:.1f} % of the gap "
        f"closed in {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
