"""ATen operator calls and host waits of one ``prune_layer``: the CPU-side proxies for the launches a GPU
makes and for the times its host waits on it.

    python bench/kernel_calls.py                  # 1024 x 1024, the path a GPU takes
    python bench/kernel_calls.py --size 2048

On a GPU nearly every ATen call is a kernel launch or a host-side step between launches, and the layer
kernels are launch-bound there (docs/benchmarks.md, "GPU"). This counts every ``aten::`` event that
torch.profiler records (nested calls and views included) for one ``prune_layer`` on a c = b layer with
heavy-tailed input scales, on the path a GPU runs (``THANOS_BATCHED=1``: the rows' systems solved and the
residual mask selected as on a GPU, ``thanos.pruning.algorithms.masks.gpu_path``, not by the CPU's row
solvers and ``kthvalue``). ``tests/test_kernel_calls.py`` bounds the counts.

A host wait is a step at which a GPU's host stops queueing work until the device has finished what came
before: a tensor's value read on the host (``.item()``, ``int()``, ``bool()``, ``.tolist()``) or an
operator whose result's shape depends on the data (``nonzero``, boolean indexing, ``masked_select``,
``unique``). ``host_waits`` counts them on a CPU with a dispatch mode (and ``Tensor.tolist`` wrapped,
which bypasses the dispatcher); the test bounds them per block of columns.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

SCOPE = "kernel_calls: prune_layer"
CASES = (("thanos", "0.5"), ("sparsegpt", "0.5"), ("thanos", "2:4"), ("sparsegpt", "2:4"))
aten = torch.ops.aten
# operators that make the host wait for the device: a value read on the host, or a data-dependent shape
WAITING = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten.unique_dim, aten._unique2}
WAITING |= {aten.unique_consecutive, aten.repeat_interleave}


def layer(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """W (b, b) and H = (2/N) X X^T from 2b tokens whose features' scales spread over two decades."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(2 * b, b, generator=g) * torch.exp(1.5 * torch.randn(b, generator=g))
    return torch.randn(b, b, generator=g), 2 * X.T @ X / X.shape[0]


@contextlib.contextmanager
def gpu_path():
    """Run ``prune_layer`` on the path a GPU takes (``THANOS_BATCHED=1``), deterministic checks off (they
    add calls: the default's are counted)."""
    previous = os.environ.get("THANOS_BATCHED")
    os.environ["THANOS_BATCHED"] = "1"
    deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if previous is None:
            del os.environ["THANOS_BATCHED"]
        else:
            os.environ["THANOS_BATCHED"] = previous


def aten_calls(method: str, pattern: str, W: torch.Tensor, H: torch.Tensor) -> int:
    """ATen operator calls (every ``aten::`` profiler event) of one ``prune_layer`` on a GPU's path."""
    from thanos import prune_layer

    with gpu_path(), profile(activities=[ProfilerActivity.CPU]) as prof, record_function(SCOPE):
        prune_layer(W.clone(), H, method, pattern)
    return sum(event.name.startswith("aten::") and _within(event) for event in prof.events())


class HostWaits(TorchDispatchMode):
    """Counts the operators of ``WAITING`` and boolean indexing (a ``nonzero`` inside ``index``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in WAITING or (packet in (aten.index, aten.index_put_, aten.index_put) and _boolean(args)):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _boolean(args: tuple) -> bool:
    """Whether an ``index``/``index_put`` call's indices hold a boolean mask."""
    return any(i is not None and i.dtype == torch.bool for i in args[1])


def host_waits(method: str, pattern: str, W: torch.Tensor, H: torch.Tensor, **options) -> int:
    """Host waits of one ``prune_layer`` on a GPU's path (``HostWaits`` and every ``Tensor.tolist``)."""
    from thanos import prune_layer

    counter, tolist = HostWaits(), torch.Tensor.tolist

    def counted(tensor: torch.Tensor):
        counter.count += 1
        return tolist(tensor)

    torch.Tensor.tolist = counted
    try:
        with gpu_path(), counter:
            prune_layer(W.clone(), H, method, pattern, **options)
    finally:
        torch.Tensor.tolist = tolist
    return counter.count


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
    print(f"  {'method':>9} {'':>5}  {'ATen calls':>10}  {'host waits':>10}")
    for method, pattern in CASES:
        calls, waits = aten_calls(method, pattern, W, H), host_waits(method, pattern, W, H)
        print(f"  {method:>9} {pattern:>5}  {calls:>10,}  {waits:>10,}")


if __name__ == "__main__":
    main()
