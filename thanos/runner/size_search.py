"""One size search's candidates (``thanos.runner.size``): where each is kept, what it is measured on, how it
runs. A point of the cost table is pruned on the search's calibration (``CANDIDATE_SHARE`` of the windows)
into its own directory and measured; a mix the table predicts is written as the size's model (``--out``,
the request's calibration and working directory) and that model is measured, so that the mix chosen is
the model written, not a proxy of it. Every measurement is recorded by the ledger
(``thanos.files.ledger``): a search run again measures nothing twice; the dense model's side of the
measurements is recorded too (``reference.json``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError, interruption
from thanos.events import SearchCandidate, clock_text
from thanos.files.atomic import atomic_path, write_json
from thanos.files.ledger import Entry, digest, model_identity, remove, source_identity
from thanos.recipes.labels import counted
from thanos.runner.console import say
from thanos.runner.one_recipe import RunFailed
from thanos.runner.request import Evaluation, Output, PruneRequest, for_pattern
from thanos.runner.size_axes import Knobs, recipe_of
from thanos.runner.size_card import predicted_text
from thanos.runner.size_choice import TRIES, predict
from thanos.runner.workdirs import recipe_paths, record_run, slug
from thanos.stages.describe.provenance import path_bytes

# a candidate calibrates on this fraction of the request's windows (1/4: as many as it is measured on): its
# pruning's time is mostly the calibration windows passed through every block (SmolLM2-135M, neurons:0.2:
# 59 s on 48 windows, 32 s on 16); how it ranks the candidates against 48: docs/structures.md
CANDIDATE_SHARE = 4
# the dense chain the table's points share is kept after a size for the points no size has reached while it
# takes at most this fraction of the disk left free beside it (``Search.release_table``)
KEPT_SHARE = 4
Execute = Callable[[PruneRequest, TextIO], dict[str, Any]]


def candidate_name(pattern: str) -> str:
    """A candidate's directory name: its mix without colons (``depth2``, ``neurons0.25``)."""
    return slug(pattern.replace(":", ""))


def recipes_of(options: Any, pattern: str) -> tuple[Any, ...]:
    """A mix's recipes with the request's options (``vocab_text``, ``width_multiple``: of the parts that
    take them, ``request.for_pattern``)."""
    return for_pattern(options, pattern).recipes()


def table_recipes(options: Any, pattern: str) -> tuple[Any, ...]:
    """A point of the cost table's recipes (``recipes_of``), the layers of each block pruned on the dense
    chain (``chain: dense``: every block calibrated on the dense model's inputs, which every point of the
    table reads from one capture in the search's working directory, where the sequential chain computes each
    point's own: SmolLM2-135M, a neurons point 37 s -> 19 s); the mix written as the size's model keeps the
    sequential chain. How the table's losses rank against the sequential chain's: docs/structures.md."""
    return tuple(
        dataclasses.replace(recipe, chain="dense") if recipe.sparsity.structure.one_layer else recipe
        for recipe in recipes_of(options, pattern)
    )


