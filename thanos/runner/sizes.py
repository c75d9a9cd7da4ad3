"""Several sizes in one call (``--sparsity params:0.15,0.25,0.35``): every size checked reachable before
anything runs, then each searched in turn, smallest first, in one search directory (``thanos.runner.size``:
a candidate one size measured is read, not measured again, by the others; what their writes compute alike is
kept for the next, ``WRITES_SHARE``), its chosen recipe written to
``out/params0.15`` (and so on: each the model ``params:P`` alone writes), then the quality-against-size
curve of every candidate measured (``thanos.report.size_curve``): ``out/sizes.csv``, ``out/sizes.png``, and
``out/sizes.json`` (the request, each size's choice, the curve's rows), which marks ``out`` as a result of
several sizes (a rerun writes it again; any other non-empty directory is refused)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError
from thanos.files.atomic import write_json
from thanos.pruning import kept
from thanos.runner.checks import check_outside, model_reference
from thanos.runner.console import DRY_RUN, say
from thanos.runner.request import PruneRequest
from thanos.runner.size import Execute, check_size, prune_to_size, reachable
from thanos.runner.size_axes import knobs
from thanos.runner.size_card import predicted_text
from thanos.stages.publish import check_directory

SIZES = "sizes.json"
# what the sizes' writes keep for each other (``thanos.pruning.kept``): each depth part scores the blocks and
# runs every kept block on the first windows of the same dense stores (SmolLM2-135M, 64 windows: 4 s and 5 s
# of its 15)
WRITES_SHARE = (kept.BLOCK_SCORES, kept.BLOCK_PASSES)


def size_dir(goal: Any) -> str:
    """A size's model directory under ``out``: ``params0.25``."""
    return str(goal).replace(":", "")


def prune_sizes(request: PruneRequest, stream: TextIO, execute: Execute) -> dict[str, Any]:
    """Every size of ``request.size`` (``SizeGoal.sizes``) searched and written under ``out``, then the
    curve; ``{"out", "sizes": {size: its report}, "curve": the rows}`` (a dry run: the sizes' plans)."""
    goal = request.size
    assert goal is not None and goal.sizes
    out = Path(request.output.out).expanduser().resolve()
    check_sizes_out(out, model_reference(request.model))
    each = goal.each()
    if Path(request.model).is_dir():  # the largest beyond reach refused before the smallest is pruned
        dense = knobs(request.model, goal.options.width_multiple)  # (a hub id: the first size refuses it)
        for one in each:
            reachable(request.model, one, dense)
    check_size(_one(request, each[0], out))  # what the first size's write would refuse, before ``out``
    if not (request.dry_run or request.table_only):  # ``out`` is this command's from now on: a rerun resumes
        out.mkdir(parents=True, exist_ok=True)
        if not (out / SIZES).is_file():
            write_json(out / SIZES, {"request": str(goal), "model": request.model, "sizes": {}})
    say(stream, f"{goal}: {len(each)} sizes, each to {out}/{size_dir(each[0])} and so on, then the curve")
    reports: dict[str, dict[str, Any]] = {}
    with kept.keeping(kinds=WRITES_SHARE):  # the depth parts of their writes read the same dense stores
        for i, one in enumerate(each):
            say(stream, f"--- size {i + 1}/{len(each)}: {one}")
            reports[str(one)] = prune_to_size(
                _one(request, one, out), stream, execute, later=tuple(each[i + 1 :]), earlier=tuple(each[:i])
            )
    if request.dry_run:
        say(stream, DRY_RUN)
        return {"out": str(out), "sizes": reports}
    if request.table_only:  # the predicted frontier, nothing written
        predicted = {size: report["predicted"] for size, report in reports.items()}
        say(stream, f"{goal}: the frontier the cost table predicts (the sizes' run measures and writes it):")
        for size, mix in predicted.items():
            say(stream, f"  {size}: {mix['recipe']}, {predicted_text(mix['removed_fraction'], mix['loss'])}")
        return {"out": str(out), "predicted": predicted}
    from thanos.report.size_curve import curve_rows, write_curve

    rows = curve_rows({size: report["search"] for size, report in reports.items()})
    table, figure = write_curve(rows, out, f"{Path(request.model).name}: {goal}")
    chosen = {
        size: {"chosen": search["chosen"], "out": r["out"], "parameters": search["chosen_parameters"]}
        for size, r in reports.items()
        for search in [r["search"]]
    }
    write_json(out / SIZES, {"request": str(goal), "model": request.model, "sizes": chosen, "curve": rows})
    say(stream, f"{goal}: the quality against size of {len(rows)} measured candidates: {table}, {figure}")
    for size, record in chosen.items():
        say(stream, f"  {size}: {record['chosen']} ({record['parameters']:,} parameters) in {record['out']}")
    ours = {size_dir(one) for one in each}
    if earlier := sorted(p.name for p in out.glob("params*") if p.is_dir() and p.name not in ours):
        say(
            stream,
            f"{goal}: {out} also holds {', '.join(earlier)}, of an earlier request with other sizes: not in "
            f"{SIZES} nor the curve now; kept (delete what you do not need)",
        )
    return {"out": str(out), "sizes": reports, "curve": rows}


def _one(request: PruneRequest, one: Any, out: Path) -> PruneRequest:
    """The request of the size ``one`` of several, its model written to ``out/params0.25``."""
    output = dataclasses.replace(request.output, out=out / size_dir(one))
    return dataclasses.replace(request, size=one, sparsity=str(one), output=output)


def check_sizes_out(out: Path, reference: str) -> None:
    """Refuse, before anything is written, an ``out`` that cannot hold the sizes: the input model
    ``reference``, inside it or holding it, a file or a path that cannot be a directory, or a non-empty
    directory that is not a previous result of several sizes (``sizes.json``)."""
    check_outside(out, reference)
    check_directory("out", out)
    if out.is_dir() and any(out.iterdir()) and not (out / SIZES).is_file():
        if (out / "pruning_report.json").is_file():  # --overwrite replaces a result of its own kind only
            raise OptionError(
                Option("out", str(out)),
                " holds one pruned model (of a recipe or one size), and several sizes write a directory of "
                "models (params0.15/, ...); give another directory, or delete that model first",
            )
        raise OptionError(
            Option("out", str(out)),
            f" is not empty and is not a previous result of several sizes (no {SIZES}); give a new or "
            "empty directory (it gets a model per size: params0.15/, ...)",
        )
