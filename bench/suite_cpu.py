"""CPU seconds of the test suite, per file and per test (the table of docs/testing.md).

    python bench/suite_cpu.py [--read FILE] [-- PYTEST ARGS]

Runs ``python -m pytest -q`` (the README's test command without its installs; PYTEST ARGS replace ``-q``)
with ``THANOS_TEST_CPU`` set, then prints: the machine's busy CPU seconds over the whole run
(``/proc/stat``, all cores: run it alone), the CPU seconds of each test file (its tests' pytest worker and
every process below it, ``tests/helpers/cpu.py``), and the slowest tests. ``--read FILE`` prints the
tables of an earlier run's file without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tables(path: Path, top: int) -> str:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    runs = [record for record in records if record.get("run")]
    tests = [record for record in records if "test" in record]
    files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for record in tests:
        row = files[record["test"].split("::", 1)[0]]
        row[0] += 1
        row[1] += record["cpu_s"]
        row[2] += record["wall_s"]
    measured = sum(record["cpu_s"] for record in tests)
    lines = []
    if runs:
        run = runs[-1]
        lines.append(
            f"whole run: {run['tests']} tests, {run['wall_s']:.0f} s, {run['busy_cpu_s']:.0f} busy CPU-s "
            f"(machine, /proc/stat); {measured:.0f} CPU-s in the tests' process trees, the rest imports, "
            "collection and processes outside them"
        )
    lines += ["", "| file | tests | CPU-s | share | test-seconds |", "|---|--:|--:|--:|--:|"]
    for name, (count, cpu, wall) in sorted(files.items(), key=lambda item: -item[1][1]):
        share = 100 * cpu / max(measured, 1e-9)
        lines.append(f"| {name} | {count} | {cpu:.0f} | {share:.0f} % | {wall:.0f} |")
    lines += ["", f"slowest {top} tests by CPU-s (setup and teardown included):", ""]
    for record in sorted(tests, key=lambda record: -record["cpu_s"])[:top]:
        lines.append(f"{record['cpu_s']:8.1f} CPU-s {record['wall_s']:8.1f} s  {record['test']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--read", type=Path, help="print the tables of an earlier run's file")
    parser.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list")
    parser.add_argument("--keep", type=Path, help="the measurements' file (default: a temporary one)")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest after --, instead of -q")
    args = parser.parse_args(argv)
    if args.read:
        print(tables(args.read, args.top))
        return 0
    path = args.keep or Path(tempfile.mkstemp(suffix=".jsonl", prefix="suite-cpu-")[1])
    path.write_text("")
    env = {**os.environ, "THANOS_TEST_CPU": str(path), "OMP_WAIT_POLICY": "PASSIVE"}
    command = [sys.executable, "-m", "pytest", *(args.pytest_args or ["-q"])]
    status = subprocess.call(command, cwd=REPO, env=env)
    print(f"\n(measurements: {path})\n" + tables(path, args.top))
    return status


if __name__ == "__main__":
    sys.exit(main())
