"""Combined recipes: blocks, heads and MLP neurons removed in one call, ``--sparsity depth:4+neurons:0.3``.

The parts run one after the other, each a whole ``prune_model`` run on the model the previous part wrote
(its own working directory, calibration and stores, so that a second combination that starts the same way
reuses the first parts, and a rerun resumes at the part it stopped in; the first parts, all on the input
model, share one, so that ``depth:4+vocab:0.25`` and ``depth:6+vocab:0.45`` capture the dense model's
activations once), in this order whatever the order written:

1. ``depth`` first: the blocks are scored on the dense model and removed before any width is pruned, so no
   width is pruned in a block that then goes, and every later part calibrates on the model it is part of;
2. ``heads`` (or ``kv_heads``) next, then ``neurons``: within a block the attention feeds the MLP, so the
   MLP's neurons are chosen, and corrected, on the inputs the pruned attention gives it;
3. ``vocab`` last (``thanos.stages.vocab``): the tokens are scored by the model the width parts wrote, and
   no width part calibrates through a tokenizer other than the input model's.

The parts are the request's recipes, built and checked with it (``thanos.runner.request``). The
intermediate models are written under the working directory root (``<model>-combined/``, which ``thanos
workdirs`` lists and deletes like a working directory), and the later parts' default working directories
are named after the input model too (``<model>+depth1+neurons0.3-<hash>``), not after the intermediate model
they read; the last part writes ``out``, with the card, the report and the evaluations. Under
``--keep needed`` the intermediate models are deleted once ``out`` is written, and the ledger's record
(``DONE``, ``thanos.files.ledger``) of the request and of ``out``'s weights makes a rerun of the same request
do nothing while ``out`` holds them (else the parts run again). The returned report lists every part.
``recover`` applies to the width parts (a depth part prunes no weight of the blocks it keeps).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError
from thanos.files.atomic import write_json
from thanos.files.ledger import Entry, difference, model_identity, remove
from thanos.files.locks import shared_workdir
from thanos.recipes.recipe import Recipe
from thanos.runner.checks import (
    Model,
    check_apart,
    check_sources,
    check_structure,
    held_result,
    holds_another,
    model_reference,
    open_model,
)
from thanos.runner.console import say
from thanos.runner.one_recipe import prune_one
from thanos.runner.request import Evaluation, Output, PruneRequest
from thanos.runner.workdirs import COMBINED, default_root, default_workdir, model_slug, record_run
from thanos.stages.engine import Calibration
from thanos.stages.parts import combined_record
from thanos.stages.publish import check_out, weight_files

DONE = "done.json"  # the ledger's record of a finished combined recipe (--keep needed)
RESULT = "result.json"  # what that run returned


def prune_combined(request: PruneRequest, stream: TextIO) -> dict[str, Any]:
    """Run every part of a combined request (``request.recipes``, in the order they run), each on the
    previous part's model; the last writes ``out`` and evaluates, its report recording the whole."""
    reference = model_reference(request.model)
    model, calibration = _check_at_the_door(request, reference)  # calibration: every part's keys are of it
    given = request.resources.workdir
    root = Path(given).expanduser().resolve() if given else default_root()
    parts = [str(recipe.sparsity) for recipe in request.recipes]
    say(stream, f"combined recipe: {' then '.join(parts)}, each part on the model the previous one wrote")
    intermediates = root / f"{model_slug(reference)}{COMBINED}"
    _check_disk(request, model, calibration, (root, intermediates), stream)
    if request.dry_run:
        return _run_parts(request, stream, reference, calibration, intermediates, parts)
    # the intermediate models: listed and deleted by ``thanos workdirs``, never while a run reads them
    intermediates.mkdir(parents=True, exist_ok=True)
    with shared_workdir(intermediates):
        record_run(intermediates, reference, dataclasses.asdict(calibration), "+".join(parts))
        return _run_parts(request, stream, reference, calibration, intermediates, parts)


