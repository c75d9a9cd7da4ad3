"""Every run of k consecutive blocks of a real model removed and replaced, both ways ``depth:k`` can: by
its fitted map alone (ReplaceMe's) and by the map with the output projection then refitted (the default):
the relative error of each fit (``depth:k`` ranks runs by the map's, then its shortlist by the refitted
one), the shortened model's KL to the dense model on calibration windows (SLEB's kind of score: the whole
model's loss on the calibration tokens) and its perplexity on held-out text; which run each score would
choose, and that run's perplexity.

It reads a finished ``thanos prune-model --sparsity depth:k`` run's working directory (the dense chain's
stores ``chains/dense/inputs_*`` and the calibration tokens ``calib/tokens.zarr``); each map is fitted by the
pipeline's own ``fit_run`` on every stored window, folded into the block before the run (and refitted),
and the blocks of the run are left out of the dense model in memory.

    thanos prune-model --model smollm2 --method thanos --sparsity depth:6 --out bench-struct/out/depth6 \
        --calibration demo-data/calib.jsonl --nsamples 64 --seqlen 256 --workdir bench-struct/workdir
    OMP_WAIT_POLICY=PASSIVE python bench/depth_runs.py --model smollm2 --data demo-data \
        --results bench-struct/workdir/results/smollm2 --k 6
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="the dense model's directory")
    parser.add_argument("--data", type=Path, required=True, help="the demo's data (test.jsonl)")
    parser.add_argument(
        "--results", type=Path, required=True, help="the working directory's results/<model> of a depth run"
    )
    parser.add_argument("--k", type=int, default=6, help="blocks per run (default 6)")
    parser.add_argument("--calib-windows", type=int, default=16, help="windows the KL is measured on (16)")
    parser.add_argument("--ppl-windows", type=int, default=16, help="held-out windows of 512 (default 16)")
    parser.add_argument(
        "--damps",
        help="instead of every run: the refit's strengths (comma-separated fractions of mean diag A^T A) for "
        "the run from --first, each fitted on every window (held-out perplexity) and on the windows before "
        "the last --calib-windows (the KL on those, which the fit did not see)",
    )
    parser.add_argument("--first", type=int, help="with --damps: the run's first block")
    args = parser.parse_args()
    if args.damps and args.first is None:
        parser.error("--damps needs --first (the first block of the run to study)")

    import zarr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import thanos.stages.depth.maps as block_maps
    from thanos.evaluation.perplexity import load_eval_text, tokenize_windows, window_nll
    from thanos.models import ModelHandle
    from thanos.models.generic import find_layers
    from thanos.pruning.block_map import fold
    from thanos.stages.depth.maps import fit_run, output_layer

    stores = sorted(
        (args.results / "chains" / "dense").glob("inputs_*.zarr"), key=lambda p: int(p.stem.split("_")[1])
    )
    if not stores:
        raise SystemExit(f"no dense stores under {args.results}/chains/dense: run a depth recipe first")
    tokens = zarr.open(str(args.results / "calib" / "tokens.zarr"), mode="r")["tokens"]
    calib = torch.from_numpy(tokens[: args.calib_windows]).long()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    test = tokenize_windows(tokenizer, load_eval_text(str(args.data / "test.jsonl")).text, 512)[0]
    test = test[: args.ppl_windows]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    handle = ModelHandle.open(args.model)
    layer = output_layer(handle)
    blocks = len(stores) - 1
    path, layers = find_layers(model, blocks)
    parent = model.get_submodule(path.rpartition(".")[0])
    name = path.rpartition(".")[2]

    @torch.inference_mode()
    def log_probs(ids: torch.Tensor) -> list[torch.Tensor]:
        return [torch.log_softmax(model(input_ids=ids[i : i + 4], use_cache=False).logits, -1) for i in
                range(0, len(ids), 4)]  # fmt: skip

    def perplexity(ids: torch.Tensor) -> float:
        return math.exp(window_nll(model, ids, "cpu", batch_size=4, progress=False) / ids[:, 1:].numel())

    def shortened(
        first: int, last: int, weight: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor,
        reference: list[torch.Tensor],
    ) -> tuple[float, float]:  # fmt: skip
        """(KL to the dense model's ``reference`` on the calibration windows ``ids``, held-out perplexity)
        with blocks first..last left out and block first - 1's output projection replaced by ``weight``
        and ``bias``."""
        linear = layers[first - 1].get_submodule(layer)
        saved = [t.detach().clone() for t in (linear.weight, linear.bias) if t is not None]
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
        setattr(parent, name, torch.nn.ModuleList(b for i, b in enumerate(layers) if not first <= i <= last))
        model.config.num_hidden_layers = blocks - args.k
        pairs = zip(reference, log_probs(ids), strict=True)
        kl = sum(float((ref.exp() * (ref - new)).sum()) for ref, new in pairs) / ids.numel()
        ppl = perplexity(test)
        with torch.no_grad():
            for tensor, original in zip((linear.weight, linear.bias), saved, strict=False):
                tensor.copy_(original)
        setattr(parent, name, layers)
        model.config.num_hidden_layers = blocks
        return kl, ppl

    print(f"dense: held-out perplexity {perplexity(test):.2f}", flush=True)
    if args.damps:
        first, last = args.first, args.first + args.k - 1
        left_out = torch.from_numpy(tokens[-args.calib_windows :]).long()
        reference = log_probs(left_out)
        fitted_on = tokens.shape[0] - args.calib_windows
        for damp in (float(d) for d in args.damps.split(",")):
            block_maps.REFIT_DAMP = damp
            run = fit_run(handle, stores, first, last, layer)
            part = fit_run(handle, stores, first, last, layer, nsamples=fitted_on)
            kl = shortened(first, last, part.weight, part.bias, left_out, reference)[0]
            ppl = shortened(first, last, run.weight, run.bias, left_out, reference)[1]
            print(
                f"blocks {first}..{last}, refit {damp:g}: fitted on the first {fitted_on} windows, "
                f"KL on the last {args.calib_windows} {kl:.4f}; fitted on all, held-out perplexity {ppl:.2f}",
                flush=True,
            )
        return
    reference = log_probs(calib)
    rows = []
    for first in range(1, blocks - args.k + 1):
        started = time.perf_counter()
        last = first + args.k - 1
        run = fit_run(handle, stores, first, last, layer)
        linear = layers[first - 1].get_submodule(layer)
        bias = None if linear.bias is None else linear.bias.detach()
        folded = fold(linear.weight.detach(), run.T, bias)
        map_kl, map_ppl = shortened(first, last, *folded, calib, reference)
        kl, ppl = shortened(first, last, run.weight, run.bias, calib, reference)
        rows.append((first, run.error_map, run.error, kl, ppl))
        print(
            f"blocks {first:2d}..{last:2d}: no map: error {run.error_without:.4f}; the map alone: error "
            f"{run.error_map:.4f}, calibration KL {map_kl:.4f}, perplexity {map_ppl:.2f}; refitted: error "
            f"{run.error:.4f}, calibration KL {kl:.4f}, perplexity {ppl:.2f} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    scores = ("the map's error", "the refitted error", "the calibration KL", "the held-out perplexity")
    for column, label in enumerate(scores, start=1):
        first, *_, ppl = min(rows, key=lambda row: row[column])
        print(f"chosen by {label}: blocks {first}..{first + args.k - 1}, refitted: perplexity {ppl:.2f}")


if __name__ == "__main__":
    main()
