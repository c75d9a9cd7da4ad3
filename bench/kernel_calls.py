"""ATen operator calls of one ``prune_layer``: the CPU-side proxy for the launches a GPU makes.

    python bench/kernel_calls.py                  # 1024 x 1024, the path a GPU takes
    python bench/kernel_calls.py --size 2048

On a GPU nearly every ATen call is a kernel launch or a host-side step between launches, and the layer
kernels are launch-bound there (docs/benchmarks.md, "GPU"). This counts every ``aten::`` event that
torch.profiler records (nested calls and views included) for one ``prune_layer`` on a c = b layer with
heavy-tailed input scales, on the path a GPU runs (``THANOS_BATCHED=1``: the rows' systems solved as on a
GPU, not by the CPU's row solvers); the GPU differs only in selecting the k-th smallest value by a sort
instead of ``kthvalue`` (``thanos.pruning.algorithms.masks.kth``). ``tests/test_kernel_calls.py`` bounds
the counts.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function

SCOPE = "kernel_calls: prune_layer"
CASES = (("thanos", "0.5"), ("sparsegpt", "0.5"), ("thanos", "2:4"), ("sparsegpt", "2:4"))


def layer(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """W (b, b) and H = (2/N) X X^T from 2b tokens whose features' scales spread over two decades."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(2 * b, b, generator=g) * torch.exp(1.5 * torch.randn(b, generator=g))
    return torch.randn(b, b, generator=g), 2 * X.T @ X / X.shape[0]


def aten_calls(method: str, pattern: str, W: torch.Tensor, H: torch.Tensor) -> int:
    """ATen operator calls (every ``aten::`` profiler event) of one ``prune_layer`` on a GPU's path."""
    from thanos import prune_layer

    previous = os.environ.get("THANOS_BATCHED")
    os.environ["THANOS_BATCHED"] = "1"
    deterministic = (  # its checks add calls: the default's are counted
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(False)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof, record_function(SCOPE):
            prune_layer(W.clone(), H, method, pattern)
    finally:
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if previous is None:
            del os.environ["THANOS_BATCHED"]
        else:
            os.environ["THANOS_BATCHED"] = previous
    return sum(event.name.startswith("aten::") and _within(event) for event in prof.events())


def _within(event) -> bool:
    """Whether a profiler event ran inside the ``SCOPE`` range, i.e. in this call's thread: the profiler
    records every thread of the process, and another may be running torch meanwhile (a test's background
    work)."""
    while event is not None:
        if event.name == SCOPE:
            return True
        event = event.cpu_parent
    return False


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=1024, help="c = b of the layer (default 1024)")
    args = parser.parse_args()
    W, H = layer(args.size)
    print(
        f"ATen calls of one prune_layer, {args.size} x {args.size}, a GPU's path (torch {torch.__version__}):"
    )
    for method, pattern in CASES:
        print(f"  {method:>9} {pattern:>5}  {aten_calls(method, pattern, W, H):>7,}")


if __name__ == "__main__":
    main()
