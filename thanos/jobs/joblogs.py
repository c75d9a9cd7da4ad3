"""The logs of a workflow's failed jobs, shown on the terminal (the Snakefile's ``onerror`` handler).

Snakemake's own message for a failed job ends with ``log: PATH (check log file(s) for error details)``;
every stage writes its errors into that log (``python -m thanos ... > {log} 2>&1``), ending with one
``ERROR: ...`` line. ``failed_job_logs`` finds those paths in Snakemake's log file of the run, ``summary``
shows each one's ERROR line (or its last lines, for a job that died without one), so the error that
stopped the run is on the terminal, its traceback in the log. Torch-free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

LINES = 12  # last lines shown per failed job
_RULE = re.compile(r"^\s*(?:Error in )?rule (\S+?):\s*$")
_LOG = re.compile(r"^\s*log: (.+) \(check log file\(s\) for error details\)\s*$")


def failed_job_logs(text: str) -> list[tuple[str, str]]:
    """(rule, log path) of every failed job that Snakemake's log ``text`` reports, in order, once each."""
    found: list[tuple[str, str]] = []
    rule = "?"
    for line in text.splitlines():
        if match := _RULE.match(line):
            rule = match.group(1)
        elif match := _LOG.match(line):
            listed = match.group(1)
            paths = [listed] if os.path.isfile(listed) else listed.split(", ")
            found += [(rule, path) for path in paths if (rule, path) not in found]
    return found


def last_lines(path: str, count: int = LINES) -> list[str]:
    """The last ``count`` non-empty lines of a log; a progress bar's carriage-return updates count as
    their last state."""
    with open(path, errors="replace") as handle:
        lines = [line.rsplit("\r", 1)[-1].rstrip() for line in handle.read().splitlines()]
    return [line for line in lines if line.strip()][-count:]


def error_lines(path: str, count: int = LINES) -> tuple[bool, list[str]]:
    """What a failed job's log says went wrong: (True, its ``ERROR: ...`` lines, the one line a thanos
    command ends with; the traceback above them stays in the log), or (False, the last ``count`` lines)
    for a job that died without one (killed, out of memory, a crash in a library)."""
    lines = last_lines(path, 10**9)
    errors = [line for line in lines if line.startswith("ERROR: ")]
    return (True, errors[-count:]) if errors else (False, lines[-count:])


def summary(snakemake_logs: Iterable[str], count: int = LINES) -> str:
    """What every failed job's log named in Snakemake's log files says went wrong ("" when none is)."""
    parts = []
    for snakemake_log in snakemake_logs:
        if not os.path.isfile(snakemake_log):
            continue
        with open(snakemake_log, errors="replace") as handle:
            jobs = failed_job_logs(handle.read())
        for rule, path in jobs:
            if not os.path.isfile(path):
                parts.append(f"rule {rule}: no log at {path}")
                continue
            is_error, lines = error_lines(path, count)
            what = "its error (traceback in" if is_error else "last lines of"
            parts.append(f"rule {rule} failed; {what} {path}{')' if is_error else ''}:")
            parts += [f"    {line}" for line in lines] or ["    (empty)"]
    return "\n".join(parts)
