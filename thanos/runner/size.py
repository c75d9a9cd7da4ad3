"""A size as the request: ``--sparsity params:0.25`` removes at least that fraction of the parameters with
the mix of depth, heads, neurons and vocabulary (``--axes``) that loses least, and writes that model.

**Held out.** The calibration documents are split: the last quarter (at least one document) is held out,
never calibrated on, and ``nsamples // 4`` windows of it (at least one, the calibration's length and seed)
are the text every candidate is measured on (``thanos.evaluation.heldout``: its excess cross-entropy over
the dense model's per original token, and the KL where the tokens are the same; the dense model's side
computed once per search); the candidates calibrate (and a vocab part chooses its tokens) on the other
documents, ``nsamples // 4`` windows of them (``CANDIDATE_SHARE``: a candidate ranks, the chosen recipe is
then written with all ``nsamples``), written once to ``calibration.jsonl`` in the search's directory
(``--vocab-text``: a vocab part chooses its tokens by that text instead, and its measurement's inputs name
it). The evaluation text is never read.

**The search** (``choose``), with ``T = ceil(p x the dense model's parameters)``:

1. the cost table, each axis's cost curve: its settings (``thanos.runner.size_axes``) nearest to removing
   5, 10, 20 and 30 % of the parameters, whatever ``p``, each pruned alone and measured (every size of the
   same model, calibration and options reads the same table: a second size measures none of it again);
2. the mix: from nothing, the axis whose next setting adds the least cost (the axis's measured curve,
   piecewise linear through zero, the last slope beyond) per parameter removed (predicted on the meta
   device) is advanced, until the predicted parameters removed reach T; then any axis stepped back that
   leaves T reached;
3. that mix pruned and measured (counted on the written model; short of T: one more step, measured
   again); the chosen recipe is the measured candidate with the least loss among those that remove at
   least T.

Each candidate is an explicit recipe pruned by the normal machinery (``execute``: its working directories,
resumed) on the search's calibration, measured, its ``measurement.json`` recorded by the ledger
(``thanos.files.ledger``) under ``candidates/<recipe>/``, so that a search run again (stopped, or with
another ``p`` or ``--axes``) measures no candidate twice; its model is deleted once measured (``--keep all``
keeps it). The chosen recipe is then run on its own with the request's calibration and options, writing
``--out`` as that explicit recipe run alone writes it; ``search.json`` (every candidate: recipe, parameters,
removed, loss, KL, seconds; the chosen recipe) goes to ``--out`` and to the search's directory, and the card
gets the table.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError, interruption
from thanos.events import SearchCandidate, clock_text
from thanos.files import digests
from thanos.files.atomic import atomic_path, write_json
from thanos.files.ledger import Entry, digest, model_identity, remove, source_identity
from thanos.files.locks import shared_workdir
from thanos.pruning.sparsity import parse_sparsity
from thanos.pruning.structures import takes
from thanos.recipes.labels import counted
from thanos.runner.console import say
from thanos.runner.one_recipe import RunFailed
from thanos.runner.patterns import combined_parts
from thanos.runner.request import Evaluation, Output, PruneRequest
from thanos.runner.size_axes import Knobs, knobs, recipe_of
from thanos.runner.size_card import measured_text, predicted_text, write_card
from thanos.runner.size_choice import TRIES, choose, most_removed, predict, table_points
from thanos.runner.size_dirs import other_search, search_directory, search_key
from thanos.runner.workdirs import (
    record_finished,
    record_run,
    record_search_key,
    slug,
)

SEARCH = "search.json"
# a candidate calibrates on this fraction of the request's windows (1/4: as many as it is measured on): its
# pruning's time is mostly the calibration windows passed through every block (SmolLM2-135M, neurons:0.2:
# 59 s on 48 windows, 32 s on 16); how it ranks the candidates against 48: docs/structures.md
CANDIDATE_SHARE = 4
Execute = Callable[[PruneRequest, TextIO], dict[str, Any]]


def prune_to_size(request: PruneRequest, stream: TextIO, execute: Execute) -> dict[str, Any]:
    """Search the mix (``choose``), then write it to ``out`` as its explicit recipe alone writes it; the
    report of that run with ``search`` (``search.json``'s content) added."""
    goal, started = request.size, time.monotonic()
    assert goal is not None
    model = Path(request.model)
    if not model.is_dir():
        raise OptionError(
            Option("model", request.model),
            f" is not a local directory; {request.sparsity} reads the model's files to plan its search: "
            f"download it first (`hf download {request.model} --local-dir DIR`) and give that directory",
        )
    dense, axes, parameters, target = reachable(model, goal)
    if goal.options.vocab_text is not None:
        from thanos.runner.checks import check_vocab_text

        check_vocab_text(goal.options.vocab_text)
    search = Search(request, dense, search_directory(request), stream, execute)
    mixing = ", ".join(axes) + "".join(f"; not {axis} ({why})" for axis, why in _missing(goal, dense).items())
    say(stream, f"{goal}: at least {target:,} of {parameters:,} parameters to remove, mixing {mixing}")
    first = table_points(dense, axes)  # the candidates the search starts from: the cost table
    say(stream, f"{goal}: {search.plan(first)}")
    if request.dry_run:
        if (predicted := search.prediction(axes, target, parameters)) is not None:
            say(stream, f"{goal}: {predicted}")
        say(stream, "dry run: everything above was checked; nothing was run or written")
        return {"out": str(request.output.out), "workdir": str(search.root)}
    if (note := other_search(request, search.root)) is not None:
        say(stream, f"{goal}: {note}")
    with shared_workdir(search.root):  # in use: ``thanos workdirs`` deletes it not
        search.prepare()
        if not request.resources.workdir:  # what its key was computed from: a later search names its change
            record_search_key(search.root, search_key(request))
        if request.table_only:
            return _table_only(search, goal, axes, target, parameters, len(first))
        search.bound, search.target = len(first) + TRIES, target
        chosen = choose(dense, axes, target, parameters, search.candidate)
        record = search.record(goal, axes, parameters, target, chosen, time.monotonic() - started)
        record_finished(search.root, str(goal))  # ``thanos workdirs``: finished, not interrupted
    say(stream, f"{goal}: chose {chosen} ({measured_text(record['candidates'], chosen)}); writing it")
    began = time.monotonic()
    options = goal.options
    report = execute(
        dataclasses.replace(request, recipes=_recipes(options, chosen), sparsity=chosen, size=None), stream
    )
    record["write_seconds"] = round(time.monotonic() - began, 1)
    out = Path(request.output.out)
    for place in (out / SEARCH, search.root / SEARCH):
        write_json(place, record)
    write_card(out, record)
    digests.record_again(out)  # search.json and the card's section are part of what was computed
    say(
        stream,
        f"{goal}: {chosen}, searched in {clock_text(record['seconds'])} ({len(record['candidates'])} "
        f"candidates), written in {clock_text(record['write_seconds'])}; {out / SEARCH} lists them",
    )
    return report | {"search": record}


def _table_only(
    search: Search, goal: Any, axes: list[str], target: int, parameters: int, points: int
) -> dict[str, Any]:
    """``--table-only``: the cost table measured (the points an earlier run measured are read), then the mix
    it predicts for ``goal``, said and returned; no model written."""
    search.bound, search.target = points, target
    recipe, removed, loss = predict(search.dense, axes, target, search.candidate)
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
    from thanos.evaluation.heldout import stored_parameters

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
            "less, or allow more axes (--axes)",
        )