def _run_parts(
    request: PruneRequest, stream: TextIO, reference: str, calibration: Calibration, intermediates: Path,
    parts: list[str],
) -> dict[str, Any]:  # fmt: skip
    """``prune_combined``'s parts, each on the previous part's model (the intermediate ones in
    ``intermediates``); the last part's report with ``parts`` added."""
    inputs = _inputs(request, reference, calibration)
    if not request.dry_run and (finished := _finished(intermediates, inputs, request.output.out)) is not None:
        say(
            stream, "nothing to do: this combined recipe finished in an earlier run and --out holds its model"
        )
        return finished
    model, steps = reference, []
    for i in range(len(parts)):
        say(stream, f"--- part {i + 1}/{len(parts)}: {parts[i]} on {model}")
        report = prune_one(_part(request, i, model, (intermediates, calibration), reference, steps), stream)
        step = {
            "sparsity": parts[i],
            "model": str(model),
            "out": report["out"],
            "compact": _compact(request.recipes[i], report),
        }
        if request.recipes[i].block_map is not None:  # a depth part: with or without its maps
            step["block_map"] = request.recipes[i].block_map
        steps.append(step)
        if request.dry_run and i < len(parts) - 1:
            say(stream, f"dry run: the next parts ({', '.join(parts[i + 1 :])}) run on this part's model")
            return report | {"parts": steps}
        model = report["out"]
    _say_parameters(steps, parts, reference, stream)
    result = report | {"parts": steps}
    if request.resources.keep == "needed":  # --out is the model: the intermediate ones go
        for step in steps[:-1]:
            remove(Path(step["out"]).parent)  # the part's model and its digest's directory
        write_json(intermediates / RESULT, result)
        out = request.output.out  # its weights as published: the output's identity
        _ledger(intermediates, out).write(inputs | {"weights": weight_files(out)})  # last: it finished
        say(stream, f"deleted the intermediate models under {intermediates} (--keep all keeps them)")
    return result


def _check_at_the_door(request: PruneRequest, reference: str) -> tuple[Model, Calibration]:
    """The whole recipe checked on the input model before the first part runs: every part's structure
    (each part changes only its own dimension, so the input model answers for the model it will read: its
    blocks, head counts its config accepts, MLP, tokenizer and vocabulary), its sources (``check_sources``:
    each part's calibration, what only the last part reads) and ``--out``. Returns the input model's facts
    and the checked calibration."""
    model = open_model(reference)
    whole = "+".join(str(recipe.sparsity) for recipe in request.recipes)
    for recipe in request.recipes:
        try:
            check_structure(model, recipe)
        except OptionError as err:  # said of the whole recipe, in the part's words
            first, *rest = err.problem or ("",)
            if not isinstance(first, str):
                first, rest = "", [first, *rest]
            said = f"its part {recipe.sparsity}{first if first.startswith(' ') else ': ' + first}"
            raise OptionError(Option("sparsity", whole), said, *rest) from None
    calibration = check_sources(request, model)
    check_apart(request.resources.workdir, request.output.out)
    if not request.output.overwrite:
        _check_out(request, reference, whole)
    return model, calibration


def _check_disk(
    request: PruneRequest, model: Model, calibration: Calibration, where: tuple[Path, Path], stream: TextIO
) -> None:
    """The whole recipe's disk (``_disk_needs``), checked before its first part runs (each part checks its
    own when it starts; a later part refused there would come after the earlier ones ran); a dry run says
    it. Only where no part has run yet (a rerun resumes: the parts left check their own, counting what is
    there). ``where``: the working directories' root and the intermediate models' directory."""
    from thanos.runner.disk import check_free, size_text

    root, intermediates, reference = *where, model.reference
    first = _part(request, 0, reference, (intermediates, calibration), reference, [])
    if Path(first.output.out).exists():  # the first part ran (or runs): each part checks its own
        return
    needs = _disk_needs(request, model, calibration, first)
    if needs is None:
        return
    need_workdir, need_out, need_together = needs
    whole = "+".join(str(recipe.sparsity) for recipe in request.recipes)
    bound = (
        "each estimated on the input model, a bound for the smaller model it reads; each part's model kept "
        "until the last is written"
    )
    if request.dry_run:
        say(
            stream,
            f"disk: the parts together up to {size_text(need_workdir)} in the working directories and "
            f"{size_text(need_out)} for --out ({bound})",
        )
        return
    if request.resources.disk_check:
        workdir = (
            Path(request.resources.workdir).expanduser().resolve() if request.resources.workdir else root
        )
        out = Path(request.output.out).expanduser().resolve()
        check_free(
            workdir, out, need_workdir, need_out, need_together, f"{whole}, its parts together ({bound}),"
        )


