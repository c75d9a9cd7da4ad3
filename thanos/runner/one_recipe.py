"""One recipe run in this process: the checks (``thanos.runner.checks``), then every stage of the recipe
(``thanos.stages.engine``: model info, calibration, block 0's inputs and Hessians, the sequential chain,
assembly), the publish to ``out`` with a model card, then the evaluations asked for, in a working
directory keyed by the model and the calibration, laid out as the workflow's results, so that

- a rerun of the same request after a crash, Ctrl-C or a lost session resumes where it stopped;
- another recipe on the same model and calibration reuses the calibration tokens and block 0's inputs
  and Hessians (and any recipe already pruned there).

The working directory is ``$THANOS_WORKDIR/<model>-<hash>`` (``THANOS_WORKDIR`` defaults to
``~/.cache/thanos``); the hash covers the model and the calibration (source, samples, length, seed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from typing import Any, TextIO

import torch

from thanos.errors import interruption
from thanos.events import OnEvent, StepDone, StepStarted, clock_text
from thanos.files.ledger import remove
from thanos.files.locks import exclusive_workdir
from thanos.recipes.labels import counted
from thanos.runner import console
from thanos.runner.checks import Plan, plan
from thanos.runner.console import DRY_RUN, say
from thanos.runner.evaluations import Evaluations, dense_eval_dir
from thanos.runner.progress import StepProgress, full_log
from thanos.runner.request import PruneRequest
from thanos.runner.workdirs import (
    model_slug,
    record_finished,
    record_run,
    recorded_recipes,
    unfinished,
    unfinished_note,
)
from thanos.stages.describe.card import CARD, model_card
from thanos.stages.describe.provenance import RunRecord
from thanos.stages.describe.sparsity import summarize
from thanos.stages.engine import RunOptions, run_recipe
from thanos.stages.publish import intact, publish, release, released, released_to, update_texts

log = logging.getLogger(__name__)

# what publishing returns: (report, evaluation, sparsity summary, what changed in ``out``)
Published = tuple[dict[str, Any], dict[str, Any] | None, Any, list[str]]


class RunFailed(RuntimeError):
    """A ``prune_model`` run stopped before it published its model (a step failed, or it was
    interrupted); what it finished is kept, and the same call resumes."""

    def __init__(self, message: str, interrupted: bool = False, status: int = 1) -> None:
        super().__init__(message)
        self.interrupted = interrupted
        self.status = status  # the command's exit status: 1, or an interruption's (130 for Ctrl-C)


def prune_one(request: PruneRequest, stream: TextIO) -> dict[str, Any]:
    """Check, announce, run and publish one recipe (``request.recipe``); the pruning report with ``out``,
    ``workdir`` and ``evaluation`` added (a dry run: ``out``, ``workdir`` and ``disk``, the estimate's
    bytes: its parts, and ``peak`` and ``after`` under ``--keep``, as the command prints them)."""
    run_plan = plan(request)
    console.announce(run_plan, stream, request.dry_run)
    if request.dry_run:
        say(stream, DRY_RUN)
        disk, keep = run_plan.disk, run_plan.resources.keep
        totals = {"peak": disk.peak(keep), "after": disk.kept(keep)} if disk is not None else {}
        parts = dataclasses.asdict(disk) if disk is not None else None
        return {"out": str(run_plan.out), "workdir": str(run_plan.workdir), "disk": parts and parts | totals}
    started = time.monotonic()
    report, evaluation, summary, before = run(run_plan, stream, started)
    console.print_summary(run_plan, report, evaluation, summary, before, stream, started)
    return {**report, "out": str(run_plan.out), "workdir": str(run_plan.workdir), "evaluation": evaluation}


def run(run_plan: Plan, stream: TextIO, started: float) -> Published:
    """Run the recipe's stages (``thanos.stages.engine``) in this process, publish the model, then run the
    evaluations and add them to its card; progress lines go to ``stream``, everything else to the run's log
    file. Returns ``publish_result``'s (report, evaluation, summary, what changed in ``out``).

    A failed or interrupted step says what failed and how to resume, then raises ``RunFailed``; a failed
    evaluation leaves the published model in place (without it) and says so."""
    evaluations = _evaluations(run_plan)
    progress = StepProgress(stream, started=started)
    with exclusive_workdir(run_plan.workdir), progress, full_log(run_plan.log_file), _threads(run_plan):
        log.info(
            "thanos prune-model: %s, recipe %s",
            run_plan.reference,
            (run_plan.distilled or run_plan.recipe).to_json(),
        )
        model_dir = run_plan.published_dir
        if released(model_dir) and not intact(model_dir, run_plan.out):  # the only copy is not there
            progress.note(f"{released_to(model_dir)} no longer holds the weights published there, or they "
                          f"go to another --out: assembling the model again")  # fmt: skip
            remove(model_dir)
        if run_plan.distilled is not None and released(run_plan.files.model_dir):  # the student's weights
            progress.note(
                "the pruned model was published undistilled and its working copy deleted: assembling it "
                "again to distil it (thanos distill --student OUT distils a published one)"
            )
            remove(run_plan.files.model_dir)
        calibration = dataclasses.asdict(run_plan.calibration) if run_plan.recipe.needs_calibration else None
        ran_before = run_plan.name in recorded_recipes(run_plan.workdir)
        for other in unfinished(run_plan.workdir):
            if other != run_plan.name:
                progress.note(unfinished_note(run_plan.workdir, other))
        record_run(run_plan.workdir, run_plan.reference, calibration, run_plan.name)
        steps = _guarded(run_plan, progress, stream, started, lambda: _run_steps(run_plan, progress.on_event))
        for label, why in steps.reruns.items():  # the ledger's reason (``thanos.files.ledger``)
            progress.note(f"computed again: {label} ({why})")
        distilled = run_plan.distilled is not None and _guarded(
            run_plan, progress, stream, started, lambda: _distill(run_plan, steps, progress.on_event)
        )
        evaluation = evaluations.current()
        published = publish_result(run_plan, evaluation) if run_plan.publish else _assembled(run_plan)
        if run_plan.evaluation.kinds and evaluation is None:
            progress.note(f"published: {run_plan.out}; evaluating it")
            evaluation = _guarded(
                run_plan, progress, stream, started, lambda: evaluations.run(steps), published=True
            )
            published = update_card(run_plan, evaluation, published[3])
        if run_plan.resources.keep == "needed" and run_plan.publish and not released(model_dir):
            release(model_dir, run_plan.out)  # --out is now the only full copy of the weights
            if run_plan.distilled is not None:
                remove(run_plan.distill_work)  # the checkpoints: a rerun finds the distilled model in --out
    if not steps.computed and not distilled:
        progress.note("nothing to do: every step finished in an earlier run")
    elif progress.resumed or (steps.reused and ran_before):
        blocks = f"; the chain's {progress.resumed.finished}" if progress.resumed else ""
        kept = counted(len(steps.reused), "step")
        progress.note(f"resumed: {kept} finished in an earlier run of this recipe were kept{blocks}")
    elif steps.reused:  # another recipe's run computed them: shared, not resumed
        progress.note(
            f"reused: {counted(len(steps.reused), 'step')} that other recipes' runs computed in this working "
            f"directory ({', '.join(steps.reused)})"
        )
    return published


def _guarded(
    run_plan: Plan, progress: Any, stream: TextIO, started: float, work: Any, published: bool = False
) -> Any:
    """``work()``; a failure or an interruption is said on ``stream`` (what failed, its ``ERROR:`` line,
    where the traceback is, how to resume) and raised as ``RunFailed``."""
    try:
        return work()
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (``thanos.errors.Terminated``)
        word, status = interruption(err)
        log.warning("%s during: %s", word, progress.current)
        progress.clear()
        took = clock_text(time.monotonic() - started)
        say(
            stream,
            f"{word} after {took}: finished steps are kept; run the same command to resume (with other "
            f"options it is another recipe, and this one stays unfinished in {run_plan.workdir}: `thanos "
            "workdirs` lists it and deletes it)",
        )
        raise RunFailed(word, interrupted=True, status=status) from None
    except Exception as err:
        log.exception("%s failed", progress.current or "the run")
        console.failed(run_plan, progress.current, err, stream, started, published)
        raise RunFailed(str(err)) from err


@contextlib.contextmanager
def _threads(run_plan: Plan) -> Iterator[None]:
    """torch uses ``--cores`` threads for the duration."""
    before = torch.get_num_threads()
    torch.set_num_threads(run_plan.resources.threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_steps(run_plan: Plan, on_event: OnEvent) -> Any:
    """The engine's steps; returns the steps run and kept."""
    files = run_plan.files
    intermediates = tuple(p for p in (files.pruned_root, files.tokens, files.dense_dir, files.chain_dir) if p)
    how = {"granularity": "recipe", "granularity_reason": "thanos prune-model: every stage in one process"}
    if run_plan.part_of is not None:  # a combined recipe's part after the first: the recipe so far
        how["combined"] = run_plan.part_of
    record = RunRecord(model_slug(run_plan.reference), files.tokens, intermediates, how)
    resources = run_plan.resources
    needed = resources.keep == "needed"
    options = RunOptions(
        resources.device,
        drop=("inputs", "hessians") if needed else (),
        drop_layers=needed,
        record=record,
        dtype=resources.compute_dtype,
        describe=run_plan.publish,
    )
    return run_recipe(run_plan.reference, run_plan.recipe, files, run_plan.calibration, options, on_event)


