"""Wall time per rule of a finished Snakemake run, from its log (job start to "Finished jobid").

    python bench/rule_times.py .snakemake/log/2026-11-23T190528.123456.snakemake.log

Prints, per rule, the number of jobs and their total and mean seconds (1 s resolution: Snakemake's time
stamps), then the run's wall time (first to last time stamp). Jobs run side by side, so the totals add
up to more than the wall time on a machine with several cores.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")


def rule_times(log: Path) -> tuple[dict[str, list[float]], float]:
    started: dict[str, tuple[str, datetime]] = {}
    seconds: dict[str, list[float]] = defaultdict(list)
    stamp = first = None
    pending = None
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            stamp = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
        elif (m := JOB.match(line)) and stamp:
            pending = (m.group(1), stamp)
        elif (m := JOBID.match(line)) and pending:
            started[m.group(1)] = pending
            pending = None
        elif (m := FINISHED.match(line)) and m.group(1) in started:
            rule, t0 = started.pop(m.group(1))
            seconds[rule].append((stamp - t0).total_seconds())
    if first is None:
        raise SystemExit(f"{log}: no time stamps; is it a Snakemake log?")
    return dict(seconds), (stamp - first).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log", type=Path, help="a .snakemake/log/*.snakemake.log file")
    args = parser.parse_args()
    seconds, wall = rule_times(args.log)
    print(f"{'rule':<16} {'jobs':>5} {'total s':>8} {'mean s':>7}")
    for rule, values in sorted(seconds.items(), key=lambda item: -sum(item[1])):
        print(f"{rule:<16} {len(values):>5} {sum(values):>8.0f} {sum(values) / len(values):>7.1f}")
    print(
        f"wall time (first to last time stamp): {wall:.0f} s = {int(wall // 60)} min {int(wall % 60):02d} s"
    )


if __name__ == "__main__":
    main()