def candidate_name(pattern: str) -> str:
    """A candidate's directory name: its mix without colons (``depth2``, ``neurons0.25``)."""
    return slug(pattern.replace(":", ""))


def measure_candidate(
    request: PruneRequest, pattern: str, stream: TextIO, execute: Execute, work: Path
) -> Path:
    """Measure one candidate (``pattern``, an explicit mix) of ``request``'s search, its stages in ``work``,
    recorded where the search finds it (a search run later measures it no more); its measurement's path."""
    goal = request.size
    assert goal is not None
    dense = knobs(request.model, goal.options.width_multiple)
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
    why = {
        "vocab": "its tokenizer is not byte-level BPE nor BPE with byte fallback",
        "depth": "it has one block",
        "heads": "its config accepts no smaller head count",
    }
    return {axis: why.get(axis, "no setting") for axis in goal.axes if not dense.settings(axis)}


def _recipes(options: Any, pattern: str) -> tuple[Any, ...]:
    """A mix's recipes with the request's options (``vocab_text``: its vocab part's only)."""
    parts = [parse_sparsity(part) for part in combined_parts(pattern) or [pattern]]
    text = options.vocab_text if any(takes(part.kind, "vocab_text") for part in parts) else None
    return dataclasses.replace(options, sparsity=pattern, vocab_text=text).recipes()


