"""Peak memory of the refit's solve (``MapFit.solve_toward``), against the size of its features-square sums.

The refit of a removed run's output projection (``thanos/pruning/block_map.py``) accumulates A = F^T F,
features x features in float64 (features: the MLP width; Llama-2-70B: 28,672, 6.6 GB), and solves
(A + lambda I) S = B + lambda S0 by a Cholesky factor. This fills a fit with random activations of
``--features`` channels in batches of 256 tokens (so that nothing but the sums is held), then measures, in
this process, how far the peak RSS (VmHWM) rises during the solve, in units of A's size: the factor is one
A; the rest is the right-hand side and the solution (a few B = F^T R, features x hidden).

    python bench/refit_memory.py [--features 6144] [--hidden 1024]
"""

from __future__ import annotations

import argparse

import torch

from thanos.pruning.block_map import MapFit
from thanos.stages.memory import peak_rss_mib


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--features", type=int, default=6144, help="the fit's features (MLP width)")
    parser.add_argument("--hidden", type=int, default=1024, help="the model's hidden size")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    fit = MapFit(args.hidden, features=args.features)
    for _ in range((args.features + 512) // 256):  # more tokens than features: A is positive definite
        F = torch.randn(256, args.features, generator=generator)
        X = torch.randn(256, args.hidden, generator=generator)
        fit.add(F, torch.zeros_like(X), X)
    S0 = torch.randn(args.features, args.hidden, generator=generator)
    before = peak_rss_mib()
    fit.solve_toward(S0, 0.1)
    rise = peak_rss_mib() - before
    size, rhs = args.features**2 * 8 / 2**20, args.features * args.hidden * 8 / 2**20
    print(
        f"features {args.features}, hidden {args.hidden}: A (float64) {size:.0f} MiB, B {rhs:.0f} MiB; "
        f"the solve raised the peak RSS by {rise:.0f} MiB = {rise / size:.2f} x A"
    )


if __name__ == "__main__":
    main()
