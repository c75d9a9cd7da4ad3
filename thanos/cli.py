"""``python -m thanos <command>``: the command-line interface the Snakemake rules call.

Commands are discovered from the modules of ``thanos.commands``: each defines ``HELP`` (one line, a string
literal: ``--help`` reads it from the source), ``add_arguments(parser)`` and ``run(args)``. A module
``foo_bar`` is the command ``foo-bar``; only the module of the command being run is imported.

Any error ends the command with exit status 2 and one line, last on stderr: ``ERROR: <what went wrong>
(<path>); <how to fix it>``. When stderr is a file (a Snakemake job's log) the traceback is logged before
that line; on a terminal only the line is shown (``-v`` shows the traceback too).
"""

from __future__ import annotations

import argparse
import ast
import atexit
import contextlib
import difflib
import functools
import importlib
import logging
import os
import pkgutil
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import thanos.commands
from thanos.errors import RESUME, Terminated, describe, interruption

log = logging.getLogger("thanos")

EXIT_ERROR = 2


def _command_modules() -> dict[str, str]:
    names = sorted(
        m.name for m in pkgutil.iter_modules(thanos.commands.__path__) if not m.name.startswith("_")
    )
    return {name.replace("_", "-"): name for name in names}


def _help(name: str) -> str:
    """A command module's ``HELP``, read from its source without importing it (imports can be slow)."""
    source = Path(thanos.commands.__path__[0], f"{name}.py").read_text()
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["HELP"]
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return importlib.import_module(f"thanos.commands.{name}").HELP


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named in ``argv``: its first word that is not an option (global options take none)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, as every other error: ``ERROR: thanos prune-model:
    argument --method: invalid choice: 'thanoss' (choose from ...); did you mean 'thanos'?``, exit status 2,
    without the usage (``--help`` shows it)."""

    def error(self, message: str) -> NoReturn:
        given = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if given is not None:
            choices = re.findall(r"'([^']*)'", given.group(2))
            close = difflib.get_close_matches(given.group(1), choices, n=1)
            message += f"; did you mean {close[0]!r}?" if close else ""
        self.exit(EXIT_ERROR, f"ERROR: {self.prog}: {message} ({self.prog} --help shows every option)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the arguments of ``command`` only (its module is the only one imported); the
    other commands are listed with their ``HELP`` where the list is shown (no command, or one that is not a
    command: ``thanos --help``, the error naming the closest): a command's own run does not read every
    command's source for it (25 ms of a workflow job of 65 ms)."""
    parser = Parser(
        prog="thanos",
        description="Thanos LLM pruning.\n\nTo prune a model with one command:  thanos prune-model --help\n"
        "The other commands are the workflow's stages (calibrate, capture, prune, assemble, evaluate, ...).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    parser.add_argument("--version", action="version", version=f"thanos-prune {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    commands = _command_modules()
    for name, module_name in commands.items():
        if name != command:
            if command not in commands:
                sub.add_parser(name, help=_help(module_name))
            continue
        module = importlib.import_module(f"thanos.commands.{module_name}")
        cmd = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(cmd)
        passthrough = getattr(module, "PASSTHROUGH", False)  # the arguments it does not know go to a tool
        cmd.set_defaults(
            _run=module.run,
            _traceback=getattr(module, "TRACEBACK", True),
            _passthrough=passthrough,
            _parser=cmd,
        )
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("thanos-prune")
    except PackageNotFoundError:
        return "(not installed)"


def _report(err: BaseException, verbose: bool, traceback: bool = True) -> None:
    """The traceback to the log (stderr when it is not a terminal, or with -v; not for a command's own
    errors when ``traceback`` is False), then the one line."""
    line = describe(err)
    own = isinstance(err, ValueError | OSError | TypeError)
    if verbose or (not sys.stderr.isatty() and (traceback or not own)):
        log.error("%s", line, exc_info=err)
    _last_line(f"ERROR: {line}")


def _last_line(line: str) -> None:
    """``line`` on stderr after everything already written (stdout too: ``> log 2>&1`` shares the file),
    and last: zarr's reads still pending when a store failed would otherwise be reported by asyncio after
    it, at interpreter exit ("Task was destroyed but it is pending")."""
    for stream in (sys.stdout, *(getattr(h, "stream", None) for h in logging.getLogger().handlers)):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    before = argv[: argv.index(command)] if command else argv
    verbose = "-v" in before or "--verbose" in before
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    with _sigterm_as_interrupt():  # ends as Ctrl-C does: finished work kept, the resume line
        return _run(argv, command, verbose)


def _run(argv: list[str], command: str | None, verbose: bool) -> int:
    """The command's exit status: 0, ``EXIT_ERROR`` after its one ``ERROR:`` line, or an interruption's."""
    args = None
    try:
        parser = build_parser(command)
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "_passthrough", False):
            args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args._extra = extra
        args._run(args)
    except KeyboardInterrupt as err:
        word, status = interruption(err)
        _last_line(f"ERROR: {word}; {getattr(err, 'resume', RESUME)}")
        return status
    except Exception as err:  # noqa: BLE001 - every error ends as one line (and a logged traceback)
        _report(err, verbose, getattr(args, "_traceback", True))
        return EXIT_ERROR
    return 0


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) where the command is, for the duration (the
    handler before restored after: ``main`` also runs inside other processes, a test's or a job worker's);
    nothing where signals cannot be handled (another thread than the main one)."""
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        yield
        return
    hook, sys.unraisablehook = sys.unraisablehook, functools.partial(_sent_again, sys.unraisablehook)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = hook


def _sent_again(hook: Callable[[Any], object], unraisable: Any) -> None:
    """An interruption raised inside a finalizer (an object's ``__del__`` the garbage collector ran, where
    the signal's handler happened to run) is printed and dropped by Python, and the command went on to the
    end as if it had not come: the signal is sent again, from another thread a moment later, so that it
    is raised where the command is. Anything else goes to ``hook``, Python's."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        hook(unraisable)
        return
    number = signal.SIGINT
    if isinstance(unraisable.exc_value, Terminated):
        number = signal.SIGTERM
        signal.signal(signal.SIGTERM, _terminate)  # its handler ignores a second one once it has raised
    log.debug(
        "%s raised in a finalizer, where Python drops it: sent again", type(unraisable.exc_value).__name__
    )
    again = threading.Timer(0.01, os.kill, (os.getpid(), number))
    again.daemon = True
    again.start()


def _terminate(_signum: int, _frame: object) -> None:
    """SIGTERM's handler: raise ``Terminated``; a second one while the command stops is ignored (the first
    one's cleanup finishes)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once what a normal exit runs first has run (the atexit handlers:
    logging's flush, zarr's event loop, coverage) and the output is flushed, without the interpreter's
    teardown of every module, which takes about a second after torch and transformers were imported
    (a ``prune-model`` run of a small model: 12.7 s -> 11.8 s). Every file is closed by then: the stages
    write through context managers and zarr's synchronous calls."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def entry() -> NoReturn:
    """The ``thanos`` command: ``main()``, then ``exit_now``."""
    exit_now(main())