def _distill(run_plan: Plan, steps: Any, on_event: OnEvent) -> bool:
    """The assembled model distilled toward the dense one (``thanos.stages.distill.distill``) into
    ``run_plan.published_dir``, from its last checkpoint when an earlier run stopped; nothing when an earlier
    run distilled this assembled model (a model assembled again is distilled again). Whether it trained."""
    from thanos.files import digests
    from thanos.stages.distill.distill import distill, step_label

    out = run_plan.published_dir
    if steps.computed and out.exists():
        remove(out)  # distilled from an earlier assembly
    if released(out) or ((out / digests.REPORT).is_file() and not digests.edited(str(out))):
        return False
    remove(out)  # a copy cut short
    options = run_plan.distilled.distill  # type: ignore[union-attr]
    label = step_label(options)
    on_event(StepStarted(label))
    began = time.monotonic()
    resources = run_plan.resources
    distill(
        str(run_plan.files.model_dir), str(run_plan.teacher), out, run_plan.distill_work, options,
        device=resources.device, dtype=resources.compute_dtype, keep_checkpoints=resources.keep == "all",
        on_event=on_event,
    )  # fmt: skip
    on_event(StepDone(label, time.monotonic() - began))
    return True


def _card(run_plan: Plan, evaluation: dict[str, Any] | None) -> tuple[dict[str, Any], Any, str]:
    """(report, sparsity summary, model card) of the published model."""
    model_dir = run_plan.published_dir
    report = json.loads((model_dir / "pruning_report.json").read_text())
    summary = summarize(model_dir, report, described=True)  # assemble wrote its sparsity.json
    if run_plan.recipe.sparsity.structure.tokens:  # the model's card, then the vocabulary's section
        from thanos.stages.vocab import card_text

        vocabulary = json.loads((model_dir / "vocabulary.json").read_text(encoding="utf-8"))
        return report, summary, card_text(model_dir, vocabulary, evaluation, run_plan.out)
    return report, summary, model_card(report, summary, evaluation, run_plan.out)


