"""Peak RSS of one layer's pruning at a real shape, in a process of its own, against its budget.

The largest layer of a block decides a prune job's peak: at Llama-2-70B shapes ``mlp.down_proj``
(c = 8192 rows, b = 28672 columns), whose fp32 Hessian alone is 3 GiB. This bench builds that layer's
weight (random, bf16 as stored) and a positive definite H = A A^T / n + I (A: b x ``--rank``, random, so
the bench does not need hours of calibration), then runs ``thanos.prune_layer`` on them in a child process
that does nothing else, sampling its RSS (``VmHWM``) every 0.5 s. The kernel allocates its buffers in its
first block of columns and reuses them for every later one, so a run stopped after ``--max-seconds``
has already reached its peak; the output says whether the layer finished and how far it got.

Budget parts (MiB): ``H`` (b x b fp32), ``factor`` (the inverse factor of H, b x b fp32), ``W fp32`` (the
layer in fp32), ``W`` (as stored), and ``constant``: a child that only imports torch and thanos.

    OMP_WAIT_POLICY=PASSIVE python bench/memory_layer.py --rows 8192 --columns 28672 --method thanos \
        --sparsity 2:4 --max-seconds 900
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path

MIB = 2**20


def vm_hwm(pid: int) -> float:
    """The peak RSS (MiB) of process ``pid`` so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def prune_child(rows: int, columns: int, rank: int, method: str, sparsity: str, done: mp.Queue) -> None:
    import torch

    from thanos import prune_layer

    generator = torch.Generator().manual_seed(0)
    W = torch.randn(rows, columns, generator=generator).to(torch.bfloat16)
    H = torch.eye(columns)
    for start in range(0, rank, 256):  # H += A A^T / rank, A in panels of 256 columns
        A = torch.randn(columns, min(256, rank - start), generator=generator)
        H.addmm_(A, A.T, alpha=1.0 / rank)
        del A
    done.put(("built", time.perf_counter()))
    result = prune_layer(W, H, method, sparsity)
    done.put(("pruned", result.stats.objective))


def idle_child(done: mp.Queue) -> None:
    import torch  # noqa: F401

    import thanos  # noqa: F401

    done.put(("imported", 0.0))
    time.sleep(1.0)


def sample(
    process: mp.Process, done: mp.Queue, max_seconds: float
) -> tuple[float, float, list[tuple[str, float]]]:
    """Peak RSS of ``process`` until it ends or ``max_seconds`` pass (then it is killed), when the peak last
    rose (``time.perf_counter``), and the process's messages."""
    peak, rose, events, started = 0.0, 0.0, [], time.perf_counter()
    while process.is_alive() and time.perf_counter() - started < max_seconds:
        try:
            now = vm_hwm(process.pid)
        except (OSError, ValueError):
            break
        if now > peak:
            peak, rose = now, time.perf_counter()
        while not done.empty():
            events.append(done.get())
        time.sleep(0.5)
    if process.is_alive():
        peak = max(peak, vm_hwm(process.pid))
        process.kill()
    process.join()
    while not done.empty():
        events.append(done.get())
    return peak, rose, events


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rows", type=int, default=8192, help="c (out_features); 70B down_proj: 8192")
    parser.add_argument("--columns", type=int, default=28672, help="b (in_features); 70B down_proj: 28672")
    parser.add_argument("--rank", type=int, default=1024, help="rank of the random part of H")
    parser.add_argument("--method", default="thanos")
    parser.add_argument("--sparsity", default="2:4")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()
    context = mp.get_context("spawn")

    queue = context.Queue()
    idle = context.Process(target=idle_child, args=(queue,))
    idle.start()
    constant, _, _ = sample(idle, queue, 120.0)

    queue = context.Queue()
    child = context.Process(
        target=prune_child, args=(args.rows, args.columns, args.rank, args.method, args.sparsity, queue)
    )
    started = time.perf_counter()
    child.start()
    peak, rose, events = sample(child, queue, args.max_seconds)
    seconds = time.perf_counter() - started
    built = next((t for name, t in events if name == "built"), None)
    objective = next((v for name, v in events if name == "pruned"), None)

    c, b = args.rows, args.columns
    parts = {"H": b * b * 4, "factor": b * b * 4, "W fp32": c * b * 4, "W bf16": c * b * 2}
    budget = constant + sum(parts.values()) / MIB
    print(f"{args.method} {args.sparsity} on a {c} x {b} layer (bf16), H of rank {args.rank} + I, CPU")
    print("budget parts (MiB): " + ", ".join(f"{k} {v / MIB:,.0f}" for k, v in parts.items()))
    print(f"constant (imports torch + thanos): {constant:,.0f} MiB; budget {budget:,.0f} MiB")
    state = "finished" if objective is not None else f"stopped after {args.max_seconds:.0f} s (not finished)"
    print(f"peak RSS {peak:,.0f} MiB = {peak / budget:.2f} x budget; layer {state}; {seconds:.0f} s in all")
    if built is not None:
        pruning = seconds - (built - started)
        print(f"  W and H built in the child first; pruning ran {pruning:.0f} s", end="")
        print(f", its peak last rose {rose - built:.0f} s into it" if rose > built else ", no rise in it")
    if objective is not None:
        print(f"  objective {objective:.6g}")


if __name__ == "__main__":
    main()
