"""What publishing a model as a verified copy costs: ``thanos.stages.publish.publish`` against ``cp -r`` of
the same directory, and the sha256 record ``assemble`` writes, on a model directory of ``--gib`` GiB.

    OMP_WAIT_POLICY=PASSIVE python bench/publish_copy.py --gib 4

The weights are random bytes in shards of 2 GiB (the contents do not change the cost). The page cache is
warm for every step (the file was just written), so this measures CPU and memory bandwidth, the part the
copy adds beyond the disk's own speed; on a cold cache each step reads the model from disk once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from thanos.files import digests
from thanos.stages.publish import publish

SHARD = 2 << 30


def build(model: Path, size: int) -> None:
    model.mkdir(parents=True)
    block = os.urandom(64 << 20)
    index = 0
    while size > 0:
        part = min(SHARD, size)
        with open(model / f"model-{index:05d}.safetensors", "wb") as handle:
            for _ in range(part // len(block)):
                handle.write(block)
            handle.write(block[: part % len(block)])
        size -= part
        index += 1
    (model / "config.json").write_text("{}\n")


def timed(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=4.0, help="model size in GiB (default 4)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="publish-bench-", dir=args.dir))
    try:
        model = root / "model"
        build(model, int(args.gib * (1 << 30)))
        rows = {}
        record: dict = {}
        rows["sha256 record (assemble)"] = timed(lambda: record.update(digests.record(model)))
        (model / digests.REPORT).write_text(json.dumps({"files": record}))
        rows["cp -r"] = timed(lambda: subprocess.run(["cp", "-r", str(model), str(root / "cp")], check=True))
        rows["publish (verified copy)"] = timed(lambda: publish(model, root / "out"))
        rows["publish again (unchanged)"] = timed(lambda: publish(model, root / "out"))
        print(f"model directory: {args.gib:g} GiB in {len(record) - 1} shard(s), page cache warm")
        print(f"{'step':28} {'seconds':>8} {'GiB/s':>7} {'vs cp -r':>9}")
        for step, seconds in rows.items():
            print(f"{step:28} {seconds:8.2f} {args.gib / seconds:7.2f} {seconds / rows['cp -r']:8.2f}x")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