@dataclasses.dataclass
class Search:
    """The candidates of one search: where they are kept, what they are measured on, how they run."""

    request: PruneRequest
    dense: Knobs
    root: Path
    stream: TextIO
    execute: Execute
    work: Path | None = None  # where the candidates' stages run (None: the search's own ``work``)
    shared: Any = None  # the scope the table's points keep what they share in (``thanos.pruning.kept``)
    texts: list[str] = dataclasses.field(default_factory=list)
    measured: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    bound: int = 0  # the most candidates the search measures (its cost table and ``TRIES`` mixes)
    points: list[str] = dataclasses.field(default_factory=list)  # the cost table's (``table_points``)
    target: int = 0  # the parameters a candidate must remove to be chosen
    timed: list[float] = dataclasses.field(default_factory=list)  # the seconds of those this run measured
    reference: Any = None  # the dense model's side of every measurement (``heldout.Reference``), once
    # the mixes written as the size's model and measured
    verified: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    written: dict[str, Any] | None = None  # the mix this run last wrote to ``out``: recipe, report, seconds
    replaces: bool = False  # ``out`` holds this size's earlier result: a write replaces it, whatever mix

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
        windows = max(1, calibration.nsamples // 4)
        texts = held_out_texts(self.request.model, documents[len(documents) - held :], windows, self._seqlen,
                               calibration.seed)  # fmt: skip
        return kept, texts

    @functools.cached_property
    def model(self) -> Any:
        """The input model's facts (``thanos.runner.checks.open_model``), read once: its checks, the table's
        disk, the window length."""
        from thanos.runner.checks import model_reference, open_model

        return open_model(model_reference(self.request.model))

    @property
    def _seqlen(self) -> int:
        """The calibration's window length, as the size's write takes it (``checks.window_length``)."""
        from thanos.runner.checks import window_length

        return window_length(self.request.calibration.seqlen, self.model.max_positions)

    @property
    def label(self) -> str:
        """What ``thanos workdirs`` lists this run as: the size, or its cost table alone (--table-only)."""
        return str(self.request.sparsity) + (" (cost table only)" if self.request.table_only else "")

    @functools.cached_property
    def documents(self) -> tuple[str, list[str]]:
        """``_split``, once (a size's door reads it first: documents too few to split are refused there)."""
        return self._split()

    def _same_calibration(self) -> bool:
        """Whether an earlier search here split the calibration documents as this request's split: its
        calibration file holds what they give (the held-out texts set, when there is one)."""
        if not self.calibration_file.is_file():
            return False
        kept, self.texts = self.documents
        return self.calibration_file.read_text() == kept

    def prepare(self) -> None:
        """Split the calibration documents: the candidates' calibration file, the held-out texts."""
        kept, self.texts = self.documents
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
        if not self._same_calibration():
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
        if not self._current(pattern):
            raise LookupError(pattern)
        return json.loads((self.place(pattern) / "measurement.json").read_text())

    def _current(self, pattern: str) -> bool:
        """Whether a point's measurement by an earlier run is current for its inputs (``_same_calibration``
        first: the held-out texts are part of them)."""
        entry = Entry.beside(self.place(pattern) / "measurement.json")
        return entry.current(self._inputs(pattern, self._point_recipes(pattern)))

    def plan(self, first_mixes: list[dict[str, str]]) -> str:
        """What the search may measure: its first candidates (``first_mixes``), those an earlier run
        measured here from the same inputs and those it measured from others (measured again), the disk the
        others take and the time they would take at the seconds a candidate took here (when any did)."""
        first = [recipe_of(mix) for mix in first_mixes]
        timed: dict[str, float] = {}
        for pattern in first:
            try:
                timed[pattern] = json.loads((self.place(pattern) / "measurement.json").read_text())["seconds"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
        same = bool(timed) and self._same_calibration()
        earlier = [pattern for pattern in timed if same and self._current(pattern)]
        text = (
            f"measures up to {counted(len(first), 'candidate')} first, the cost table of every size: each "
            f"axis alone ({', '.join(first)}; those the mix reaches, and the next on each axis), then the "
            f"mix they predict, written as the size's model and measured (up to {TRIES} when one removes "
            "too little)"
        )
        if earlier:
            text += (
                f"; {len(earlier)} of the {len(first)} were measured by an earlier run in {self.root} (kept "
                "while their inputs are unchanged)"
            )
        if stale := len(timed) - len(earlier):
            text += (
                f"; {counted(stale, 'point')} an earlier run measured there from other inputs (the model's "
                "files, the calibration, the dtype the pruning computes in, ...) measured again"
            )
        if timed:
            left, mean = len(first) - len(earlier) + TRIES, sum(timed.values()) / len(timed)
            rest = clock_text(left * mean)
            text += f"; at the {mean:.0f} s a candidate took there, the rest takes up to about {rest}"
        if to_measure := [pattern for pattern in first if pattern not in earlier]:
            text += f"; {self._table_disk(to_measure)}"
        return text

    def reads_hessians(self, mix: dict[str, str]) -> bool:
        """Whether a point of the table reads the dense chain's Hessians past block 0 (``recipe_reads``:
        its pass over each block writes the next block's inputs, which the depth points read)."""
        from thanos.recipes.reads import recipe_reads

        return any(
            kind == "hessians" and block > 0
            for recipe in self._point_recipes(recipe_of(mix))
            for kind, block in recipe_reads(recipe, self.dense.blocks, recipe.sequential).dense
        )

    def _point_recipes(self, pattern: str) -> tuple[Any, ...]:
        """A point of the table's recipes (``table_recipes``) with the request's options."""
        return table_recipes(self.request.size.options, pattern)  # type: ignore[union-attr]

    def _table_disk(self, points: list[str]) -> str:
        """The disk the table's ``points`` take in the search's directory (``thanos.runner.disk``): the
        stores they share (the dense chain), what each leaves in the working directory, and the most any one
        holds beyond that while it runs, its model included (measured where it is assembled, then deleted;
        ``--keep all`` keeps every point's)."""
        from thanos.runner.disk import estimate, size_text

        model, calibration = self.model, self._calibration()
        assert model.layout is not None and model.checkpoint is not None  # a size is of a local model
        keep = self.request.resources.keep
        estimates = [
            estimate(model.layout, model.checkpoint, Path(model.reference), recipe, calibration.nsamples,
                     self._seqlen)
            for pattern in points for recipe in self._point_recipes(pattern)
        ]  # fmt: skip
        left = sum(disk.kept(keep) - disk.shared for disk in estimates)
        running = max(disk.peak(keep) - disk.kept(keep) for disk in estimates)
        peak = max(disk.shared for disk in estimates) + left + running
        after = "kept (--keep all)"
        if keep == "needed":
            after = (
                "their stages deleted once the size's points are measured (--keep needed; the dense model's "
                f"stores kept for the points no size has reached while they take at most 1/{KEPT_SHARE} of "
                "the free disk)"
            )
        return f"the table's points take up to {size_text(peak)} of disk while they are measured, {after}"

    def _inputs(self, pattern: str, recipes: tuple[Any, ...]) -> dict[str, Any]:
        """What a candidate's measurement was computed from (``recipes``: what pruned it), as the ledger
        records it: the search's calibration file by its name and content, not its path, so that a search's
        directory moved (with its working directory) reads its measurements where it is now."""
        calibration = self._calibration()
        inputs = {
            "model_files": model_identity(self.request.model),
            "recipes": [recipe.to_dict() for recipe in recipes],
            "calibration": dataclasses.asdict(calibration)
            | {"calibration": self.calibration_file.name, "text": digest(self.calibration_file.read_text())},
            "held_out": digest(self.texts),
            "dtype": self._dtype,
        }
        texts = [recipe.vocab_text for recipe in recipes if recipe.vocab_text is not None]
        return inputs | ({"vocab_text": source_identity(texts[0])} if texts else {})

    def _calibration(self) -> Any:
        """The candidates' calibration: ``CANDIDATE_SHARE`` of the request's windows, from the documents
        not held out (a mix is written with all the request's windows)."""
        calibration = self.request.calibration
        windows = max(1, calibration.nsamples // CANDIDATE_SHARE)
        return dataclasses.replace(
            calibration, calibration=str(self.calibration_file), nsamples=windows, text_field="text"
        )

    def candidate(self, mix: dict[str, str]) -> dict[str, Any]:
        """A point of the cost table's measurement: recorded by an earlier run, else pruned on the search's
        calibration and measured now."""
        pattern = recipe_of(mix)
        if pattern not in self.measured:
            place = self.place(pattern)
            self.measured[pattern] = self._recorded_or(
                place / "measurement.json",
                self._inputs(pattern, self._point_recipes(pattern)),
                lambda: self._prune(pattern, place),
                mix,
            )
        return self.measured[pattern]

    def verify(self, mix: dict[str, str]) -> dict[str, Any]:
        """A mix the table predicts: written as the size's model (``write``: ``--out``, as its explicit recipe
        run alone writes it) and that model measured; an earlier run's measurement of it is read instead
        (the size then writes it if it is chosen). Its measurement gets ``windows``: the calibration's."""
        pattern = recipe_of(mix)
        self.release_table()
        if pattern not in self.verified:
            place = self.root / "written" / candidate_name(pattern)
            recipes = recipes_of(self.request.size.options, pattern)  # type: ignore[union-attr]
            inputs = self._inputs(pattern, recipes) | {"calibration": self._written_calibration()}
            result = self._recorded_or(place / "measurement.json", inputs, lambda: self._write(pattern), mix)
            self.verified[pattern] = result | {"windows": self.request.calibration.nsamples}
        return self.verified[pattern]

    def release_table(self) -> None:
        """The size's points of the cost table measured (a mix is written next, in the request's working
        directory): what its points computed more than once dropped (``thanos.pruning.kept``) and, with
        ``--keep needed``, their stages deleted; the dense chain they share (the dense model's inputs and
        Hessians of every block: SmolLM2-135M 0.5 GB, a 70B model ~4 GB a block) too once every point of
        the table is measured, or where it takes more than ``1 / KEPT_SHARE`` of the disk left free beside
        it; else it is kept for the points a later size reaches (said). A search whose candidates run
        elsewhere (``work``: the workflow's jobs) has none here."""
        from thanos.pruning import kept
        from thanos.runner.disk import free_bytes, size_text

        if self.shared is not None:
            kept.stop_keeping(self.shared)
        work = self.root / "work"
        if self.work is not None or self.request.resources.keep != "needed" or not work.is_dir():
            return
        own = [path for pattern in self.measured for recipe in self._point_recipes(pattern)
               for path in recipe_paths(work, recipe.name)]  # fmt: skip
        for path in own:  # each point's own stages
            remove(path)
        left = [point for point in self.points if point not in self.measured and not self._current(point)]
        size = path_bytes(work)
        if not left or size * KEPT_SHARE > free_bytes(work)[0]:
            remove(work)
        elif own:  # said once a size's points are measured
            say(
                self.stream,
                f"{self.request.sparsity}: the dense model's stores of the cost table kept in {work} "
                f"({size_text(size)}) for the {counted(len(left), 'point')} no size has reached yet "
                f"({', '.join(left)}); deleting that directory frees them (a later size's points then "
                "capture the dense model again)",
            )

    def _recorded_or(
        self, where: Path, inputs: dict[str, Any], run: Callable[[], Path], mix: dict[str, str]
    ) -> dict[str, Any]:
        """The measurement at ``where`` when an earlier run recorded it from ``inputs``; else ``run()``
        (the model's path), that model measured and the measurement recorded (the ledger's record last)."""
        entry = Entry.beside(where)
        reused = entry.current(inputs)
        if reused:
            result = json.loads(entry.output.read_text())
        else:
            began, pattern = time.monotonic(), recipe_of(mix)
            model = run()
            with self._said(pattern, "its measurement"):  # an interruption there names the candidate too
                result = self._measured(pattern, mix, model, began)
            where.parent.mkdir(parents=True, exist_ok=True)
            write_json(entry.output, result)
            entry.write(inputs)
            self.timed.append(result["seconds"])
        index = len(self.measured) + len(self.verified) + 1
        event = SearchCandidate(index, result["recipe"], result["removed_fraction"], result["loss"],
                                result["seconds"], reused, self.bound, *self._progress(result),
                                result.get("loss_error"))  # fmt: skip
        say(self.stream, event.text)
        return result

    def _progress(self, last: dict[str, Any]) -> tuple[str | None, float | None]:
        """(the measured candidate of least loss that removes enough, ``last`` included; the seconds the
        rest of ``bound`` may take at the mean of those measured in this run)."""
        every = [*self.measured.values(), *self.verified.values(), last]
        enough = [(m["loss"], m["recipe"]) for m in every if m["removed"] >= self.target]
        left = max(0, self.bound - len(every)) * sum(self.timed) / len(self.timed) if self.timed else None
        return (min(enough)[1] if enough else None), left

    def _written_calibration(self) -> dict[str, Any]:
        """The request's calibration as a written mix's measurement records it: its options and its
        source's files."""
        calibration = self.request.calibration
        return dataclasses.asdict(calibration) | {"source": source_identity(calibration.calibration)}

    def final(self, pattern: str) -> PruneRequest:
        """The request that writes ``pattern`` as the size's model: the request's own calibration, working
        directory, evaluation and ``--out`` (replaced when this run wrote another mix there, or it holds
        this size's earlier result)."""
        request = self.request
        output = request.output
        if self.written is not None or self.replaces:
            output = dataclasses.replace(output, overwrite=True)
        recipes = recipes_of(request.size.options, pattern)  # type: ignore[union-attr]
        return dataclasses.replace(request, recipes=recipes, sparsity=pattern, size=None, output=output)

    def write(self, pattern: str) -> dict[str, Any]:
        """Write ``pattern`` to ``--out`` (``final``); its run's report, kept with the seconds it took in
        ``written``."""
        began = time.monotonic()
        report = self.execute(self.final(pattern), self.stream)
        self.written = {"recipe": pattern, "report": report, "seconds": round(time.monotonic() - began, 1)}
        return report

    def _write(self, pattern: str) -> Path:
        """``write`` a mix to be measured: an interrupt or a failure said in one line."""
        with self._said(pattern, "its lines above"):
            self.write(pattern)
        return Path(self.request.output.out)

    def _prune(self, pattern: str, place: Path) -> Path:
        """Prune ``pattern`` on the search's calibration, its lines in ``place``/run.log; the model's path: it
        stays where it was assembled, in the search's working directory, undescribed (not published: it is
        measured there, then deleted)."""
        request = self.request
        resources = dataclasses.replace(request.resources, workdir=self.work or self.root / "work")
        part = dataclasses.replace(
            request, recipes=self._point_recipes(pattern), sparsity=pattern, size=None,
            calibration=self._calibration(), resources=resources, evaluation=Evaluation(),
            output=Output(place / "model", overwrite=True), part_of=None, publish=False,
        )  # fmt: skip
        place.mkdir(parents=True, exist_ok=True)
        with self._said(pattern, f"its log: {place / 'run.log'}"), (place / "run.log").open("w") as log:
            return Path(self.execute(part, log)["out"])

    def _measured(self, pattern: str, mix: dict[str, str], model: Path, began: float) -> dict[str, Any]:
        """``model`` (``pattern`` pruned) measured on the held-out texts; a candidate's model is deleted then
        (``--keep all`` keeps it), the size's ``--out`` is not."""
        from thanos.evaluation.heldout import measure
        from thanos.models.checkpoint import stored_parameters

        request = self.request
        measured = measure(request.model, model, self.texts, self._device, self._reference())
        counted, dense = stored_parameters(model), stored_parameters(request.model)
        if request.resources.keep == "needed" and model != Path(request.output.out):
            remove(model)
        return {
            "recipe": pattern,
            "parameters": counted,
            "predicted_parameters": self.dense.predicted(mix),
            "removed": dense - counted,
            "removed_fraction": (dense - counted) / dense,
            **measured,
            "dtype": self._dtype,
            "seconds": round(time.monotonic() - began, 1),
        }

    @property
    def _device(self) -> str:
        """Where the candidates are measured: the request's GPU, else the CPU."""
        return "cuda" if self.request.resources.device.startswith("cuda") else "cpu"

    @functools.cached_property
    def _dtype(self) -> str:
        """The dtype the candidates and the dense model are measured in: the one the request's pruning
        computes in (``--compute-dtype``; auto: bfloat16 on a CPU that multiplies it faster than float32,
        half the time of a measurement in float32 there, ``thanos.evaluation.loading.run_dtype``)."""
        from thanos.evaluation.loading import run_dtype

        return run_dtype(self.request.model, self._device, self.request.resources.compute_dtype)

    def _reference(self) -> Any:
        """The dense model's side of every measurement (``heldout.Reference``): computed once and recorded
        in ``reference.json`` (its token ids and losses), which a later run in this directory reads."""
        import torch

        from thanos.evaluation.heldout import Reference

        if self.reference is None:
            device, dtype = self._device, self._dtype
            layout = self.model.layout
            blocks = layout.block_template if layout is not None else None  # a depth point starts at its run
            self.reference = Reference(self.request.model, self.texts, device, getattr(torch, dtype),
                                       blocks=blocks)  # fmt: skip
            entry = Entry.beside(self.root / "reference.json")
            inputs = {"model_files": model_identity(self.request.model), "held_out": digest(self.texts),
                      "device": device, "dtype": dtype}  # fmt: skip
            if entry.current(inputs):
                self.reference.restore(json.loads(entry.output.read_text()))
            else:
                self.reference.compute()
                write_json(entry.output, self.reference.record())
                entry.write(inputs)
        return self.reference

    @contextlib.contextmanager
    def _said(self, pattern: str, log: str) -> Iterator[None]:
        """A candidate ``pattern``'s run stopped: said on the terminal in one line (``log``: where its own
        lines are), then raised."""
        try:
            yield
            return
        except KeyboardInterrupt as err:  # before its steps began (theirs say it in its log), or measured
            word, status = interruption(err)
            failed = RunFailed(word, interrupted=True, status=status)
            failed.__suppress_context__ = True  # raised in its place, as ``raise ... from None``
        except RunFailed as err:  # said in the candidate's log: said here too, in one line
            failed = err
        line = (
            f"{failed} while measuring the candidate {pattern}: the candidates measured are kept; run the "
            "same command to resume"
            if failed.interrupted
            else f"ERROR: the candidate {pattern} failed: {failed} ({log})"
        )
        say(self.stream, line)
        raise failed

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
            "held_out": {
                "windows": len(self.texts),
                "tokens": next(iter(self.measured.values()))["tokens"],
                "dtype": self._dtype,
            },
            "loss": "excess cross-entropy over the dense model per held-out token of the dense tokenization "
            "(nats); kl: KL(dense || candidate) per token where the tokens are the same",
            "candidates": [*self.measured.values(), *self.verified.values()],
            "chosen": chosen,
            "chosen_parameters": (self.verified.get(chosen) or self.measured[chosen])["parameters"],
            "seconds": round(seconds, 1),
        }
