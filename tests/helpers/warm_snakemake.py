"""The tests' ``snakemake`` runs as forks of one warm process per pytest worker.

A ``snakemake`` command on a tiny model spends most of its CPU seconds importing Snakemake (~1.0 of 1.3
CPU-s for a dry run; the suite starts it ~130 times). ``run`` gives the same command line to a process that
imported Snakemake once (started on first use, ended with the pytest worker): it forks a child that becomes
the command (its working directory, environment, arguments, stdout and stderr) and runs Snakemake's own
``main`` on it, as ``python -m snakemake`` would; the child's exit status comes back. It is the pattern of
the product's job worker (``thanos.jobs.worker``), applied to the tests' Snakemake starts: the same
Snakemake, a new process per run, nothing of one run left in the next.

Only the tests' runs that no test signals go here (conftest's ``snakemake`` without ``popen``): a run a test
kills or interrupts is a process of its own, as a user's is. A command whose interpreter or Python path
differs from this process's runs as a plain subprocess.

``python tests/helpers/warm_snakemake.py FD PARENT`` is the warm process (FD: its listening socket).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path

# what a `snakemake` start imports (python -X importtime): ~0.8 CPU-s of it
PRELOAD = ("snakemake.cli", "snakemake.report.html_reporter", "smart_open", "jsonschema", "yte")
_LENGTH = struct.Struct("!I")
_PID = struct.Struct("!q")
_STATUS = struct.Struct("!i")
_PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE")


def _recv_exact(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class WarmSnakemake:
    """The warm process, started now; ``run`` runs a ``snakemake`` command line in a fork of it."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="warm-snakemake-"))
        self.path = self.directory / "socket"
        self.env = dict(os.environ)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(self.path))
            listener.listen(16)
            process = subprocess.Popen(
                [sys.executable, __file__, str(listener.fileno()), str(os.getpid())],
                pass_fds=[listener.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                env=self.env,
            )
        self._finalizer = weakref.finalize(self, _stop, process, self.directory)

    def takes(self, cmd: Sequence[str], env: dict[str, str]) -> bool:
        """Whether ``cmd`` is ``python -m snakemake ...`` with this process's interpreter and Python path."""
        same_python = all(env.get(name) == self.env.get(name) for name in _PYTHON_ENV)
        return list(cmd[:3]) == [sys.executable, "-m", "snakemake"] and same_python

    def run(self, cmd: Sequence[str], env: dict[str, str], cwd: Path | str | None = None):
        """``subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)``, in a fork of the warm
        process when it ``takes`` the command (and is there), else as that subprocess."""
        cwd = str(cwd or os.getcwd())
        if self.takes(cmd, env):
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                code = self._forked(list(cmd[3:]), env, cwd, out, err)
                if code is not None:
                    out.seek(0)
                    err.seek(0)
                    stdout, stderr = out.read().decode(), err.read().decode()
                    return subprocess.CompletedProcess(list(cmd), code, stdout, stderr)
        return subprocess.run(list(cmd), capture_output=True, text=True, env=env, cwd=cwd)

    def _forked(self, argv: list[str], env: dict[str, str], cwd: str, out, err) -> int | None:
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        with open(os.devnull, "rb") as stdin, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(str(self.path))
                fds = [stdin.fileno(), out.fileno(), err.fileno()]
                socket.send_fds(conn, [_LENGTH.pack(len(request)) + request], fds)
                if _recv_exact(conn, _PID.size) is None:
                    return None  # the warm process is gone: nothing ran
                status = _recv_exact(conn, _STATUS.size)
            except OSError:
                return None
        if status is None:
            raise RuntimeError("the warm snakemake process ended during a run")
        (code,) = _STATUS.unpack(status)
        return code if code >= 0 else 128 - code


def _stop(process: subprocess.Popen, directory: Path) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    with contextlib.suppress(OSError):
        (directory / "socket").unlink()
        directory.rmdir()


def _child(request: dict, fds: list[int]) -> None:
    """In the fork: become the command and run Snakemake's ``main``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [sys.argv[0], *request["argv"]]
        sys.path.insert(0, request["cwd"])  # as `python -m` puts its working directory first
        from snakemake.cli import main

        try:
            main(request["argv"])
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else int(end.code is not None)
            if isinstance(end.code, str):
                print(end.code, file=sys.stderr)
        atexit._run_exitfuncs()  # what the interpreter's exit runs (logging's flush, Snakemake's own)
    except BaseException as error:  # noqa: BLE001 - a child never returns into the accept loop
        print(f"ERROR: {type(error).__name__}: {error}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(listener: socket.socket, parent: int) -> None:
    """Fork a child per request on ``listener`` until the process ``parent`` ends (or SIGTERM)."""
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()  # the imports' objects out of the children's collections (no copy of their pages)
    running: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while not stopping and os.getppid() == parent:
        if selector.select(timeout=0.05):
            _accept(listener, running)
        for child in list(running):
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                with contextlib.suppress(OSError), running.pop(child) as conn:
                    conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))


def _accept(listener: socket.socket, running: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    try:
        message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        (size,) = _LENGTH.unpack(message[: _LENGTH.size])
        body = message[_LENGTH.size :]
        request = json.loads(body + (_recv_exact(conn, size - len(body)) or b""))
    except (OSError, ValueError, struct.error):
        conn.close()
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    child = os.fork()
    if child == 0:
        listener.close()
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(_PID.pack(child))
    running[child] = conn


if __name__ == "__main__":
    here = Path(__file__).resolve().parent  # not on the children's path: they see a `snakemake`'s
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]))
