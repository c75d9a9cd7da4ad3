"""Benchmark ``thanos.prune_layer`` and the Thanos kernel: seconds, sparsity, objective, GFLOP/s.

    python bench/prune_layers.py                                   # c = b in 512 ... 4096, all methods
    python bench/prune_layers.py --sizes 1024 2048 --before HEAD~1 --literal
    python bench/prune_layers.py --sizes 64x256 256 688x256 256x688 --no-layers   # the demo's layer shapes

Layers are square (c = b) or, for a size written CxB, have c = C rows and b = B inputs; 2b calibration
tokens. ``--data`` picks the inputs: ``correlated`` (correlated features whose norms spread like an
LLM's) and ``outliers`` (the same with a few features 10-100x larger than the rest, as in LLM
activations). Two tables are printed and written as JSON
(default bench/out/prune_layers.json):

1. ``prune_layer`` per method and pattern: wall and CPU seconds, achieved sparsity, layer objective.
2. The Thanos and SparseGPT kernels alone, on the same factor U of H^-1 = U^T U, repeated interleaved
   (best of ``--repeat``). GFLOP counts their dominant work: for Thanos the per-row Cholesky solves
   (s^3/3 + 2 s^2 with s = min(|q|, B - |q|) per row and block) and the block updates Delta = -Y R_blk;
   for SparseGPT the in-block column updates and the lazy block updates. The rates are compared with
   the fp32 GEMM rate of this machine measured in the same run, and each Thanos time with SparseGPT's.
   ``--before REV`` also times the Thanos
   kernel of git revision REV on the same inputs (objectives must agree); ``--literal`` times Alg. 1
   transcribed directly (H_res re-inverted per block, R gathered per row), the style this project avoids.

On a machine shared with other busy processes, run with OMP_WAIT_POLICY=PASSIVE: spinning OpenMP
threads otherwise inflate every multi-threaded timing by up to 50x.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path
from types import ModuleType

import torch
from revisions import module_at  # bench/revisions.py

from thanos import METHODS, prune_layer
from thanos.pruning.algorithms import masks, sparsegpt, thanos_blockwise
from thanos.pruning.hessian import inverse_cholesky
from thanos.pruning.layer import layer_objective

PATTERNS = ("0.5", "2:4", "4:8", "structured:0.3")
DATA = ("correlated", "outliers")
KERNEL_PATTERNS = (("0.5", 128), ("2:4", 512), ("4:8", 512))  # Thanos defaults; SparseGPT uses B = 128


def parse_shape(text: str) -> tuple[int, int]:
    """(c, b) of a layer size: "2048" is square, "688x256" has 688 rows and 256 inputs."""
    c, _, b = text.partition("x")
    return int(c), int(b or c)


def make_layer(
    b: int, data: str = "correlated", seed: int = 0, rows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """W (rows, b), square by default, and H = 2 X X^T / N for N = 2b correlated tokens; ``outliers``
    scales b/256 features."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(b, 2 * b, generator=g)
    X = X + 0.6 * (torch.randn(b, b, generator=g) / b**0.5) @ X
    X = X * torch.exp(torch.randn(b, 1, generator=g))
    if data == "outliers":
        features = torch.randperm(b, generator=g)[: max(2, b // 256)]
        X[features] *= 10 ** (1 + torch.rand(features.numel(), 1, generator=g))
    H = 2.0 * X @ X.T / X.shape[1]
    W = torch.randn(rows or b, b, generator=g) / b**0.5
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


def gemm_rate(n: int = 2048, repeat: int = 5) -> float:
    """fp32 GFLOP/s of one n x n x n matrix product on this machine (best of ``repeat``)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(timed(torch.mm, a, b)[0] for _ in range(repeat))
    return 2 * n**3 / best / 1e9


def timed(fn, *args, **kwargs) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of ``fn(*args, **kwargs)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def run_kernel(
    module: ModuleType | None, W: torch.Tensor, U: torch.Tensor, xnorm: torch.Tensor, pattern: str, B: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Thanos kernel of ``module`` (SparseGPT with B = 128 when None) on a copy of ``W``."""
    c, b = W.shape
    nm = tuple(map(int, pattern.split(":"))) if ":" in pattern else None
    if module is None and nm is None:
        return sparsegpt.sparsegpt(W.clone(), U, 128, p=Fraction(pattern))
    if module is None:
        return sparsegpt.sparsegpt(W.clone(), U, 128, n=nm[0], m=nm[1])
    if nm is None:
        return module.thanos_unstructured(
            W.clone(), U, xnorm, math.floor(Fraction(pattern) * c * b), B, 1 << 30
        )
    return module.thanos_nm(W.clone(), U, xnorm, nm[0], nm[1], B, 1 << 30)


def thanos_gflop(mask: torch.Tensor, B: int) -> tuple[float, float]:
    """(solves, updates) GFLOP of the Thanos kernel for its final ``mask``.

    Per row and block one system of size s = min(|q|, B - |q|): Cholesky s^3/3, two triangular solves
    2 s^2; per block 2 (c + B) B (b - j1) for R_blk and Delta = -Y R_blk.
    """
    c, b = mask.shape
    solves = updates = 0.0
    for j1 in range(0, b, B):
        Bj = min(B, b - j1)
        counts = mask[:, j1 : j1 + Bj].sum(dim=1).double()
        s = torch.minimum(counts, Bj - counts)
        solves += float((s**3 / 3 + 2 * s**2).sum())
        updates += 2.0 * (c + Bj) * Bj * (b - j1)
    return solves / 1e9, updates / 1e9


def sparsegpt_gflop(c: int, b: int, B: int) -> float:
    """In-block column updates (2 c (B - i) per column) and lazy updates 2 c B (b - i2) per block."""
    flops = 0.0
    for i1 in range(0, b, B):
        Bi = min(B, b - i1)
        flops += c * Bi * (Bi + 1) + 2.0 * c * Bi * (b - i1 - Bi)
    return flops / 1e9


def layer_table(args: argparse.Namespace) -> list[dict]:
    rows = []
    print(
        f"{'data':>10} {'c x b':>9} {'method':>10} {'pattern':>15} {'seconds':>9} {'cpu s':>8} "
        f"{'sparsity':>9} {'objective':>12}"
    )
    for data in args.data:
        for size in args.sizes:
            c, b = parse_shape(size)
            W, H = make_layer(b, data, rows=c)
            W, H = W.to(args.device), H.to(args.device)
            for pattern in args.patterns:
                for method in args.methods:
                    _, cpu, result = timed(prune_layer, W, H, method, pattern, alpha=0.0)
                    st = result.stats
                    rows.append(
                        {
                            "data": data,
                            "size": size,
                            "rows": c,
                            "inputs": b,
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
                        f"{data:>10} {size:>9} {method:>10} {pattern:>15} {st.seconds:>9.3f} {cpu:>8.3f} "
                        f"{st.achieved_sparsity:>9.4f} {st.objective:>12.5g}",
                        flush=True,
                    )
    print("\nGrowth with b (slope of log seconds vs log b; 3 = cubic):")
    for data in args.data:
        for pattern in args.patterns:
            for method in args.methods:
                pts = [
                    (r["inputs"], r["seconds"])
                    for r in rows
                    if (r["data"], r["method"], r["pattern"]) == (data, method, pattern)
                    and r["rows"] == r["inputs"]
                ]
                pts = [(s, t) for s, t in pts if s >= 1024] or pts
                if len(pts) >= 2:
                    (b0, t0), (b1, t1) = pts[0], pts[-1]
                    slope = math.log(t1 / t0) / math.log(b1 / b0)
                    print(f"  {data:>10} {method:>10} {pattern:>15}: {slope:.2f}")
    return rows


def kernel_table(args: argparse.Namespace, gemm: float) -> list[dict]:
    before = module_at(args.before, "thanos/pruning/algorithms/thanos_blockwise.py") if args.before else None
    solve_seconds = [0.0]
    solve = thanos_blockwise.solve_systems

    def timed_solve(*a: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        out = solve(*a)
        solve_seconds[0] += time.perf_counter() - start
        return out

    thanos_blockwise.solve_systems = timed_solve  # measures the share of the per-row solves in the kernel
    rows = []
    print(
        f"\nKernels alone (best of {args.repeat}, interleaved; fp32 GEMM rate of this machine {gemm:.1f} "
        f"GFLOP/s, torch threads {torch.get_num_threads()}):"
    )
    print(
        f"{'data':>10} {'c x b':>9} {'kernel':>16} {'pattern':>7} {'B':>4} {'seconds':>8} {'cpu s':>7} "
        f"{'GFLOP':>7} {'GFLOP/s':>8} {'%GEMM':>6} {'solves':>7} {'objective':>11} {'rel.diff':>9}"
    )
    for data in args.data:
        for size in args.sizes:
            c, b = parse_shape(size)
            W, H = make_layer(b, data, rows=c)
            factor_wall, _, factor = timed(inverse_cholesky, H)
            U, xnorm = factor.U, masks.input_norms(H)
            for pattern, B in KERNEL_PATTERNS:
                if pattern not in args.patterns:
                    continue
                kernels = {"thanos": thanos_blockwise, "sparsegpt": None}
                if before is not None:
                    kernels["thanos (before)"] = before
                best: dict[str, tuple[float, float, float]] = {}
                results = {}
                for _ in range(args.repeat):
                    for name, module in kernels.items():
                        solve_seconds[0] = 0.0
                        wall, cpu, results[name] = timed(run_kernel, module, W, U, xnorm, pattern, B)
                        if name not in best or wall < best[name][0]:
                            best[name] = (wall, cpu, solve_seconds[0])
                objective = {name: layer_objective(out[0] - W, H) for name, out in results.items()}
                for name, (wall, cpu, in_solve) in best.items():
                    mask = results[name][1]
                    if name == "sparsegpt":
                        gflop, solves_share, blocksize = sparsegpt_gflop(c, b, 128), None, 128
                    else:
                        solves, updates = thanos_gflop(mask, B)
                        gflop, blocksize = solves + updates, B
                        solves_share = in_solve / wall if name == "thanos" else None
                    diff = abs(objective[name] - objective["thanos"]) / objective["thanos"]
                    row = {
                        "data": data,
                        "size": size,
                        "kernel": name,
                        "pattern": pattern,
                        "blocksize": blocksize,
                        "seconds": wall,
                        "cpu_seconds": cpu,
                        "gflop": gflop,
                        "gflops": gflop / wall,
                        "gemm_gflops": gemm,
                        "solve_share": solves_share,
                        "objective": objective[name],
                        "objective_rel_diff_vs_thanos": diff if name != "sparsegpt" else None,
                        "factor_seconds": factor_wall,
                    }
                    rows.append(row)
                    share = f"{solves_share:>6.0%}" if solves_share is not None else f"{'':>6}"
                    rel = f"{diff:>9.1e}" if name == "thanos (before)" else f"{'':>9}"
                    print(
                        f"{data:>10} {size:>9} {name:>16} {pattern:>7} {blocksize:>4} {wall:>8.3f} "
                        f"{cpu:>7.3f} {gflop:>7.2f} {gflop / wall:>8.1f} {gflop / wall / gemm:>6.0%} {share} "
                        f"{objective[name]:>11.5g} {rel}".rstrip(),
                        flush=True,
                    )
                ratio = best["thanos"][0] / best["sparsegpt"][0]
                next(r for r in reversed(rows) if r["kernel"] == "thanos")["vs_sparsegpt"] = ratio
                print(f"{data:>10} {size:>9} {'thanos/sparsegpt':>16} {pattern:>7} {'':>4} {ratio:>7.2f}x")
            if args.literal and "0.5" in args.patterns:
                seconds = literal_thanos(W, H, 0.5, 128)
                new = next(
                    r["seconds"]
                    for r in rows
                    if (r["data"], r["size"], r["kernel"], r["pattern"]) == (data, size, "thanos", "0.5")
                )
                rows.append(
                    {
                        "data": data,
                        "size": size,
                        "kernel": "thanos (literal)",
                        "pattern": "0.5",
                        "seconds": seconds,
                    }
                )
                print(
                    f"{data:>10} {size:>9} {'thanos (literal)':>16} {'0.5':>7} {128:>4} {seconds:>8.3f}   "
                    f"(paper-literal Alg. 1: {seconds / new:.0f}x the kernel's time)"
                )
            print(
                f"{data:>10} {size:>9} {'inverse factor U':>16} {factor_wall:>22.3f}"
                "   (shared by both kernels)"
            )
    thanos_blockwise.solve_systems = solve
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", default=["512", "1024", "2048", "4096"], help="B or CxB")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--patterns", nargs="+", default=list(PATTERNS))
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=DATA)
    parser.add_argument("--repeat", type=int, default=3, help="kernel timings: best of this many runs")
    parser.add_argument("--before", metavar="REV", help="also time the Thanos kernel of this git revision")
    parser.add_argument("--literal", action="store_true", help="also time the paper-literal Thanos (slow)")
    parser.add_argument("--no-layers", action="store_true", help="only the kernel table")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("bench/out/prune_layers.json"))
    args = parser.parse_args()

    gemm = gemm_rate()
    layers = [] if args.no_layers else layer_table(args)
    kernels = kernel_table(args, max(gemm, gemm_rate())) if args.device == "cpu" else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gemm_gflops": gemm,
        "argv": sys.argv[1:],
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": layers, "kernels": kernels}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
