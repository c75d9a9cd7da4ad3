"""The paper's tables (perplexity, average and per-task zero-shot accuracy) from whatever results exist
under --results, as CSV, Markdown and LaTeX (booktabs); missing cells are '-'."""

from __future__ import annotations

import argparse
import logging

HELP = "perplexity and zero-shot tables (CSV, Markdown, LaTeX) from results/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="results root (default: %(default)s)")
    parser.add_argument("--out-dir", required=True, help="where to write the tables (e.g. results/tables)")


def run(args: argparse.Namespace) -> None:
    from thanos.report.tables import write_tables

    paths = write_tables(args.results, args.out_dir)
    logging.getLogger("thanos").info("wrote %d table files to %s", len(paths), args.out_dir)
