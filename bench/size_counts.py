"""The parameters of a size search's mixes (``thanos.runner.size_axes``), each counted both ways in one
process: on its whole skeleton, and from the skeletons of its first block and first two (``_count``, the
dense check included); the counts must agree, and each way's milliseconds a mix are printed.

    python -m thanos real-model --out smollm2
    OMP_WAIT_POLICY=PASSIVE python bench/size_counts.py --model smollm2
"""

from __future__ import annotations

import argparse
import json
import time

from thanos.runner import size_axes


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", required=True, help="the dense model's directory")
    args = parser.parse_args()
    dense = size_axes.knobs(args.model)
    size_axes._built(args.model, json.dumps(dense.changes({}), sort_keys=True))  # transformers imported
    mixes = [
        {axis: setting} for axis in ("depth", "heads", "neurons", "vocab") for setting in dense.settings(axis)
    ]
    configs = [json.dumps(dense.changes(mix), sort_keys=True) for mix in mixes]
    seconds, counts = {}, {}
    for way, count in (("whole skeleton", size_axes._built), ("first blocks", size_axes._count)):
        for cached in (size_axes._built, size_axes._count, size_axes._uniform):
            cached.cache_clear()
        began = time.perf_counter()
        counts[way] = [count(args.model, config) for config in configs]
        seconds[way] = time.perf_counter() - began
    assert counts["whole skeleton"] == counts["first blocks"], "the counts differ"
    for way, took in seconds.items():
        print(f"{way}: {1000 * took / len(configs):.1f} ms a mix ({len(configs)} mixes, the same counts)")


if __name__ == "__main__":
    main()
