"""A size as the request: ``--sparsity params:0.25`` removes at least that fraction of the parameters with
the mix of depth, heads, neurons and vocabulary (``--axes``) that loses least, and writes that model.

**Held out.** The calibration documents are split: the last quarter (at least one document) is held out,
never calibrated on by the table's points, and ``nsamples // 4`` windows of it (at least one, the
calibration's length and seed) are the text every candidate is measured on (``thanos.evaluation.heldout``:
its excess cross-entropy over the dense model's per original token, and the KL where the tokens are the
same; the dense model's side computed once per search directory); the table's points calibrate (and a
vocab part chooses its tokens) on the other documents, ``nsamples // 4`` windows of them
(``CANDIDATE_SHARE``), written once to ``calibration.jsonl`` in the search's directory (``--vocab-text``: a
vocab part chooses its tokens by that text instead, and its measurement's inputs name it). The evaluation
text is never read.

**The search** (``choose``), with ``T = ceil(p x the dense model's parameters)``:

1. the cost table, each axis's cost curve: its settings (``thanos.runner.size_axes``) nearest to removing
   5, 10, 20 and 30 % of the parameters, whatever ``p``, each pruned alone and measured when the mix of 2.
   first reads its curve there (``size_choice.Table``: the points it reaches and the next on each axis;
   every size of the same model, calibration and options reads the same table: a second size measures
   none of it again);
2. the mix: from nothing, the axis whose next setting adds the least cost (the axis's measured curve,
   piecewise linear through zero, the last slope beyond) per parameter removed (predicted on the meta
   device) is advanced, until the predicted parameters removed reach T; then any axis stepped back that
   leaves T reached;
3. that mix written as the size's model (``--out``, with the request's calibration, options and working
   directory: what its explicit recipe run alone writes) and that model measured (counted on it; short of
   T: one more step, written and measured again); the chosen recipe is the measured candidate with the
   least loss among those that remove at least T (written again only when it is not the last written).

Each point of the table is an explicit recipe pruned by the normal machinery (``execute``: its working
directories, resumed) on the search's calibration, its layers on the dense chain (``table_recipes``: every
block calibrated on the dense model's inputs, captured once for every point), and measured, its
``measurement.json`` recorded by the ledger (``thanos.files.ledger``) under ``candidates/<recipe>/`` (a mix's
under ``written/<recipe>/``), so that a search run again (stopped, or with another ``p`` or ``--axes``)
measures nothing twice; a point's model is measured where it is assembled (not published, no card:
``PruneRequest.publish``) and deleted once measured, the points' stages once the size's points are measured,
and the dense chain they share once every point of the table is (kept for a later size's points while it
takes at most a quarter of the free disk; ``--keep all`` keeps everything) (``thanos.runner.size_search``).
``search.json`` (every candidate: recipe, parameters, removed, loss, KL, seconds; the chosen recipe) goes to
``--out`` and to the search's directory, and the card gets the table.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError
from thanos.events import clock_text
from thanos.files import digests
from thanos.files.atomic import write_json
from thanos.files.layout import SEARCH_RECORD
from thanos.files.ledger import remove
from thanos.files.locks import shared_workdir
from thanos.pruning import kept
from thanos.runner.console import DRY_RUN, say
from thanos.runner.request import PruneRequest
from thanos.runner.size_axes import Knobs, knobs, recipe_of
from thanos.runner.size_card import measured_text, predicted_text, write_card
from thanos.runner.size_choice import TRIES, choose, most_removed, predict, table_points
from thanos.runner.size_dirs import other_search, search_directory, search_key, searched
from thanos.runner.size_search import Execute, Search
from thanos.runner.workdirs import (
    record_finished,
    record_search_key,
)
from thanos.stages.publish import check_directory, check_out


def prune_to_size(
    request: PruneRequest,
    stream: TextIO,
    execute: Execute,
    later: tuple[Any, ...] = (),
    earlier: tuple[Any, ...] = (),
) -> dict[str, Any]:
    """Search the mix (``choose``: the mix the cost table predicts is written to ``out``, as its explicit
    recipe alone writes it, and measured there; the chosen one written again only when it is not the last
    written, or was measured by an earlier run); the report of its write with ``search`` (``search.json``'s
    content) added. ``later``: the sizes searched after this one in the same directory (``prune_sizes``),
    the points of the table their mixes reach measured with this one's; ``earlier``: those searched before
    it (a dry run says their table's plan once, and its last line after every size's)."""
    goal, started = request.size, time.monotonic()
    assert goal is not None
    search, axes, parameters, target = _at_the_door(request, stream, execute)
    dense = search.dense
    mixing = ", ".join(axes) + "".join(f"; not {axis} ({why})" for axis, why in _missing(goal, dense).items())
    say(stream, f"{goal}: at least {target:,} of {parameters:,} parameters to remove, mixing {mixing}")
    first = table_points(dense, axes)  # the candidates the search starts from: the cost table
    if request.dry_run and earlier:
        say(
            stream,
            f"{goal}: its mix from the cost table of {earlier[0]} (the same points), written and measured",
        )
    else:
        say(stream, f"{goal}: {search.plan(first)}")
    if request.dry_run:
        if (predicted := search.prediction(axes, target, parameters)) is not None:
            say(stream, f"{goal}: {predicted}")
        if not (earlier or later):  # several sizes: said once, after the last (``prune_sizes``)
            say(stream, DRY_RUN)
        return {"out": str(request.output.out), "workdir": str(search.root)}
    if (note := other_search(search.request, search.root)) is not None:
        say(stream, f"{goal}: {note}")
    # in use: ``thanos workdirs`` deletes it not; what the table's points compute more than once kept while
    # it is measured (``thanos.pruning.kept``)
    with shared_workdir(search.root), kept.keeping() as search.shared:
        search.prepare()
        if not request.resources.workdir:  # what its key was computed from: a later search names its change
            record_search_key(search.root, search_key(search.request))
        search.points = [recipe_of(mix) for mix in first]
        if request.table_only:
            return _table_only(search, goal, axes, target, parameters)
        search.bound, search.target = len(first) + TRIES, target
        after = tuple(math.ceil(size.p * parameters) for size in later)
        # the axes whose points capture the dense chain's Hessians first: the same pass writes its inputs,
        # which the depth points read (each dense block run once for both)
        hessians = tuple(dict.fromkeys(axis for mix in first for axis in mix if search.reads_hessians(mix)))
        chosen = choose(dense, axes, target, parameters, search.candidate, search.verify, after, hessians)
        if search.written is None or search.written["recipe"] != chosen:  # measured by an earlier run
            say(stream, f"{goal}: chose {chosen}; writing it")
            search.release_table()  # (each mix verified released it already)
            search.write(chosen)
        written = search.written
        assert written is not None
        searched = time.monotonic() - started - written["seconds"]  # the write of the chosen not counted
        record = search.record(goal, axes, parameters, target, chosen, searched)
        record["write_seconds"] = written["seconds"]
        record_finished(search.root, str(goal))  # ``thanos workdirs``: finished, not interrupted
    report, out = written["report"], Path(request.output.out)
    for place in (out / SEARCH_RECORD, search.root / SEARCH_RECORD):
        write_json(place, record)
    write_card(out, record)
    digests.record_again(out)  # search.json and the card's section are part of what was computed
    say(
        stream,
        f"{goal}: chose {chosen} ({measured_text(record['candidates'], chosen)}), searched in "
        f"{clock_text(record['seconds'])} ({len(record['candidates'])} candidates), written in "
        f"{clock_text(record['write_seconds'])}; {out / SEARCH_RECORD} lists them",
    )
    return report | {"search": record}


def check_size(request: PruneRequest) -> None:
    """Refuse a size that cannot be searched or written (``_at_the_door``) before anything is written."""
    _at_the_door(request, io.StringIO(), execute=None)  # type: ignore[arg-type]


def _at_the_door(
    request: PruneRequest, stream: TextIO, execute: Execute
) -> tuple[Search, list[str], int, int]:
    """(the size's search, its axes, the model's parameters, the parameters to remove): the size refused
    before anything is written where it cannot be searched (a hub id, beyond the axes' reach) or its write
    would be refused (``_check_at_the_door``)."""
    goal = request.size
    assert goal is not None
    model = Path(request.model)
    if not model.is_dir():
        raise OptionError(
            Option("model", request.model),
            f" is not a local directory; {request.sparsity} reads the model's files to plan its search: "
            f"download it first (`hf download {request.model} --local-dir DIR`) and give that directory",
        )
    from thanos.models import load_config

    load_config(model)  # a config.json that cannot be read is named (the knobs read it next)
    dense, axes, parameters, target = reachable(model, goal)
    request = searched(request)
    search = Search(request, dense, search_directory(request), stream, execute)
    _check_at_the_door(search, axes)
    return search, axes, parameters, target


def _check_at_the_door(search: Search, axes: list[str]) -> None:
    """What the size's write would refuse, refused before its table is measured (hours at 70B): the device,
    the working directory, ``--out`` (``_check_out``; not with ``--table-only``), and the texts its write
    reads (``check_sources``, of the mix of every axis at its largest, whose parts read every text a mix of
    these axes reads: the calibration, the vocabulary's text, the evaluation's and the distillation's), and
    the calibration's documents split for the held-out windows."""
    from thanos.runner import checks

    request = search.request
    checks.check_device(request.resources.device)
    if request.resources.workdir:
        check_directory("workdir", Path(request.resources.workdir).expanduser().resolve())
    if (text := request.size.options.vocab_text) is not None:  # type: ignore[union-attr]
        checks.check_vocab_text(text)  # given without the vocab axis too
    if not request.table_only:  # which writes no model
        _check_out(search)
        checks.check_apart(request.resources.workdir, request.output.out)
    checks.check_sources(search.final(most_removed(search.dense, axes)[1]), search.model)
    search.documents  # noqa: B018 - the held-out split: too few documents or windows refused


def _check_out(search: Search) -> None:
    """Refuse an ``--out`` that cannot take the size's model before its table is measured: the input model
    (or inside it, or holding it), a file, a foreign directory, or a pruned model that is not this size's
    earlier result (of the same model) unless ``--overwrite``; this size's earlier result is replaced by
    its write, whichever mix it holds (``Search.replaces``)."""
    from thanos.runner.checks import check_outside, held_result, holds_another

    request = search.request
    out, reference = Path(request.output.out).expanduser().resolve(), search.model.reference
    check_outside(out, reference)
    check_out(out)
    if request.output.overwrite or not (out / "pruning_report.json").is_file():
        return
    holds = held_result(out) or {"recipe": "an unreadable report", "model": "?"}
    recipe, model = holds["recipe"], holds["model"]
    try:
        record = out / SEARCH_RECORD
        size = json.loads(record.read_text())["request"] if record.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        size = None
    if model != reference or size != str(request.size):
        why = f"model {model}" if model != reference else f"recipe {recipe}, not a result of {request.size}"
        raise holds_another(out, f"pruned model ({recipe} of {model})", why)
    search.replaces = True


def _table_only(search: Search, goal: Any, axes: list[str], target: int, parameters: int) -> dict[str, Any]:
    """``--table-only``: the cost table measured (the points an earlier run measured are read), then the mix
    it predicts for ``goal``, said and returned; no model written."""
    search.bound, search.target = len(search.points), target
    recipe, removed, loss = predict(search.dense, axes, target, search.candidate, whole=True)
    search.release_table()
    record_finished(search.root, search.label)
    predicted = {"recipe": recipe, "removed": removed, "removed_fraction": removed / parameters, "loss": loss}
    say(
        search.stream,
        f"{goal}: the cost table predicts {recipe}: {predicted_text(removed / parameters, loss)}; no model "
        f"written (the size's run reads the table in {search.root})",
    )
    return {"out": str(search.request.output.out), "workdir": str(search.root), "predicted": predicted}


def planned_candidates(request: PruneRequest) -> list[str]:
    """The candidates a search measures before any other, whatever they measure (``table_points``): the
    workflow measures each as a job of its own (``measure_candidate``), then the search finds them."""
    goal = request.size
    assert goal is not None
    dense, axes, _, _ = reachable(request.model, goal)
    return [recipe_of(mix) for mix in table_points(dense, axes)]


def reachable(model: str | Path, goal: Any, dense: Knobs | None = None) -> tuple[Knobs, list[str], int, int]:
    """(the dense model's knobs, the axes, its parameters, the parameters to remove) of ``goal`` on the
    local ``model``, the target refused before anything is pruned when the axes cannot reach it
    (``check_reachable``); ``dense``: the knobs when already read."""
    from thanos.models.checkpoint import stored_parameters

    dense = dense or knobs(model, goal.options.width_multiple)
    axes, parameters = _axes(goal, dense), stored_parameters(model)
    target = math.ceil(goal.p * parameters)
    check_reachable(goal, dense, axes, parameters, target)
    return dense, axes, parameters, target


def check_reachable(goal: Any, dense: Knobs, axes: list[str], parameters: int, target: int) -> None:
    """Refuse, before anything is pruned, a size beyond the most the axes can remove, naming that most."""
    most, mix = most_removed(dense, axes)
    if target > most:
        fraction = math.floor(100 * most / parameters) / 100
        raise OptionError(
            Option("sparsity", str(goal)),
            f" asks for {target:,} of the {parameters:,} parameters, and the most {', '.join(axes)} can "
            f"remove is {most:,} ({100 * most / parameters:.1f} %: {mix}); ask for params:{fraction:g} or "
            "less, or allow more axes (",
            Option("axes"),
            ")",
        )


def measure_candidate(
    request: PruneRequest, pattern: str, stream: TextIO, execute: Execute, work: Path
) -> Path:
    """Measure one candidate (``pattern``, an explicit mix) of ``request``'s search, its stages in ``work``,
    recorded where the search finds it (a search run later measures it no more); its measurement's path."""
    goal = request.size
    assert goal is not None
    dense = knobs(request.model, goal.options.width_multiple)
    request = searched(request)
    search = Search(request, dense, search_directory(request), stream, execute, work=work)
    with shared_workdir(search.root):  # beside the other candidates' jobs, not beside its deletion
        search.prepare()
        search.candidate({part.partition(":")[0]: part for part in pattern.split("+")})
    if request.resources.keep == "needed":
        remove(work)  # its stages serve no other candidate
    return search.place(pattern) / "measurement.json"


def _axes(goal: Any, dense: Knobs) -> list[str]:
    """The axes the search combines: those asked that the model has."""
    missing = _missing(goal, dense)
    if goal.given and missing:
        reasons = "; ".join(f"{axis}: {why}" for axis, why in missing.items())
        raise OptionError(Option("axes", ",".join(goal.axes)), f"the model cannot lose these ({reasons})")
    return [axis for axis in goal.axes if axis not in missing]


def _missing(goal: Any, dense: Knobs) -> dict[str, str]:
    """The axes asked that the model cannot lose, and why."""
    vocab = (
        "its tokenizer is not byte-level BPE nor BPE with byte fallback"
        if dense.tokens is None
        else f"its vocabulary keeps all its {dense.tokens:,} tokens (its special tokens and byte alphabet)"
    )
    why = {
        "vocab": vocab,
        "depth": "it has one block",
        "heads": "its config accepts no smaller head count",
    }
    return {axis: why.get(axis, "no setting") for axis in goal.axes if not dense.settings(axis)}