def _disk_needs(
    request: PruneRequest, model: Model, calibration: Calibration, first: PruneRequest
) -> tuple[int, int, int] | None:
    """The bytes the whole recipe takes (``thanos.runner.disk.check_free``'s: the working directories at
    their peak, ``--out``, both on one filesystem), None for a hub model: each part estimated on the input
    model (each part reads a model no larger: an upper bound), what the parts before it leave (their
    working directories' stores, their models under the intermediates) added to the most it holds while it
    runs, ``--out`` the last part's; what another recipe left in the first part's directory (the stores it
    reads) not counted. ``first``: the first part's request."""
    from thanos.runner.disk import estimate
    from thanos.stages.describe.provenance import path_bytes

    reference = model.reference
    if model.layout is None or model.checkpoint is None:
        return None
    keep, last = request.resources.keep, len(request.recipes) - 1
    nsamples, seqlen = calibration.nsamples, calibration.seqlen
    left = need_workdir = need_together = need_out = 0
    for i, recipe in enumerate(request.recipes):
        disk = estimate(model.layout, model.checkpoint, Path(reference), recipe, nsamples, seqlen)
        if i == 0:
            given = first.resources.workdir
            left -= min(
                disk.shared, path_bytes(Path(given) if given else default_workdir(reference, calibration))
            )
        if i < last:  # its model written under the intermediates, on the working directory's disk
            need_workdir = max(need_workdir, left + disk.with_out(keep))
            left += disk.kept(keep) + disk.model
        else:
            need_workdir = max(need_workdir, left + disk.peak(keep))
            need_together = max(need_workdir, left + disk.with_out(keep))
            need_out = disk.model
    return need_workdir, need_out, need_together


def _check_out(request: PruneRequest, reference: str, whole: str) -> None:
    """Refuse an ``--out`` holding another result before the first part runs (the last part's own check
    would come after the others ran): a foreign directory, or the model of another recipe, input model or
    distillation (this recipe's own is written again)."""
    out, last = Path(request.output.out), request.recipes[-1]
    check_out(out)
    if (holds := held_result(out)) is None:
        return  # new, or unreadable: the last part's own check names it
    wanted = {"recipe": whole, "model": reference, "last part": last.pruned.name}
    why = difference(holds, wanted | {"distilled": bool(last.distill)})
    if why is not None:
        raise holds_another(out, f"pruned model ({holds['recipe']} of {holds['model']})", why)


def _inputs(request: PruneRequest, reference: str, calibration: Calibration) -> dict[str, Any]:
    """What a finished combined recipe was computed from, as the ledger records it
    (``thanos.files.ledger``): the model (its files), the parts' recipes, the calibration, the evaluation
    and ``--out`` (its weights are added once it holds them)."""
    return {
        "model": reference,
        "model_files": model_identity(reference),
        "recipes": [recipe.to_dict() for recipe in request.recipes],
        "calibration": dataclasses.asdict(calibration),
        "evaluation": dataclasses.asdict(request.evaluation),
        "out": str(Path(request.output.out).resolve()),
    }


def _ledger(intermediates: Path, out: str | Path) -> Entry:
    """``out`` as a finished combined recipe's output, with the ledger's record ``DONE``."""
    return Entry(Path(out), intermediates / DONE)


