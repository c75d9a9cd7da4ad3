"""``bench/gpu.py``'s ``kernels`` part: the layer kernels on the device against the authors' code, their
host waits, and where a layer's time goes."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
import time
import types
from pathlib import Path

import torch
from kernel_calls import host_waits as counted_waits  # bench/kernel_calls.py

SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008))
OURS = (("thanos", "0.5", None), ("thanos", "0.5", 512), ("sparsegpt", "0.5", None), ("thanos", "2:4", None))
OURS += (("thanos", "structured:0.3", None),)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn, *args, **kwargs):
    sync(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    sync(device)
    return time.perf_counter() - start, out


def heavy_tailed_layer(c: int, b: int, tokens: int, device: str, seed: int = 0):
    """W (c, b) and X (tokens, b) whose features' scales spread over two decades, as LLM activations do."""
    g = torch.Generator(device=device).manual_seed(seed)
    scale = torch.exp(1.5 * torch.randn(b, generator=g, device=device))
    mix = torch.randn(b, b, generator=g, device=device) / math.sqrt(b) + torch.eye(b, device=device)
    X = (torch.randn(tokens, b, generator=g, device=device) @ mix) * scale
    return torch.randn(c, b, generator=g, device=device) / math.sqrt(b), X


def load_authors(directory: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """The authors' ``lib/thanos.py`` and ``lib/sparsegpt.py`` as modules."""
    import transformers

    if "sklearn" not in sys.modules and importlib.util.find_spec("sklearn") is None:
        sklearn, cluster = types.ModuleType("sklearn"), types.ModuleType("sklearn.cluster")
        cluster.KMeans = None
        sklearn.cluster = cluster
        sys.modules |= {"sklearn": sklearn, "sklearn.cluster": cluster}
    if not hasattr(transformers, "Conv1D"):  # moved in transformers 5; their isinstance checks read it
        from transformers import pytorch_utils

        transformers.Conv1D = pytorch_utils.Conv1D
    modules = []
    for name in ("thanos", "sparsegpt"):
        spec = importlib.util.spec_from_file_location(f"authors_{name}", directory / "lib" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return modules[0], modules[1]


def authors_prune(module: types.ModuleType, method: str, W: torch.Tensor, X: torch.Tensor, device: str):
    """Seconds of the authors' pruning call (H accumulated beforehand, as their add_batch does) and W."""
    layer = torch.nn.Linear(W.shape[1], W.shape[0], bias=False, device=device)
    layer.weight.data = W.clone()
    pruner = module.Thanos(layer) if method == "thanos" else module.SparseGPT(layer)
    for batch in X.split(512):
        pruner.add_batch(batch.unsqueeze(0), None)
    with contextlib.redirect_stdout(sys.stderr):
        if method == "thanos":
            seconds, _ = timed(device, pruner.snap, 0.5, blocksize=512, v_blocksize=256, perc_outliers=0.0)
        else:
            seconds, _ = timed(device, pruner.fasterprune, 0.5, blocksize=128)
    return seconds, layer.weight.data.float()


def part_kernels(args, out: Path) -> list[str]:
    from thanos import prune_layer
    from thanos.pruning.layer import layer_objective

    device, lines = args.device, []
    authors = load_authors(Path(args.authors)) if args.authors and device.startswith("cuda") else None
    shapes = ((512, 512), (512, 1024)) if args.small else SHAPES
    tokens = 1024 if args.small else 8192
    Ww, Xw = heavy_tailed_layer(256, 256, 512, device)  # warm-up: handles, kernels' first launches
    for method, pattern, blocksize in OURS:
        prune_layer(Ww, 2 * Xw.T @ Xw / Xw.shape[0], method, pattern, blocksize=blocksize)
    header = "| layer (rows x inputs) | " + " | ".join(f"{m} {p}{f' B={b}' if b else ''}" for m, p, b in OURS)
    lines += [header + " | authors' Thanos | authors' SparseGPT |", "|" + " --- |" * (len(OURS) + 3)]
    for c, b in shapes:
        W, X = heavy_tailed_layer(c, b, tokens, device)
        H = 2 * X.T @ X / X.shape[0]
        cells, objectives = [], {}
        for method, pattern, blocksize in OURS:
            runs = [timed(device, prune_layer, W, H, method, pattern, blocksize=blocksize) for _ in range(3)]
            seconds, result = min(runs, key=lambda run: run[0])
            objectives[method, pattern, blocksize] = result.stats.objective
            cells.append(f"{seconds:.3f} s")
        for method in ("thanos", "sparsegpt"):
            if authors is None:
                cells.append("-")
                continue
            runs = [authors_prune(authors[method == "sparsegpt"], method, W, X, device) for _ in range(2)]
            seconds, pruned = min(runs, key=lambda run: run[0])
            ours = objectives[method, "0.5", 512 if method == "thanos" else None]  # their block size
            cells.append(
                f"{seconds:.3f} s (objective ours/theirs {ours / layer_objective(pruned - W, H):.4f})"
            )
        lines.append(f"| {c} x {b} | " + " | ".join(cells) + " |")
        (out / "kernels.md").write_text("\n".join(lines) + "\n")
        if (c, b) == shapes[0]:
            profile_kernels(W, H, device, out / "kernels-profile.txt")
        del W, X, H
    c, b = shapes[0]
    W, X = heavy_tailed_layer(c, b, tokens, device)
    H = 2 * X.T @ X / X.shape[0]
    for pattern in ("0.5", "2:4"):
        waits = host_waits(device, W, H, pattern)
        blocks = -(-b // (128 if pattern == "0.5" else 512))
        lines.append(
            f"\nhost waits of Thanos {pattern} on {c} x {b}: {waits} ({blocks} block{'s' * (blocks > 1)})"
        )
    (out / "kernels.md").write_text("\n".join(lines) + "\n")
    return lines


def host_waits(device: str, W: torch.Tensor, H: torch.Tensor, pattern: str) -> int:
    """The times one ``prune_layer`` (Thanos) makes the host wait for the device: on a GPU the
    synchronising calls CUDA's sync debug mode reports, on a CPU ``bench/kernel_calls.py``'s count of the
    same calls on a GPU's path."""
    import warnings

    from thanos import prune_layer

    if not device.startswith("cuda"):
        return counted_waits("thanos", pattern, W, H)
    prune_layer(W, H, "thanos", pattern)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            prune_layer(W, H, "thanos", pattern)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def profile_kernels(W: torch.Tensor, H: torch.Tensor, device: str, path: Path) -> None:
    """Where a layer's time goes: torch.profiler's busiest operators of Thanos 50 % and SparseGPT 50 %."""
    from torch.profiler import ProfilerActivity, profile

    from thanos import prune_layer

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    tables = []
    for method in ("thanos", "sparsegpt"):
        with profile(activities=activities) as prof:
            prune_layer(W, H, method, "0.5")
            sync(device)
        key = "cuda_time_total" if device.startswith("cuda") else "cpu_time_total"
        tables.append(f"{method} 0.5\n" + prof.key_averages().table(sort_by=key, row_limit=25))
    path.write_text("\n\n".join(tables))
