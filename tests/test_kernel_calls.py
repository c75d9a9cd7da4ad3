"""The layer kernels' launches, held without a GPU: ATen operator calls of one ``prune_layer`` on the path
a GPU takes (``bench/kernel_calls.py``), at most a tenth of what the kernels made before they solved whole
blocks per call (issue 56's counts, torch 2.13). Thanos 2:4 on a 512 x 512 layer, the others on 1024 x
1024: the CPU's batched solver takes seconds on the larger one, and at 512 the kernels before made 33,514
calls (233fdbd with ``THANOS_NATIVE=0``, 132,598 at 1024) against 500 now, so the bound still tells the
two apart.

Host waits (``host_waits``) are counted per block of columns, as the difference between two block sizes
(the layer's fixed waits, the Hessian's checks and the stats, cancel): Thanos waited 7 times per block of
an unstructured pattern and 2 of n:m before the bracket's counts were read together and the candidates
extracted on the device (issue 56's code at 233fdbd, on a GPU's path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parents[1] / "bench" / "kernel_calls.py"
# (method, pattern, layer size): the ATen calls before
BEFORE = {("thanos", "0.5", 1024): 30_767, ("sparsegpt", "0.5", 1024): 36_777, ("thanos", "2:4", 512): 33_514}
WAITS_PER_BLOCK = {"0.5": 2, "2:4": 1}  # Thanos: the bracket's counts, the systems' sizes (unstructured)


def kernel_calls():
    spec = importlib.util.spec_from_file_location("kernel_calls", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("method", "pattern", "size"), list(BEFORE))
def test_a_layer_takes_a_tenth_of_the_calls(method: str, pattern: str, size: int) -> None:
    bench = kernel_calls()
    W, H = bench.layer(size)
    calls = bench.aten_calls(method, pattern, W, H)
    assert calls <= BEFORE[method, pattern, size] // 10, f"{method} {pattern} at {size}: {calls:,} ATen calls"


@pytest.mark.parametrize("pattern", list(WAITS_PER_BLOCK))
def test_thanos_waits_for_the_device_at_most_twice_per_block(pattern: str) -> None:
    """A 2048 x 256 layer in 8 and in 4 blocks: every block's metric has more than 2^15 entries (the
    sampled bracket, one wait, in every block)."""
    bench = kernel_calls()
    W, H = bench.layer(256)
    W = torch.randn(2048, 256, generator=torch.Generator().manual_seed(1))
    waits = {B: bench.host_waits("thanos", pattern, W, H, blocksize=B) for B in (32, 64)}
    per_block = (waits[32] - waits[64]) / (256 // 32 - 256 // 64)
    assert per_block <= WAITS_PER_BLOCK[pattern], f"Thanos {pattern}: {per_block} host waits per block"
