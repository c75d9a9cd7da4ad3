"""Figures from whatever results exist under --results (PDF and PNG): perplexity vs sparsity per method,
Thanos block-size and alpha ablations, pruning time per layer vs layer size, per-layer objective heatmaps."""

from __future__ import annotations

import argparse
import logging

from thanos.commands import _args

HELP = "figures (PDF, PNG) from results/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="results root (default: %(default)s)")
    parser.add_argument("--out-dir", required=True, help="where to write the figures (e.g. results/figures)")
    _args.add_only(parser)
    parser.add_argument(
        "--processes",
        type=_args.positive,
        default=1,
        help="draw the figures in this many processes at once (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> None:
    from thanos.report.figures import write_figures

    paths = write_figures(args.results, args.out_dir, args.processes, args.only)
    logging.getLogger("thanos").info("wrote %d figure files to %s", len(paths), args.out_dir)
