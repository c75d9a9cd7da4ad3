"""The layer kernels' launches, held without a GPU: ATen operator calls of one ``prune_layer`` on a
1024 x 1024 layer on the path a GPU takes (``bench/kernel_calls.py``), at most a tenth of what the
kernels made before they solved whole blocks per call (issue 56's counts, torch 2.13)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "kernel_calls.py"
BEFORE = {("thanos", "0.5"): 30_767, ("sparsegpt", "0.5"): 36_777, ("thanos", "2:4"): 132_601}


def kernel_calls():
    spec = importlib.util.spec_from_file_location("kernel_calls", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("method", "pattern"), list(BEFORE))
def test_a_layer_takes_a_tenth_of_the_calls(method: str, pattern: str) -> None:
    bench = kernel_calls()
    W, H = bench.layer(1024)
    calls = bench.aten_calls(method, pattern, W, H)
    assert calls <= BEFORE[method, pattern] // 10, f"{method} {pattern}: {calls:,} ATen calls"
