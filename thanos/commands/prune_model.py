"""Prune one model with one recipe in one command: runs every stage in this process (resumable: run the
same command again after a crash or Ctrl-C) and writes a loadable, self-describing model (sparsity.json,
README.md model card) to --out."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from thanos.options import declared, flag, given

if TYPE_CHECKING:
    from thanos.runner.request import PruneRequest

# its own errors (bad input, found before anything runs) name the fix: no traceback on a piped stderr (a
# step's failure is logged with its traceback in the run's log file)
TRACEBACK = False

HELP = "prune a model with one recipe, resumably: --model M --method thanos --sparsity 2:4 --out DIR"

EXAMPLES = """\
examples:
  thanos prune-model --model TinyLlama/TinyLlama-1.1B-Chat-v1.0 --method thanos --sparsity 2:4 \\
      --out tinyllama-2of4 --evaluate ppl
  thanos prune-model --model ./my-llama --method sparsegpt --sparsity 0.5 \\
      --calibration corpus.jsonl --nsamples 64 --seqlen 1024 --out ./my-llama-50 --device cpu
  thanos prune-model --model ./my-llama --method thanos --sparsity depth:4+neurons:0.3 \\
      --calibration corpus.jsonl --distill-tokens 1000000 --distill-source corpus.jsonl --out ./my-llama-small

Interrupted (Ctrl-C, crash, lost session)? Run the same command again: it resumes where it stopped.
Intermediates live in --workdir (default $THANOS_WORKDIR/<model>-<hash>, THANOS_WORKDIR defaulting to
~/.cache/thanos): another recipe on the same model and calibration reuses them. The disk a run needs is
estimated and checked before it starts; `thanos workdirs` lists the working directories and deletes them.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The request's fields as options, in its groups, each with its field's help
    (``thanos.runner.request``, ``thanos.options``)."""
    from thanos.options import add_options
    from thanos.runner.request import GROUPS, PruneRequest

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLES
    add_options(parser, PruneRequest)
    for title, group, prefix in GROUPS:
        # a prefixed group's options are optional together (--distill-tokens turns distillation on)
        add_options(parser.add_argument_group(title), group, prefix, required=not prefix)


def run(args: argparse.Namespace) -> None:
    from thanos.errors import OptionError
    from thanos.runner.api import execute
    from thanos.runner.one_recipe import RunFailed
    from thanos.runner.request import FLAGS

    try:
        execute(request_of(args), sys.stderr)
    except OptionError as err:
        raise err.worded(FLAGS) from None
    except RunFailed as err:  # the run has printed what failed and how to resume
        raise SystemExit(err.status) from None


def request_of(args: argparse.Namespace, skipped: tuple[str, ...] = ()) -> PruneRequest:
    """The ``PruneRequest`` of the parsed options (those named ``skipped...`` are another command's own)."""
    from thanos.runner.request import build_request

    prefixed = ("_", "recover_", "distill_", *skipped)
    options = {name: value for name, value in vars(args).items() if not name.startswith(prefixed)}
    options["recover"] = _recover(args)
    options["distill"] = _distill(args)
    return build_request(args.model, args.method, args.sparsity, options)


def _recover(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--recover`` and its options as the request's ``recover``; an option without ``--recover`` is
    refused."""
    from thanos.recipes.training import Recovery

    options = given(args, Recovery, "recover_")
    if options and not args.recover:
        flags = _flags(Recovery, "recover_", options)
        raise ValueError(f"{flags}: recovery options without --recover; add --recover or leave them out")
    return options if args.recover else None


def _distill(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--distill-*`` options as the request's ``distill``; any of them without ``--distill-tokens`` is
    refused."""
    from thanos.recipes.training import Distillation

    options = given(args, Distillation, "distill_")
    if options and "tokens" not in options:
        flags = _flags(Distillation, "distill_", options)
        raise ValueError(f"{flags}: distillation options without --distill-tokens; add it or leave them out")
    return options or None


def _flags(group: type, prefix: str, options: dict[str, Any]) -> str:
    """The flags of the ``options`` given, named: ``--distill-lr, --distill-seed``."""
    return ", ".join(flag(field, prefix) for field in declared(group) if field.name in options)
