"""``python -m thanos <command>``: the command-line interface the Snakemake rules call.

Commands are discovered from the modules of ``thanos.commands``: each defines ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args)``. A module ``foo_bar`` is the command ``foo-bar``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import thanos.commands


def _command_modules() -> dict[str, str]:
    names = sorted(
        m.name for m in pkgutil.iter_modules(thanos.commands.__path__) if not m.name.startswith("_")
    )
    return {name.replace("_", "-"): f"thanos.commands.{name}" for name in names}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thanos",
        description="Thanos LLM pruning: pipeline stages (calibrate, capture, prune, assemble, evaluate).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for command, module_name in _command_modules().items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(command, help=module.HELP, description=module.__doc__)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        args._run(args)
    except (ValueError, FileNotFoundError) as err:
        logging.getLogger("thanos").error("%s", err)
        return 2
    return 0