@dataclasses.dataclass
class Search:
    """The candidates of one search: where they are kept, what they are measured on, how they run."""

    request: PruneRequest
    dense: Knobs
    root: Path
    stream: TextIO
    execute: Execute
    work: Path | None = None  # where the candidates' stages run (None: the search's own ``work``)
    texts: list[str] = dataclasses.field(default_factory=list)
    measured: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    bound: int = 0  # the most candidates the search measures (its cost table and ``TRIES`` mixes)
    target: int = 0  # the parameters a candidate must remove to be chosen
    timed: list[float] = dataclasses.field(default_factory=list)  # the seconds of those this run measured
    reference: Any = None  # the dense model's side of every measurement (``heldout.Reference``), once

    def place(self, pattern: str) -> Path:
        """The candidate's directory: its measurement, its log, its model while measured."""
        return self.root / "candidates" / candidate_name(pattern)

    @property
    def calibration_file(self) -> Path:
        return self.root / "calibration.jsonl"

    def _split(self) -> tuple[str, list[str]]:
        """The calibration documents split: (the candidates' calibration file's content, the held-out
        texts every candidate is measured on)."""
        from thanos.data.calibration import text_documents
        from thanos.evaluation.heldout import held_out_texts
        from thanos.stages.calibrate import DEFAULT_SEQLEN  # the calibration's own window length

        calibration = self.request.calibration
        documents = text_documents(calibration.calibration, calibration.text_field)
        held = len(documents) // 4
        if held < 1 or calibration.nsamples < 2:
            raise OptionError(
                Option("calibration", calibration.calibration),
                f"params:P holds out a quarter of the calibration documents and windows: give at least 4 "
                f"documents and --nsamples 2 (found {len(documents)} documents, "
                f"{calibration.nsamples} windows)",
            )
        kept = "".join(json.dumps({"text": text}) + "\n" for text in documents[: len(documents) - held])
        positions = self.dense.config.get("max_position_embeddings", DEFAULT_SEQLEN)
        seqlen = calibration.seqlen or min(DEFAULT_SEQLEN, positions)
        windows = max(1, calibration.nsamples // 4)
        texts = held_out_texts(self.request.model, documents[len(documents) - held :], windows, seqlen,
                               calibration.seed)  # fmt: skip
        return kept, texts

    @property
    def label(self) -> str:
        """What ``thanos workdirs`` lists this run as: the size, or its cost table alone (--table-only)."""
        return str(self.request.sparsity) + (" (cost table only)" if self.request.table_only else "")

    def prepare(self) -> None:
        """Split the calibration documents: the candidates' calibration file, the held-out texts."""
        kept, self.texts = self._split()
        self.root.mkdir(parents=True, exist_ok=True)
        calibration = self.request.calibration
        record_run(self.root, self.request.model, dataclasses.asdict(calibration), self.label)
        if not self.calibration_file.is_file() or self.calibration_file.read_text() != kept:
            with atomic_path(self.calibration_file) as tmp:  # written once: its identity keys the candidates
                tmp.write_text(kept)

    def prediction(self, axes: list[str], target: int, parameters: int) -> str | None:
        """The line naming the mix the cost table predicts for ``target`` when an earlier run measured
        every point of the table here and its inputs are unchanged (read: nothing is run or written);
        else None. Without an earlier search here it reads nothing (not even the calibration documents)."""
        if not self.calibration_file.is_file():
            return None
        kept, self.texts = self._split()
        if self.calibration_file.read_text() != kept:
            return None
        try:
            recipe, removed, loss = predict(self.dense, axes, target, self._recorded)
        except LookupError:  # a point not measured here, or measured from other inputs
            return None
        return (
            f"the cost table measured in {self.root} predicts {recipe}: "
            f"{predicted_text(removed / parameters, loss)} (a run prunes and measures it to decide)"
        )

    def _recorded(self, mix: dict[str, str]) -> dict[str, Any]:
        """The mix's measurement by an earlier run, current for its inputs; LookupError without one."""
        pattern = recipe_of(mix)
        entry = Entry.beside(self.place(pattern) / "measurement.json")
        if not entry.current(self._inputs(pattern)):
            raise LookupError(pattern)
        return json.loads(entry.output.read_text())

    def plan(self, first_mixes: list[dict[str, str]]) -> str:
        """What the search will measure: its first candidates (``first_mixes``), those an earlier run
        measured here, and the time they would take at the seconds a candidate took here (when any did)."""
        first = [recipe_of(mix) for mix in first_mixes]
        earlier = []
        for pattern in first:
            try:
                earlier.append(json.loads((self.place(pattern) / "measurement.json").read_text())["seconds"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        candidates = counted(len(first), "candidate")
        text = (
            f"measures {candidates} first, the cost table of every size: each axis alone "
            f"({', '.join(first)}), then up to {TRIES} mixes they lead to"
        )
        if earlier:
            left = len(first) - len(earlier) + TRIES
            text += (
                f"; {len(earlier)} of the {len(first)} were measured by an earlier run in {self.root} (kept "
                f"while their inputs are unchanged); at the {sum(earlier) / len(earlier):.0f} s a candidate "
                f"took there, the rest takes up to about {clock_text(left * sum(earlier) / len(earlier))}"
            )
        return text

    def _inputs(self, pattern: str) -> dict[str, Any]:
        """What a candidate's measurement was computed from, as the ledger records it."""
        calibration = self._calibration()
        recipes = _recipes(self.request.size.options, pattern)  # type: ignore[union-attr]
        inputs = {
            "model_files": model_identity(self.request.model),
            "recipes": [recipe.to_dict() for recipe in recipes],
            "calibration": dataclasses.asdict(calibration)
            | {"text": digest(self.calibration_file.read_text())},
            "held_out": digest(self.texts),
        }
        texts = [recipe.vocab_text for recipe in recipes if recipe.vocab_text is not None]
        return inputs | ({"vocab_text": source_identity(texts[0])} if texts else {})

    def _calibration(self) -> Any:
        """The candidates' calibration: ``CANDIDATE_SHARE`` of the request's windows, from the documents
        not held out (the chosen recipe is then written with all of them)."""
        calibration = self.request.calibration
        windows = max(1, calibration.nsamples // CANDIDATE_SHARE)
        return dataclasses.replace(
            calibration, calibration=str(self.calibration_file), nsamples=windows, text_field="text"
        )

    def candidate(self, mix: dict[str, str]) -> dict[str, Any]:
        """The mix's measurement: recorded by an earlier run, else pruned and measured now."""
        pattern = recipe_of(mix)
        if pattern in self.measured:
            return self.measured[pattern]
        place = self.place(pattern)
        entry, inputs = Entry.beside(place / "measurement.json"), self._inputs(pattern)
        reused = entry.current(inputs)
        if reused:
            result = json.loads(entry.output.read_text())
        else:
            result = self._measure(pattern, mix, place)
            write_json(entry.output, result)
            entry.write(inputs)
            self.timed.append(result["seconds"])
        self.measured[pattern] = result
        event = SearchCandidate(len(self.measured), pattern, result["removed_fraction"], result["loss"],
                                result["seconds"], reused, self.bound, *self._progress())  # fmt: skip
        say(self.stream, event.text)
        return result

    def _progress(self) -> tuple[str | None, float | None]:
        """(the measured candidate of least loss that removes enough, the seconds the rest of ``bound`` may
        take at the mean of those measured in this run)."""
        enough = [(m["loss"], recipe) for recipe, m in self.measured.items() if m["removed"] >= self.target]
        left = (
            max(0, self.bound - len(self.measured)) * sum(self.timed) / len(self.timed)
            if self.timed
            else None
        )
        return (min(enough)[1] if enough else None), left

    def _measure(self, pattern: str, mix: dict[str, str], place: Path) -> dict[str, Any]:
        """Prune ``pattern`` on the search's calibration into ``place``/model and measure it."""
        from thanos.evaluation.heldout import Reference, measure, stored_parameters

        began = time.monotonic()
        request = self.request
        model = place / "model"
        resources = dataclasses.replace(request.resources, workdir=self.work or self.root / "work")
        part = dataclasses.replace(
            request, recipes=_recipes(request.size.options, pattern), sparsity=pattern, size=None,  # type: ignore[union-attr]
            calibration=self._calibration(), resources=resources, evaluation=Evaluation(),
            output=Output(model, overwrite=True), part_of=None,
        )  # fmt: skip
        place.mkdir(parents=True, exist_ok=True)
        try:
            with (place / "run.log").open("w") as log:
                self.execute(part, log)
        except KeyboardInterrupt as err:  # before the candidate's steps began (their own say it in its log)
            word, status = interruption(err)
            raise self._said(pattern, place, RunFailed(word, interrupted=True, status=status)) from None
        except RunFailed as err:  # said in the candidate's log: said here too, in one line
            raise self._said(pattern, place, err)  # noqa: B904 - its own cause kept
        device = "cuda" if request.resources.device.startswith("cuda") else "cpu"
        if self.reference is None:
            self.reference = Reference(request.model, self.texts, device)
        measured = measure(request.model, model, self.texts, device, self.reference)
        counted, dense = stored_parameters(model), stored_parameters(request.model)
        if request.resources.keep == "needed":
            remove(model)
        return {
            "recipe": pattern,
            "parameters": counted,
            "predicted_parameters": self.dense.predicted(mix),
            "removed": dense - counted,
            "removed_fraction": (dense - counted) / dense,
            **measured,
            "seconds": round(time.monotonic() - began, 1),
        }

    def _said(self, pattern: str, place: Path, err: RunFailed) -> RunFailed:
        """``err`` (the candidate ``pattern``'s run stopped), said on the terminal in one line."""
        line = (
            f"{err} while measuring the candidate {pattern}: the candidates measured are kept; run the same "
            "command to resume"
            if err.interrupted
            else f"ERROR: the candidate {pattern} failed: {err} (its log: {place / 'run.log'})"
        )
        say(self.stream, line)
        return err

    def record(
        self, goal: Any, axes: list[str], parameters: int, target: int, chosen: str, seconds: float
    ) -> dict:
        """``search.json``'s content."""
        calibration = self._calibration()
        return {
            "request": str(goal),
            "axes": axes,
            "parameters": parameters,
            "target_removed": target,
            "calibration": {"documents": str(self.calibration_file), "windows": calibration.nsamples},
            "held_out": {"windows": len(self.texts), "tokens": next(iter(self.measured.values()))["tokens"]},
            "loss": "excess cross-entropy over the dense model per held-out token of the dense tokenization "
            "(nats); kl: KL(dense || candidate) per token where the tokens are the same",
            "candidates": list(self.measured.values()),
            "chosen": chosen,
            "chosen_parameters": self.measured[chosen]["parameters"],
            "seconds": round(seconds, 1),
        }