def _finished(intermediates: Path, inputs: dict[str, Any], out: str | Path) -> dict[str, Any] | None:
    """The result of the combined recipe of ``inputs`` when an earlier run finished it (``DONE``) and
    ``out`` still holds its weights as published; else None (its parts run, computing what is missing)."""
    entry = _ledger(intermediates, out)
    if not entry.current(inputs | {"weights": weight_files(out)}, lambda path: bool(weight_files(path))):
        return None
    try:
        return json.loads((intermediates / RESULT).read_text())
    except (OSError, ValueError):
        return None


def _part(
    request: PruneRequest,
    i: int,
    model: str,
    where: tuple[Path, Calibration],
    reference: str,
    steps: list[dict[str, Any]],
) -> PruneRequest:
    """The request of part ``i``: on ``model`` (the previous part's), in a working directory of its own
    (under ``--workdir``, else the default one of ``model`` named after the input model; the first part, on
    the input model, in the one every first part shares: ``part1``, or the input model's default, so that
    the combined recipes of several sizes capture the dense model's activations once); every part but the
    last writes its model under ``intermediates`` and evaluates nothing; every part after the first records
    the recipe so far on the input model (the last: the whole recipe). ``where``: the intermediate models'
    directory and the checked calibration (the key of the working directories and models)."""
    intermediates, calibration = where
    parts = [str(recipe.sparsity) for recipe in request.recipes]
    part, last = request.recipes[i], i == len(parts) - 1
    changes: dict[str, Any] = {"model": model, "recipes": (part,), "sparsity": parts[i]}
    workdir = None
    if request.resources.workdir:  # every first part runs on the input model: one directory for them all
        name = "part1" if i == 0 else f"part{i + 1}-{parts[i].replace(':', '')}"
        workdir = Path(request.resources.workdir) / name
    elif i > 0:  # keyed by its model and calibration as any default working directory, named after the input
        name = "+".join([model_slug(reference), *(p.replace(":", "") for p in parts[: i + 1])])
        workdir = default_workdir(model, calibration, name)
    if workdir is not None:
        changes["resources"] = dataclasses.replace(request.resources, workdir=workdir)
    if i > 0:  # its model's report records the recipe so far on the input model, as the workflow's part does
        earlier = [Path(step["out"]) for step in steps]
        changes["part_of"] = combined_record("+".join(parts[: i + 1]), reference, earlier)
    if not last:
        # keyed by every option of the parts so far (a depth part with and without its maps: two models)
        so_far = [recipe.to_dict() for recipe in request.recipes[: i + 1]]
        key = json.dumps([reference, so_far, dataclasses.asdict(calibration)], default=str)
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        name = "+".join(parts[: i + 1]).replace(":", "")
        out = intermediates / digest / name
        changes["output"] = Output(out, overwrite=True)
        changes["evaluation"] = Evaluation()  # only the last part's model is evaluated
    else:  # what --out holds was checked at the door, against the whole recipe (``_check_out``)
        changes["output"] = dataclasses.replace(request.output, overwrite=True)
    return dataclasses.replace(request, **changes)


def _compact(recipe: Recipe, report: dict[str, Any]) -> dict[str, Any] | None:
    """A part's ``compact`` record (its shape and parameters before and after): its report's; a
    vocabulary's from its ``vocabulary.json`` (``stages.vocab.vocabulary_part``: its report describes the
    whole model, the part before's record with the vocabulary after it)."""
    from thanos.stages.vocab import vocabulary_part

    if not recipe.sparsity.structure.tokens:
        return report.get("compact")
    written = json.loads((Path(report["out"]) / "vocabulary.json").read_text(encoding="utf-8"))
    return vocabulary_part(written)["compact"]


def _say_parameters(steps: list[dict[str, Any]], parts: list[str], reference: str, stream: TextIO) -> None:
    """The parameters of the last part's model against the base model's."""
    first, final = steps[0]["compact"] or {}, steps[-1]["compact"] or {}
    if first.get("parameters") and final.get("parameters"):
        before, after = first["parameters"]["original"], final["parameters"]["kept"]
        say(
            stream,
            f"combined {'+'.join(parts)}: {after:,} of {before:,} parameters of {reference} "
            f"({100 * (1 - after / before):.1f} % fewer)",
        )
