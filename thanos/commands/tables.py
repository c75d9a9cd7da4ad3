"""The paper's tables (perplexity, average and per-task zero-shot accuracy) from whatever results exist
under --results, as CSV, Markdown and LaTeX (booktabs); missing cells are '-'. Also checks the paper's
orderings of the methods on these results (orderings.md/.csv) and logs them."""

from __future__ import annotations

import argparse
import logging

from thanos.commands import _args

HELP = "perplexity and zero-shot tables (CSV, Markdown, LaTeX) and the paper's orderings, from results/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="results root (default: %(default)s)")
    parser.add_argument("--out-dir", required=True, help="where to write the tables (e.g. results/tables)")
    _args.add_only(parser)


def run(args: argparse.Namespace) -> None:
    from thanos.report.orderings import summary, write_orderings
    from thanos.report.tables import write_tables

    log = logging.getLogger("thanos")
    paths = write_tables(args.results, args.out_dir, args.only)
    claims, ordering_paths = write_orderings(args.results, args.out_dir, args.only)
    log.info("wrote %d table files to %s", len(paths) + len(ordering_paths), args.out_dir)
    if claims:
        log.info("%s", summary(claims))
