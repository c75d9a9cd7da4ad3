"""CPU seconds of each test, measured when ``THANOS_TEST_CPU`` names a file (``bench/suite_cpu.py`` sets it).

A test's CPU seconds are those of its pytest worker and of every process below it (Snakemake, its jobs, the
shared job worker, ``thanos`` processes, SLURM's daemons started by the tests), setup and teardown
included: the sum, over the worker and its live descendants, of their own and their reaped children's
user and system time (``/proc/PID/stat``), at the end of the test minus at its start. A process that ends
during the test is counted through the ancestor that reaped it; one reparented to init (a double fork) is
not, which is why the controller also records the machine's busy CPU seconds (``/proc/stat``) over the
whole run. One JSON line per test, and one for the whole run, appended to the file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, own + reaped children's CPU seconds) of ``pid``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), sum(int(value) for value in fields[11:15]) / TICK


def tree_seconds(root: int) -> dict[int, float]:
    """CPU seconds (own and reaped children's) of ``root`` and each of its live descendants, by pid."""
    parents: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None:
            parents[int(entry)], seconds[int(entry)] = stat
    inside = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in inside and pid not in inside:
                inside.add(pid)
                changed = True
    return {pid: seconds[pid] for pid in inside if pid in seconds}


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot, all cores (``/proc/stat``: all but idle and iowait)."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICK


class Recorder:
    """The pytest plugin: a line per test into ``path``, and (in the controller) one for the whole run."""

    def __init__(self, path: Path, controller: bool) -> None:
        self.path, self.controller = path, controller
        self.start = (time.monotonic(), busy_seconds())

    def write(self, record: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def measure(self, nodeid: str):  # a generator: the protocol runs at its yield
        wall, before = time.monotonic(), tree_seconds(os.getpid())
        yield
        after = tree_seconds(os.getpid())
        cpu = sum(after.values()) - sum(before.values())
        ended, worker = round(time.time(), 1), os.environ.get("PYTEST_XDIST_WORKER", "")
        record = {"test": nodeid, "cpu_s": round(cpu, 2), "wall_s": round(time.monotonic() - wall, 2)}
        self.write(record | {"ended": ended, "worker": worker})  # when and where: the run's timeline

    def finish(self, tests: int) -> None:
        if self.controller:
            wall, busy = self.start
            self.write(
                {
                    "run": True,
                    "tests": tests,
                    "ended": round(time.time(), 1),
                    "wall_s": round(time.monotonic() - wall, 1),
                    "busy_cpu_s": round(busy_seconds() - busy, 1),
                }
            )
