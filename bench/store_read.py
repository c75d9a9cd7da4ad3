"""Read throughput of the zarr stores, before and after chunk checksums and the manifest.

Capture-like: an activation store (nsamples, seqlen, hidden), one sample per chunk, in the model's dtype,
opened and read ``--batch-size`` samples at a time (what capture and propagate do). Prune-like: a Hessian
store with one fp32 (b, b) array per Llama input group (attn_in, attn_out, mlp_in: hidden; mlp_out:
intermediate), opened and read group by group (what prune does).

"before" is the store module (``thanos/storage.py`` then) at git commit ``--base`` (zstd chunks, no checksum,
no manifest), "after" the working tree's (a crc32c per chunk, no compression; ``--with-zstd``: zstd, then the
crc32c; the manifest is verified on open). Each version writes its own stores from the same random data, then
both are read ``--repeats`` times, alternating, from a warm page cache; a read's time includes opening the
store. Prints a table (median seconds, MB/s of decoded data, MB on disk); writes bench/out/store_read.json.

    python bench/store_read.py [--hidden 2048] [--intermediate 5632] [--seqlen 2048] [--nsamples 16]
        [--dtype bfloat16] [--batch-size 8] [--repeats 5] [--base 49ab747] [--with-zstd]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from revisions import module_at  # bench/revisions.py

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out" / "store_read.json"


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def read_activations(storage: ModuleType, path: Path, batch_size: int) -> int:
    acts = storage.Activations(path)
    nbytes = 0
    for start in range(0, acts.nsamples, batch_size):
        nbytes += acts.read(start, min(start + batch_size, acts.nsamples)).nbytes
    return nbytes


def read_hessians(storage: ModuleType, path: Path, groups: list[str]) -> int:
    store = storage.Hessians(path)
    return sum(store.get(name).nbytes for name in groups)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--nsamples", type=int, default=16)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", default="49ab747", help="git commit of the 'before' storage.py")
    parser.add_argument(
        "--with-zstd", action="store_true", help="'after' stores zstd-compressed before the crc32c"
    )
    args = parser.parse_args()

    import torch

    sys.path.insert(0, str(REPO))
    import thanos.data.storage

    if args.with_zstd:
        from zarr.codecs import Crc32cCodec, ZstdCodec

        thanos.data.storage.COMPRESSORS = (ZstdCodec(level=0), Crc32cCodec())

    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    samples = [
        torch.randn(1, args.seqlen, args.hidden, generator=generator).to(dtype) for _ in range(args.nsamples)
    ]
    sizes = {"attn_in": args.hidden, "attn_out": args.hidden, "mlp_in": args.hidden}
    sizes["mlp_out"] = args.intermediate
    hessians = {name: torch.randn(b, b, generator=generator) for name, b in sizes.items()}
    groups = list(hessians)

    rows = []
    with tempfile.TemporaryDirectory(prefix="thanos-bench-") as tmp:
        work = Path(tmp)
        versions = {"before": module_at(args.base, "thanos/data/storage.py"), "after": thanos.data.storage}
        stores = {}
        for version, storage in versions.items():
            acts = work / f"{version}_inputs.zarr"
            with storage.write_activations(
                acts, args.nsamples, args.seqlen, args.hidden, dtype, block=0
            ) as writer:
                for i, sample in enumerate(samples):
                    writer.write(i, sample)
            hess = work / f"{version}_hessians.zarr"
            storage.write_hessians(hess, hessians, {"block": 0, "nsamples": args.nsamples})
            stores[version] = {"capture-like": acts, "prune-like": hess}
        times: dict[tuple[str, str], list[float]] = {}
        nbytes: dict[str, int] = {}
        for _ in range(args.repeats):
            for version, storage in versions.items():
                for kind, path in stores[version].items():
                    started = time.perf_counter()
                    if kind == "capture-like":
                        nbytes[kind] = read_activations(storage, path, args.batch_size)
                    else:
                        nbytes[kind] = read_hessians(storage, path, groups)
                    times.setdefault((kind, version), []).append(time.perf_counter() - started)
        for (kind, version), seconds in sorted(times.items()):
            median = statistics.median(seconds)
            rows.append(
                {
                    "kind": kind,
                    "version": version,
                    "seconds": median,
                    "MB": nbytes[kind] / 1e6,
                    "MB_per_s": nbytes[kind] / 1e6 / median,
                    "disk_MB": disk_mb(stores[version][kind]),
                }
            )

    print(
        f"activations {args.nsamples} x {args.seqlen} x {args.hidden} {args.dtype}, batch {args.batch_size}; "
        f"Hessians fp32 {args.hidden} (x3), {args.intermediate}; median of {args.repeats} warm reads"
        + ("; 'after' with zstd" if args.with_zstd else "")
    )
    print(f"{'kind':>13} {'version':>7} {'seconds':>8} {'MB':>7} {'MB/s':>7} {'disk MB':>8}")
    for row in rows:
        print(
            f"{row['kind']:>13} {row['version']:>7} {row['seconds']:8.3f} {row['MB']:7.1f} "
            f"{row['MB_per_s']:7.0f} {row['disk_MB']:8.1f}"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {"args": vars(args), "python": platform.python_version(), "torch": torch.__version__}
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
