"""One candidate of a size search (``--sparsity params:P``) as a workflow job: the same options as ``thanos
prune-model``'s search, and ``--candidate`` (an explicit mix, ``depth:2+neurons:0.25``) pruned and measured
on the search's held-out calibration windows, its stages in ``--candidate-work``; the measurement is recorded
in the search's directory (``--workdir``/search/candidates/), where ``thanos prune-model`` with the same
options finds it and measures it no more. The workflow runs each point of the cost table so, side by side
(workflow/rules/search.smk)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thanos.commands import prune_model

TRACEBACK = False

HELP = "measure one candidate of a params:P search (a workflow job): prune-model's options and --candidate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    prune_model.add_arguments(parser)
    parser.epilog = None
    group = parser.add_argument_group("the candidate")
    group.add_argument(
        "--candidate",
        required=True,
        metavar="PATTERN",
        help="the explicit mix to measure (depth:2+neurons:0.25)",
    )
    group.add_argument("--candidate-work", required=True, help="the working directory of its stages")


def run(args: argparse.Namespace) -> None:
    from thanos.errors import Option, OptionError
    from thanos.runner.api import execute
    from thanos.runner.one_recipe import RunFailed
    from thanos.runner.request import FLAGS
    from thanos.runner.size import measure_candidate

    try:
        request = prune_model.request_of(args, skipped=("candidate",))
        if request.size is None:
            raise OptionError(Option("sparsity", args.sparsity), "a candidate is measured for params:P only")
        place = measure_candidate(request, args.candidate, sys.stderr, execute, Path(args.candidate_work))
    except OptionError as err:
        raise err.worded(FLAGS) from None
    except RunFailed as err:  # the candidate's run has said what failed, or how to resume
        raise SystemExit(err.status) from None
    print(place)
