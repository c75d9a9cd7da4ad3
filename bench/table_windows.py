"""How far a size search's cost table rests on its held-out windows: each point's loss with the standard
error over the windows, then the mix the table predicts at each size from all the windows and from halves
of them (``thanos.runner.size_choice.predict`` on the per-window losses each measurement records).

    python -m thanos prune-model --model smollm2 --method thanos --sparsity params:0.25 --out O \\
        --calibration demo-data/calib.jsonl --nsamples 64 --seqlen 256 --workdir W --table-only
    python bench/table_windows.py --model smollm2 --search W/search --sizes 0.15,0.25,0.35
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from thanos.models.checkpoint import stored_parameters
from thanos.runner.patterns import AXES
from thanos.runner.size_axes import knobs, recipe_of
from thanos.runner.size_choice import predict


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the dense model's directory")
    parser.add_argument("--search", required=True, help="a search's directory (its candidates/*)")
    parser.add_argument("--sizes", default="0.15,0.25,0.35", help="the sizes predicted, comma-separated")
    args = parser.parse_args()

    measured = {}
    for path in sorted(Path(args.search).glob("candidates/*/measurement.json")):
        record = json.loads(path.read_text())
        if "text_losses" not in record:
            raise SystemExit(f"{path} records no per-window losses: measure the table with this release")
        measured[record["recipe"]] = record
    for recipe, record in measured.items():
        losses = record["text_losses"]
        error = statistics.stdev(losses) / math.sqrt(len(losses))
        print(f"{recipe}: {record['loss']:.4f} ± {error:.4f} (the standard error over {len(losses)} windows)")
    windows = len(next(iter(measured.values()))["text_losses"])
    half = windows // 2
    subsets = {
        f"all {windows}": range(windows),
        f"the first {half}": range(half),
        f"the last {windows - half}": range(half, windows),
        f"the even {len(range(0, windows, 2))}": range(0, windows, 2),
        f"the odd {len(range(1, windows, 2))}": range(1, windows, 2),
    }
    dense, parameters = knobs(args.model), stored_parameters(args.model)
    axes = [axis for axis in AXES if dense.settings(axis)]
    print("| windows the table reads | " + " | ".join(f"`params:{p}`" for p in args.sizes.split(",")) + " |")
    for name, chosen in subsets.items():

        def point(mix: dict[str, str], chosen: range = chosen) -> dict:
            record = measured[recipe_of(mix)]
            return record | {"loss": statistics.mean(record["text_losses"][i] for i in chosen)}

        mixes = [
            predict(dense, axes, math.ceil(float(p) * parameters), point)[0] for p in args.sizes.split(",")
        ]
        print(f"| {name} | " + " | ".join(f"`{mix}`" for mix in mixes) + " |")


if __name__ == "__main__":
    main()