def publish_result(
    run_plan: Plan, evaluation: dict[str, Any] | None
) -> tuple[dict, dict | None, Any, list[str]]:
    """Publish the assembled model to ``out`` with its model card (``evaluation`` in it): (report,
    evaluation, sparsity summary, what ``publish`` found changed in ``out``)."""
    report, summary, card = _card(run_plan, evaluation)
    return report, evaluation, summary, publish(run_plan.published_dir, run_plan.out, {CARD: card})


def _assembled(run_plan: Plan) -> Published:
    """A model that stays where it was assembled (``PruneRequest.publish`` false): (its report, no
    evaluation, no sparsity summary, written). Its recipe is recorded finished in the working directory (a
    size's table point: its model is deleted once measured, and the recipe is not left for a resume)."""
    report = json.loads((run_plan.published_dir / "pruning_report.json").read_text())
    record_finished(run_plan.workdir, run_plan.name)
    return report, None, None, ["new"]


def update_card(run_plan: Plan, evaluation: dict[str, Any] | None, before: list[str]) -> Published:
    """Rewrite the published model's card with ``evaluation`` (the weights are not copied again); ``before``:
    what the publish found changed in ``out``."""
    report, summary, card = _card(run_plan, evaluation)
    update_texts(run_plan.published_dir, run_plan.out, {CARD: card})
    return report, evaluation, summary, before


def _evaluations(run_plan: Plan) -> Any:
    """The evaluations the plan asks for, of its pruned model and of the dense model beside it: the input
    model (a combined recipe's: the model its first part read, not the one this part read), evaluated in
    ``results/<its name>/dense/eval``."""
    evaluation, base = run_plan.evaluation, run_plan.teacher or run_plan.reference
    return Evaluations(
        run_plan.published_dir, run_plan.out, run_plan.model_root / "eval", base,
        dense_eval_dir(run_plan.workdir, base), evaluation.kinds, str(evaluation.ppl_source),
        evaluation.tasks, run_plan.resources.device, run_plan.name, run_plan.resources.compute_dtype,
        evaluation.include_path, evaluation.ppl_seqlen,
    )  # fmt: skip
