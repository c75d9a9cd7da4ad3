"""A local job worker: ``python -m thanos <command>`` jobs run in a fork of one warm process.

A Snakemake job's command is ``python -m thanos <stage> ... > log 2>&1``; most of its seconds on a small
model are the Python start and the imports (torch, transformers: ~4 s per job on a busy CPU), not the
stage. A local run starts one worker that imports them once and listens on a Unix socket named by
``THANOS_WORKER`` in the jobs' environment: a ``snakemake`` command line run by the local executor (the
Snakefile's ``onstart``, ``for_this_run``; ``thanos prune-model`` runs its stages in its own process). A job's
``python -m thanos`` then only forwards its arguments, working directory, environment and its
stdin/stdout/stderr (the job's log) to the worker, which forks a child that runs the same
``thanos.cli.main`` on them and reports the child's exit status back; signals the job receives are passed
on to the child.

Nothing else changes: the same rules and shell commands (a dry run prints them), the same files written
the same way by the same code (a child is one process per job, its memory freed when it ends), the same
Snakemake metadata, so resuming and caching are untouched. Without ``THANOS_WORKER`` (a cluster job, a
job run by hand), with ``THANOS_WORKER=off`` (set it before ``snakemake`` to give every job its own
Python) or when the worker cannot be reached, ``python -m thanos`` runs the command itself as before. The
worker ends with the process that started it, and stops its running jobs then.

The worker never initialises CUDA (its imports check devices through NVML only), so a job's child uses
the GPUs its environment names (``CUDA_VISIBLE_DEVICES``) as a new process would.

This module imports nothing heavy at import time: ``python -m thanos`` imports it first.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path

ENV = "THANOS_WORKER"
# imported once by the worker, before any job: what the stages import (transformers' model classes are
# imported lazily by transformers itself, so the adapters' are named)
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "safetensors.torch",
    "zarr",
    "thanos.cli",
    "thanos.models",
    "thanos.stages.calibrate",
    "thanos.stages.capture",
    "thanos.stages.chain",
    "thanos.stages.prune",
    "thanos.stages.assemble",
)
# imported after PRELOAD, one module at a time while no job is waiting, by the worker of a run that
# evaluates (perplexity or zero-shot enabled): what the evaluation stages import
LATER = (
    "datasets",
    "thanos.evaluation.perplexity",
    "lm_eval",
    "lm_eval.tasks",
    "lm_eval.models.huggingface",
    "thanos.evaluation.zeroshot",
)
OFF = ("", "0", "off", "no", "false")
# read by the hub clients when imported (the worker imported them): a job's own value is applied by hand
OFFLINE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
_HEADER = struct.Struct("!I")
_PID = struct.Struct("!q")
_STATUS = struct.Struct("!i")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
POLL_S = 0.1


def _recv_exact(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def forward(argv: Sequence[str]) -> int | None:
    """Run ``python -m thanos argv`` in the worker named by ``THANOS_WORKER``; its exit status, or None
    when there is no worker to run it (the caller runs the command itself)."""
    path = os.environ.get(ENV, "")
    if path.lower() in OFF:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = json.dumps({"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(request)) + request], [0, 1, 2])
        reply = _recv_exact(conn, _PID.size)
    except OSError:
        conn.close()
        return None
    if reply is None:  # the worker ended before it took the job: nothing ran
        conn.close()
        return None
    (child,) = _PID.unpack(reply)

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in _FORWARDED:
        signal.signal(signum, pass_on)
    with conn:
        status = _recv_exact(conn, _STATUS.size)
    if status is None:
        print(f"ERROR: the thanos worker ({path}) ended while running this job; rerun", file=sys.stderr)
        return 1
    (code,) = _STATUS.unpack(status)
    if code < 0:  # killed by a signal it could not answer (its own lines say an interrupt or a SIGTERM)
        print(f"ERROR: {killed_text(-code)}; what it finished is kept: rerun to resume", file=sys.stderr)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it


def killed_text(signum: int) -> str:
    """A job killed by signal ``signum``, in words (the out-of-memory killer's SIGKILL named as such)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = " (the system's out-of-memory killer, or a kill -9)" if signum == signal.SIGKILL else ""
    return f"the job was killed by {name}{why}"


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the job (its stdio, directory, environment) and run it; never returns."""
    code = 1
    try:
        for signum in _FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [sys.argv[0], *request["argv"]]
        if any(request["env"].get(name, "").upper() in ("1", "ON", "YES", "TRUE") for name in OFFLINE):
            from thanos.evaluation.loading import set_offline  # the hub clients read it at import: done

            set_offline()
        threads = request["env"].get("OMP_NUM_THREADS", "")
        import torch

        if threads.isdigit() and int(threads) != torch.get_num_threads():
            torch.set_num_threads(int(threads))
        from thanos.cli import main

        code = main(request["argv"])
    except BaseException as err:  # noqa: BLE001 - a child must end here, never return into the worker loop
        print(f"ERROR: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(listener: socket.socket, parent: int, directory: Path, later: bool = True) -> None:
    """Accept jobs on ``listener`` until the process ``parent`` ends (or SIGTERM): fork one child per job;
    ``later``: import LATER too while idle. Removes ``directory`` (its socket's) when it ends, also after
    its parent was killed."""
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the jobs themselves
    for name in PRELOAD:
        importlib.import_module(name)
    _build_once()
    later = list(LATER) if later else []
    running: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    try:
        while not stopping and os.getppid() == parent:
            if selector.select(timeout=0 if later else POLL_S):
                _accept(listener, running)
            elif later:  # nothing waiting: one more import (a child forked before it imports it itself)
                with contextlib.suppress(Exception):
                    importlib.import_module(later.pop(0))
            _reap(running)
    finally:
        for child in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
        shutil.rmtree(directory, ignore_errors=True)


def _build_once() -> None:
    """Build in the worker what every job would otherwise build again in its fork: transformers' table of
    checkpoint conversions of every model type (``thanos.models.experts.Conversion``, which every job that
    opens a model makes), built on its first use in a process and kept for the process; ~18,000 regular
    expressions compiled, 0.1-0.3 s of each job's CPU on a tiny model. A child reads the same table. A
    transformers without it: each job builds what it needs, as before."""
    with contextlib.suppress(Exception):
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")


def _accept(listener: socket.socket, running: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    try:
        message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        (size,) = _HEADER.unpack(message[: _HEADER.size])
        body = message[_HEADER.size :]
        rest = _recv_exact(conn, size - len(body)) if len(body) < size else b""
        request = json.loads(body + (rest or b""))
    except (OSError, ValueError, struct.error):
        conn.close()
        return
    if len(fds) != 3:
        conn.close()
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # the imports' objects (torch, transformers: millions) out of reach of the cyclic garbage collector:
    # a child's collection would touch every one of them, copying the worker's whole heap page by page
    # into the child (copy-on-write); frozen, the child copies only the pages it uses (the tests' matrix
    # run: 18 % fewer CPU seconds, 28 % fewer page faults). The worker itself only imports and forks.
    gc.freeze()
    child = os.fork()
    if child == 0:
        listener.close()
        conn.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(_PID.pack(child))
    except OSError:
        os.kill(child, signal.SIGTERM)
    running[child] = conn


def _reap(running: dict[int, socket.socket]) -> None:
    for child in list(running):
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == 0:
            continue
        conn = running.pop(child)
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError), conn:
            conn.sendall(_STATUS.pack(code))


def _stop(process: subprocess.Popen, directory: Path) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    shutil.rmtree(directory, ignore_errors=True)


class LocalWorker:
    """A worker process, started now (it imports torch and transformers beside the caller's own work);
    ``env`` holds the variables that send ``python -m thanos`` jobs to it; ``later``: it imports what the
    evaluation stages import too (LATER; a run without evaluation jobs never needs them, and a job that
    does imports them itself). ``stop()`` ends it (so does garbage collection of this object, and the end
    of the process that started it)."""

    def __init__(self, threads: int, later: bool = True) -> None:
        directory = Path(tempfile.mkdtemp(prefix="thanos-worker-"))  # short: a socket path has <108 bytes
        path = directory / "socket"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with listener:  # the worker keeps its copy: jobs can connect (and queue) while it imports
            listener.bind(str(path))
            listener.listen(64)
            env = {
                **os.environ,
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads)),
                "PYTORCH_NVML_BASED_CUDA_CHECK": "1",  # torch.cuda.is_available() without a CUDA context
            }
            process = subprocess.Popen(
                [sys.executable, "-m", "thanos.jobs.worker", str(listener.fileno()), str(os.getpid())]
                + [str(directory), "later" if later else "no-later"],
                pass_fds=[listener.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",  # never inside a working directory (a rerun looks for processes there)
                env=env,
            )
        self.env = {ENV: str(path)}
        self._finalizer = weakref.finalize(self, _stop, process, directory)

    def stop(self) -> None:
        self._finalizer()


_RUN_WORKER: list[LocalWorker] = []


def for_this_run(local: bool, threads: int, evaluates: bool = True) -> str:
    """Start a worker for the jobs of this ``snakemake`` run (the Snakefile's ``onstart``) and put it in the
    environment its jobs inherit; it ends with the run. Not for a cluster run (``local`` False: each job is
    its own process on its node), nor when ``THANOS_WORKER`` is already set (an enclosing run's worker, or
    ``off``). ``evaluates``: the run has evaluation jobs (the worker imports their modules too). Returns a
    line for the log."""
    if not local:
        return "cluster run: every job starts its own Python"
    if ENV in os.environ:
        setting = os.environ[ENV]
        plain = setting.lower() in OFF
        return f"{ENV}={setting}: " + ("every job starts its own Python" if plain else "in use")
    worker = LocalWorker(threads, later=evaluates)
    _RUN_WORKER.append(worker)  # kept alive until the run's process ends
    os.environ.update(worker.env)
    return f"jobs run in forks of one warm worker ({ENV}={worker.env[ENV]}; {ENV}=off turns it off)"


if __name__ == "__main__":
    later = sys.argv[4:5] != ["no-later"]
    serve(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]), Path(sys.argv[3]), later)
