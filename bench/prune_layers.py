"""Benchmark ``thanos.prune_layer``: seconds, achieved sparsity and layer objective per method and pattern.

    python bench/prune_layers.py                       # c = b in 512 1024 2048 4096, all methods/patterns
    python bench/prune_layers.py --sizes 2048 --literal # also time the paper-literal Thanos at 2048

Layers are square (c = b) with correlated calibration inputs (2b tokens) whose feature norms spread like an
LLM's. The table is printed and written as JSON (default bench/out/prune_layers.json). ``--literal`` times
Alg. 1 transcribed directly (H_res re-inverted for every block, R gathered per row as a
(rows, s, b - j1) tensor): the implementation style this project avoids.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch

from thanos import METHODS, prune_layer

PATTERNS = ("0.5", "2:4", "4:8", "structured:0.3")


def make_layer(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(b, 2 * b, generator=g)
    X = X + 0.6 * (torch.randn(b, b, generator=g) / b**0.5) @ X
    X = X * torch.exp(torch.randn(b, 1, generator=g))
    H = 2.0 * X @ X.T / X.shape[1]
    W = torch.randn(b, b, generator=g) / b**0.5
    return W, H


def literal_thanos(W: torch.Tensor, H: torch.Tensor, p: float, B: int, row_batch: int = 128) -> float:
    """Alg. 1 as written: inv(H[j1:, j1:]) per block, gathered R per row, batched solves. Returns seconds."""
    start = time.perf_counter()
    W = W.clone()
    c, b = W.shape
    xnorm = torch.sqrt(torch.diagonal(H))
    H = H + 0.01 * torch.diagonal(H).mean() * torch.eye(b)
    r = math.floor(p * c * b)
    for j1 in range(0, b, B):
        j2 = min(j1 + B, b)
        metric = (W[:, j1:].abs() * xnorm[j1:]).flatten()
        residual = torch.zeros_like(metric, dtype=torch.bool)
        residual[torch.topk(metric, r, largest=False).indices] = True
        M = residual.view(c, b - j1)[:, : j2 - j1]
        r -= int(M.sum())
        Hinv = torch.linalg.inv(H[j1:, j1:])  # the per-block re-inversion
        counts = M.sum(dim=1)
        s_max = int(counts.max())
        for start_row in range(0, c, row_batch):
            rows = slice(start_row, start_row + row_batch)
            q = torch.sort((~M[rows]).to(torch.int8), dim=1, stable=True).indices[:, :s_max]
            valid = torch.arange(s_max) < counts[rows].unsqueeze(1)
            R = Hinv[q] * valid.unsqueeze(2)  # gathered (rows, s, b - j1)
            R_hat = torch.gather(R, 2, q.unsqueeze(1).expand(-1, s_max, -1))
            R_hat = torch.where(valid.unsqueeze(2) & valid.unsqueeze(1), R_hat, torch.eye(s_max))
            u = torch.gather(W[rows, j1:j2], 1, q) * valid
            L = torch.linalg.cholesky(R_hat)
            y = torch.cholesky_solve(u.unsqueeze(2), L)
            W[rows, j1:] -= (y.transpose(1, 2) @ R).squeeze(1)
        W[:, j1:j2][M] = 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--patterns", nargs="+", default=list(PATTERNS))
    parser.add_argument("--literal", action="store_true", help="also time the paper-literal Thanos (slow)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("bench/out/prune_layers.json"))
    args = parser.parse_args()

    rows = []
    print(f"{'c=b':>6} {'method':>10} {'pattern':>15} {'seconds':>9} {'sparsity':>9} {'objective':>12}")
    for b in args.sizes:
        W, H = make_layer(b)
        W, H = W.to(args.device), H.to(args.device)
        for pattern in args.patterns:
            for method in args.methods:
                result = prune_layer(W, H, method, pattern, alpha=0.0)
                st = result.stats
                rows.append(
                    {
                        "size": b,
                        "method": method,
                        "pattern": pattern,
                        "seconds": st.seconds,
                        "achieved_sparsity": st.achieved_sparsity,
                        "objective": st.objective,
                        "blocksize": st.blocksize,
                        "device": st.device,
                    }
                )
                print(
                    f"{b:>6} {method:>10} {pattern:>15} {st.seconds:>9.3f} {st.achieved_sparsity:>9.4f} "
                    f"{st.objective:>12.5g}",
                    flush=True,
                )
        if args.literal:
            seconds = literal_thanos(W.cpu(), H.cpu(), 0.5, 128)
            rows.append({"size": b, "method": "thanos-literal", "pattern": "0.5", "seconds": seconds})
            print(f"{b:>6} {'literal':>10} {'0.5':>15} {seconds:>9.3f}   (paper-literal Alg. 1, B=128)")

    print("\nGrowth with b (slope of log seconds vs log b; 3 = cubic):")
    for pattern in args.patterns:
        for method in args.methods:
            pts = [
                (r["size"], r["seconds"]) for r in rows if r["method"] == method and r["pattern"] == pattern
            ]
            pts = [(s, t) for s, t in pts if s >= 1024] or pts
            if len(pts) >= 2:
                (b0, t0), (b1, t1) = pts[0], pts[-1]
                print(f"  {method:>10} {pattern:>15}: {math.log(t1 / t0) / math.log(b1 / b0):.2f}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "machine": platform.machine(), "threads": torch.get_num_threads()}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
