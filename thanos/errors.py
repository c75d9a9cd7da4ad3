"""Errors about one file or store: what went wrong, where and how to fix it, and ``describe``: any error as
the one line the CLI and ``thanos prune-model`` print after ``ERROR:``."""

from __future__ import annotations

import errno
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class PathError(ValueError):
    """``path`` cannot be used: ``what`` went wrong, ``hint`` says how to fix it.

    ``str(err)`` is ``"<what> (<path>); <hint>"``, the line the CLI prints after ``ERROR:``.
    """

    def __init__(self, what: str, path: str | os.PathLike, hint: str) -> None:
        self.what = what
        self.path = Path(path)
        self.hint = hint
        super().__init__(f"{what} ({self.path}); {hint}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a shell's ``kill``, a scheduler's cancel or time limit), raised where the command is, so
    that it ends as Ctrl-C ends it: what was finished is kept and one line says how to resume. ``status``:
    the exit status, 128 + the signal's number, as a shell reports a process it ended."""

    word = "terminated (SIGTERM)"
    status = 143


# what the last line of a command stopped by an interruption says after it (``thanos.cli``), unless the
# command said what it kept itself: an interruption's ``resume`` (``train-demo``: the step of its state)
RESUME = "what was finished is kept: run the same command again to resume"


def interruption(err: KeyboardInterrupt) -> tuple[str, int]:
    """How an interruption is said and the exit status it ends with: Ctrl-C's (``interrupted``, 130) or a
    ``Terminated``'s. What asyncio would say after it is not said: an interruption during a store's write
    leaves zarr's write task pending in zarr's event loop, and the loop's close at exit reported it ("Task
    was destroyed but it is pending!", through the ``asyncio`` logger) after the resume line, the command's
    last; that store is unfinished, and the rerun computes it again. Nor is the warning of a zarr call's
    coroutine the interruption dropped before it was scheduled ("coroutine ... was never awaited", with
    "Enable tracemalloc ..."), printed when it is collected, at exit."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    return getattr(err, "word", "interrupted"), getattr(err, "status", 130)


MAX_LINE = 2000
_OS_HINTS = {
    errno.ENOSPC: "disk full: free space on that filesystem (or point the results elsewhere) and rerun",
    errno.EDQUOT: "disk quota exceeded: free space or raise the quota, then rerun",
    errno.EACCES: "permission denied: check the permissions of the path",
    errno.EPERM: "operation not permitted: check the permissions of the path",
    errno.ENOENT: "check the path",
    errno.EROFS: "read-only filesystem: write the results elsewhere",
}

# errors of libraries that do not name the file they failed on (the codebase's own readers do)
_LIBRARY_HINTS = {
    "safetensors": "a .safetensors file is truncated or damaged, the traceback shows which reader",
    "zarr": "a zarr store is damaged, the traceback shows which one",
    "numcodecs": "a zarr store is damaged, the traceback shows which one",
}


def describe(err: BaseException) -> str:
    """One line: what went wrong, the path involved, and how to fix it."""
    if isinstance(err, PathError):
        text = str(err)
    elif isinstance(err, OSError) and err.errno is not None:
        paths = " -> ".join(str(p) for p in (err.filename, err.filename2) if p is not None)
        hint = _OS_HINTS.get(err.errno, "check the path and its filesystem, then rerun")
        text = f"{err.strerror or err}" + (f" ({paths})" if paths else "") + f"; {hint}"
    elif isinstance(err, (ValueError, FileNotFoundError)):
        text = str(err)  # the codebase's own errors: they name the path and the fix
    else:
        library = type(err).__module__.split(".")[0]
        hint = _LIBRARY_HINTS.get(library, "unexpected error")
        text = f"{type(err).__name__}: {err}; {hint}: the traceback is in the job's log (or rerun with -v)"
    text = " ".join(text.split())
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


@dataclass(frozen=True)
class Option:
    """An option an error names: ``name`` as a Python keyword (``seqlen``; ``recover.epochs`` within a
    keyword's dict) and, where the error is about what was given, ``value`` as shown (``'3:2'``, ``512``)."""

    name: str
    value: str | None = None


class Words(Protocol):
    """How a front (the command line, Python) names its options."""

    def name(self, option: str) -> str: ...

    def given(self, option: str, value: str) -> str: ...


class FlagWords:
    """The command line's words: ``--seqlen 512``, ``--recover-epochs 0``; ``flags`` names the options whose
    flag is not ``--`` and the name with dashes (``{"disk_check": "--no-disk-check"}``)."""

    def __init__(self, flags: dict[str, str] | None = None) -> None:
        self.flags = flags or {}

    def name(self, option: str) -> str:
        return self.flags.get(option) or "--" + option.replace(".", "-").replace("_", "-")

    def given(self, option: str, value: str) -> str:
        """``--seqlen 4096``; a switch as written: ``--compact`` for True, ``--no-compact`` for False."""
        if option not in self.flags and value in ("True", "False"):
            name = option.replace(".", "-").replace("_", "-")
            return f"--{name}" if value == "True" else f"--no-{name}"
        return f"{self.name(option)} {value}"


class KeyWords:
    """A config's words: ``zeroshot.tasks``, ``zeroshot.include_path: DIR``, the keys under ``section``."""

    def __init__(self, section: str) -> None:
        self.section = section

    def name(self, option: str) -> str:
        return f"{self.section}.{option}"

    def given(self, option: str, value: str) -> str:
        return f"{self.name(option)}: {value}"


class KeywordWords:
    """Python's words: ``seqlen=512``, ``recover['epochs']=0``; ``flags`` names the options whose keyword is
    written with its value (``{"disk_check": "disk_check=False"}``)."""

    def __init__(self, flags: dict[str, str] | None = None) -> None:
        self.flags = flags or {}

    def name(self, option: str) -> str:
        if option in self.flags:
            return self.flags[option]
        head, _, tail = option.partition(".")
        return f"{head}[{tail!r}]" if tail else head

    def given(self, option: str, value: str) -> str:
        return f"{self.name(option)}={value}"


class OptionError(ValueError):
    """Bad input named by its options, for each front to word: ``subject``, the options at fault (with the
    values given), then ``problem``, text and the options it names (what to give instead).

    ``str(err)`` is the command line's words (``--seqlen 4096 exceeds ...; give --seqlen 512 or less``);
    ``err.words(KeywordWords())`` Python's (``seqlen=4096 exceeds ...; give seqlen=512 or less``)."""

    def __init__(
        self,
        subject: Option | Sequence[Option],
        *problem: str | Option,
        words: Words | None = None,
        join: str = " with ",
    ) -> None:
        self.subject = (subject,) if isinstance(subject, Option) else tuple(subject)
        self.problem = problem
        self.join = join  # between the subject's options: ``--recover with --sparsity depth:6``
        self.front: Words = words or FlagWords()
        super().__init__(self.words(self.front))

    def words(self, words: Words) -> str:
        """The error in ``words``: the subject's options joined, a colon unless the problem
        continues the sentence (it starts with a space), then the problem."""
        named = [_word(words, option) for option in self.subject]
        text = "".join(part if isinstance(part, str) else _word(words, part) for part in self.problem)
        if not named:  # about the run as a whole (the disk), naming options only in what to do
            return text
        return self.join.join(named) + (text if text.startswith(" ") else f": {text}")

    def worded(self, words: Words) -> OptionError:
        """The same error in ``words`` (the same class, so an ``except`` of the caller still catches it)."""
        return type(self)(self.subject, *self.problem, words=words, join=self.join)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self) -> tuple:  # pickled (another process) as its parts, not its text
        return _rebuild, (type(self), self.subject, self.problem, self.front, self.join)


def _rebuild(cls: type[OptionError], subject: tuple, problem: tuple, front: Words, join: str) -> OptionError:
    return cls(subject, *problem, words=front, join=join)


def _word(words: Words, option: Option) -> str:
    return words.name(option.name) if option.value is None else words.given(option.name, option.value)


class MissingOption(OptionError, FileNotFoundError):
    """An option names a file or directory that does not exist."""
