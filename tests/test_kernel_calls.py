"""The layer kernels' launches, held without a GPU: ATen operator calls of one ``prune_layer`` on the path
a GPU takes (``bench/kernel_calls.py``), at most a tenth of what the kernels made before they solved whole
blocks per call (issue 56's counts, torch 2.13). Thanos 2:4 on a 512 x 512 layer, the others on 1024 x
1024: the CPU's batched solver takes seconds on the larger one, and at 512 the kernels before made 33,514
calls (233fdbd with ``THANOS_NATIVE=0``, 132,598 at 1024) against 500 now, so the bound still tells the
two apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "kernel_calls.py"
# (method, pattern, layer size): the ATen calls before
BEFORE = {("thanos", "0.5", 1024): 30_767, ("sparsegpt", "0.5", 1024): 36_777, ("thanos", "2:4", 512): 33_514}


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
