"""A ``thanos`` command started as a terminal starts it, for the tests that stop it with Ctrl-C's signal."""

from __future__ import annotations

import sys

# SIGINT at its default and unblocked, whatever the test process inherited (a worker of the test runner, or
# a CI script's background job, may ignore or block it, and a child inherits both: Python then never turns
# SIGINT into KeyboardInterrupt)
_AS_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); "
    "os.execv(sys.executable, [sys.executable, '-m', 'thanos', *sys.argv[1:]])"
)


def thanos_as_terminal(*args: object) -> list[str]:
    """The command line of ``python -m thanos ARGS`` started with SIGINT as a terminal leaves it."""
    return [sys.executable, "-c", _AS_TERMINAL, *map(str, args)]
