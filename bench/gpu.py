"""The GPU check: one short call on a GPU machine, every number docs/benchmarks.md "GPU" records.

    python bench/gpu.py --out OUT [--authors DIR] [--parts kernels,models,search] [--work DIR]
    python bench/gpu.py --out OUT --parts distill,consistency,workflow --text results/demo/data
    python bench/gpu.py --out /tmp/gpu --device cpu --small      # try the script itself on a CPU

Parts (each bounded in seconds: ``BUDGET``, 970 in all, more than one device call's 600: two calls, as
above; each writes its table to OUT as soon as it has a row, so a part that fails or runs out of time
leaves the others' results; models and data go to ``--work``):

- ``kernels``: ``prune_layer`` on the issue's layer shapes (4096 x 4096, 11008 x 4096, 4096 x 11008; 8192
  tokens with heavy-tailed feature scales): Thanos 50 % (B = 128, the default, and 512), SparseGPT 50 %,
  Thanos 2:4 and structured 30 %, each against the authors' Thanos (their main.py settings: B = 512,
  v_blocksize = 256) and SparseGPT (B = 128) when ``--authors`` names a checkout of
  github.com/vectozavr/thanos; seconds (synchronised, after a warm-up call; best of 3, theirs best of 2)
  and the objective's ratio to the authors' (their code synchronises CUDA: on a CPU it is left out).
  Also the host waits of one Thanos 50 % and 2:4 call on the first shape (CUDA's sync debug mode; on a
  CPU ``bench/kernel_calls.py``'s count on a GPU's path).
- ``models``: a Llama-2-7B-shaped and a Llama-2-70B-shaped block (random weights, one block each) through
  ``thanos prune-model --device DEVICE`` (Thanos 50 %, 64 x 512 and 32 x 512 calibration tokens): seconds
  and peak GPU memory.
- ``search``: ``thanos prune-model --sparsity params:0.25`` (the size search) of a Llama of 4 blocks of
  SmolLM2-135M's width (576, 9 heads in 3 groups) on the device and on the CPU: seconds, parameters kept,
  equal mask entries; "not available in this version" where the installed thanos refuses the sparsity.
- ``distill``: ``thanos distill`` of ``neurons:0.3`` (``prune-model`` on the device) toward the dense model
  on ``--text``'s train.jsonl (``thanos demo-data``'s output, 2.5 MB; without it random words) at each of
  ``--distill-tokens`` (1M and 10M; 4 windows of 512 a step, lr 3e-4, as docs/distillation.md's CPU curve):
  tokens/s, the held-out KL, the perplexity on test.jsonl and the share of the log-perplexity gap closed.
  The dense model is ``--distill-model DIR``; without it, or where DIR holds only a config and tokenizer,
  a random model of SmolLM2-135M's shape (of DIR's config) is built on the device: its tokens/s are
  SmolLM2-135M's, its KL and perplexity only show the part runs. SmolLM2-135M's weights (270 MB in bf16)
  do not fit the 64 MiB a device call carries: its curve needs a GPU machine that holds the model.
- ``consistency``: one 1024 x 1024 layer on the GPU and on the CPU (fp32 both): equal mask entries and the
  objectives; and ``thanos prune-model`` of a tiny Llama on both (bf16 on the GPU, fp32 on the CPU), Thanos
  50 %, ``depth:1`` (its block map fitted on the device) and ``depth:1+neurons:0.3``: perplexity on held-out
  text and equal mask entries.
- ``workflow``: ``snakemake --cores 4`` on a small config with ``device: cuda`` (one job per layer through
  the GPU slot pool, then one per recipe) and the same with ``device: cpu``: equal mask entries.

Nothing here is a test: CI never runs it. Reading the authors' code needs matplotlib (and sklearn, replaced
by a stand-in when missing: only their plotting uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

import torch
from gpu_commands import (  # bench/gpu_commands.py
    part_consistency,
    part_distill,
    part_models,
    part_search,
    part_workflow,
)
from gpu_kernels import part_kernels  # bench/gpu_kernels.py


class PartTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int):
    """Raise ``PartTimeout`` in this process after ``seconds`` (SIGALRM)."""
    import signal

    def expire(*_):
        raise PartTimeout(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


PARTS = {
    "kernels": part_kernels,
    "models": part_models,
    "search": part_search,
    "distill": part_distill,
    "consistency": part_consistency,
    "workflow": part_workflow,
}
BUDGET = {"kernels": 120, "models": 220, "search": 120, "distill": 300, "consistency": 90, "workflow": 120}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="where the tables go (markdown)")
    parser.add_argument("--authors", help="a checkout of github.com/vectozavr/thanos (its lib/ is read)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to try the script")
    parser.add_argument("--small", action="store_true", help="small shapes: a try of the script, not numbers")
    parser.add_argument("--work", type=Path, help="models, data and runs (default: beside --out)")
    parser.add_argument("--part-timeout", type=int, help="seconds per part (default: BUDGET's)")
    parser.add_argument(
        "--text", help="distill: a directory with train.jsonl and test.jsonl (thanos demo-data)"
    )
    parser.add_argument(
        "--distill-model", help="distill: the dense model (with only config and tokenizer: random weights)"
    )
    parser.add_argument(
        "--distill-tokens",
        type=int,
        nargs="+",
        help="distill: token budgets (default 1M 10M; --small 8k 16k)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or args.out.parent
    args.distill_tokens = args.distill_tokens or ([8192, 16384] if args.small else [1 << 20, 10 << 20])
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"# {name}, torch {torch.__version__}, {os.cpu_count()} CPU cores", flush=True)
    for part in args.parts.split(","):
        start = time.perf_counter()
        try:
            with deadline(args.part_timeout or BUDGET[part]):
                lines = PARTS[part](args, args.out)
        except Exception as error:  # a part that fails leaves the others' numbers
            lines = [f"{part} failed: {type(error).__name__}: {error}"]
            import traceback

            (args.out / f"{part}-error.txt").write_text(traceback.format_exc()[-20000:])
        print(f"\n## {part} ({time.perf_counter() - start:.0f} s)\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
