"""Whether this CPU multiplies half-precision matrices faster than float32: measured once per machine.

Instructions alone do not say it. A CPU without bf16 instructions (AVX2) converts element by element and
runs bf16 products at a quarter of its fp32 rate; one with them may be twice as fast in bf16 (an AMD EPYC,
Zen 4: 345 against 155 GFLOP/s) or slower (an Intel Xeon with AVX512_BF16 and no AMX tiles exposed: 150-166
against 219-296 GFLOP/s, oneDNN's ``brg_matmul:avx512_core_bf16``). So where the instructions exist
(``has_instructions``), ``F.linear`` at ``SHAPE`` is timed in both dtypes, alternating, best of ``REPEATS``
each, and the half-precision dtype counts as faster only at ``MARGIN`` times the float32 rate or more:
float32 is the exact computation and wins a near tie.

The answer is kept in ``$XDG_CACHE_HOME/thanos-prune/cpu-<hash>.json`` (``~/.cache``), one file per CPU
(model and flags), torch version, thread count and dtype, written once: the first process to measure
writes it and every later one, a workflow's jobs included, reads the same answer, so that the dtype a run
computes in does not change from one job or rerun to the next. Where that directory cannot be written,
each process measures for itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from thanos.pruning.algorithms.thanos_blockwise import cpu_identity
from thanos.pruning.machine import machine_cache

# oneDNN's ISA limits (ONEDNN_MAX_CPU_ISA) below the first with bf16 dot products (AVX512_CORE_BF16)
_ISA_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
SHAPE = (1024, 1024, 1024)  # tokens, inputs, outputs of the timed product
REPEATS = 5
MARGIN = 1.2  # how much faster than float32 the half-precision product must be to be chosen


def has_instructions(dtype: torch.dtype) -> bool:
    """Whether this CPU has instructions of ``dtype``'s own for matrix products (bfloat16: AVX512_BF16 or
    AMX; float16: AMX-FP16); oneDNN's ``ONEDNN_MAX_CPU_ISA`` below AVX512_CORE_BF16 turns them off, as it
    does for the products."""
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper() in _ISA_WITHOUT_BF16:
        return False
    probe = {
        torch.bfloat16: ("_is_avx512_bf16_supported", "_is_amx_tile_supported"),
        torch.float16: ("_is_amx_fp16_supported",),
    }.get(dtype, ())
    return any(getattr(torch.cpu, name, lambda: False)() for name in probe)


def speedup(dtype: torch.dtype) -> float:
    """float32 seconds over ``dtype`` seconds of ``F.linear`` at ``SHAPE`` on this CPU (best of
    ``REPEATS`` each, the two alternating)."""
    tokens, inputs, outputs = SHAPE
    generator = torch.Generator().manual_seed(0)
    pairs = {
        dt: (torch.randn(tokens, inputs, generator=generator).to(dt), torch.randn(outputs, inputs).to(dt))
        for dt in (torch.float32, dtype)
    }
    best = {dt: float("inf") for dt in pairs}
    for _ in range(REPEATS + 1):  # the first round warms up
        for dt, (x, W) in pairs.items():
            start = time.perf_counter()
            F.linear(x, W)
            best[dt] = min(best[dt], time.perf_counter() - start)
    return best[torch.float32] / best[dtype]


def _cache_file(dtype: torch.dtype) -> Path:
    key = "\0".join([cpu_identity(), torch.__version__, str(torch.get_num_threads()), str(dtype)])
    return machine_cache() / f"cpu-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def faster_than_float32(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` products run at least ``MARGIN`` times the float32 rate here: False without the
    instructions; else the machine's recorded answer, measured (``speedup``) and recorded the first time."""
    return has_instructions(dtype) and _recorded(dtype)


@functools.cache
def _recorded(dtype: torch.dtype) -> bool:
    """The answer recorded for this machine, or measured and recorded now."""
    try:
        file: Path | None = _cache_file(dtype)
        return bool(json.loads(file.read_text())["faster"])
    except RuntimeError:  # no home directory: nowhere to record the answer
        file = None
    except (OSError, ValueError, KeyError):  # not measured yet (or an unreadable record: measured again)
        pass
    ratio = speedup(dtype)
    record = {"dtype": str(dtype).removeprefix("torch."), "speedup": round(ratio, 3), "margin": MARGIN}
    record["faster"] = ratio >= MARGIN
    if file is not None:
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=file.parent, suffix=".tmp", delete=False) as tmp:
                json.dump(record, tmp)
            try:
                os.link(tmp.name, file)  # the first process to measure writes the answer; later ones read it
            except FileExistsError:
                record = json.loads(file.read_text())
            finally:
                os.unlink(tmp.name)
        except (OSError, ValueError):  # a cache that cannot be written: this process's answer
            pass
    return bool(record["faster"])
