"""The console of a ``prune_model`` run and of a ``thanos distill`` run: what it will do (before), how it
failed, and what it wrote (after). Progress lines while it runs are ``thanos.runner.progress``'s."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

import torch

from thanos.errors import describe
from thanos.events import clock_text
from thanos.recipes.labels import counted, nm_note, shape_text
from thanos.runner.checks import Plan
from thanos.runner.disk import free_bytes, size_text
from thanos.stages.common import resolve_device
from thanos.stages.describe.card import evaluate_commands
from thanos.stages.describe.provenance import path_bytes

# a dry run's last line: everything it said was checked
DRY_RUN = "dry run: everything above was checked; nothing was run or written"


def say(stream: TextIO, text: str = "") -> None:
    """One line on ``stream``, at once."""
    stream.write(text + "\n")
    stream.flush()


def announce(run_plan: Plan, stream: TextIO, dry_run: bool = False) -> None:
    """What the run will do, before it starts: the model, the recipe, the data, where things go (a dry run
    writes no log: where a run would write it)."""
    recipe, calib = run_plan.recipe, run_plan.calibration
    say(stream, f"thanos prune-model: {run_plan.reference} ({run_plan.model_type}) -> {run_plan.out}")
    say(stream, f"  recipe {run_plan.name}: {run_plan.label}")
    if note := nm_note(recipe.sparsity, recipe.alpha):
        say(stream, f"  {note}")
    if recipe.recover is not None:
        rec = recipe.recover
        say(
            stream,
            f"  then recovery of every block: {counted(rec.epochs, 'epoch')}, lr {rec.lr:g}, towards "
            f"{'the dense model' if rec.target == 'dense' else 'the dense block'}, "
            f"{counted(rec.held_out(run_plan.calibration.nsamples), 'window')} held out",
        )
    if run_plan.distilled is not None:
        kd = run_plan.distilled.distill
        say(
            stream,
            f"  then distillation toward {run_plan.teacher}: {counted(kd.tokens, 'token')} of {kd.source} "
            f"({counted(kd.steps, 'step')} of {kd.batch_size} x {kd.seqlen} tokens, lr {kd.lr:g}), a "
            f"checkpoint every {counted(kd.checkpoint_every, 'step') if kd.checkpoint_every > 1 else 'step'}",
        )
    if recipe.exclude:
        shown = ", ".join(repr(p) for p in recipe.exclude)
        dense = run_plan.left_dense
        more = f", ... ({len(dense)} in all)" if len(dense) > 6 else ""
        say(stream, f"  --exclude {shown}: left dense in every block: {', '.join(dense[:6])}{more}")
    data = f"{calib.nsamples} x {calib.seqlen} tokens of {calib.source}"
    data = data if recipe.needs_calibration else "no calibration"
    if recipe.sparsity.structure.tokens:
        data = f"the tokens chosen by {recipe.vocab_text or calib.source}"
    evaluate = ", ".join(run_plan.evaluation.kinds) or "no"
    resources = run_plan.resources
    say(
        stream,
        f"  {data} | device {device_text(resources.device)}, computes in {run_plan.computes_in} | "
        f"{resources.cores_text} | evaluate: {evaluate}",
    )
    say(stream, f"  workdir {run_plan.workdir} (kept: a rerun resumes, other recipes reuse the calibration)")
    if (disk := run_plan.disk) is not None:
        keep = resources.keep
        say(
            stream,
            f"  disk: the workdir up to {size_text(disk.peak(keep))}, {size_text(disk.kept(keep))} after the "
            f"run (--keep {keep}); --out {size_text(disk.model)}; "
            f"{size_text(free_bytes(run_plan.workdir)[0])} free",
        )
    say(stream, f"  {'a run writes its full log to' if dry_run else 'full log'} {run_plan.log_file}")


def device_text(device: str) -> str:
    """The device a run computes on: ``cpu``, ``cuda:0``; ``auto`` as what it resolved to (``cpu (auto)``)."""
    resolved = resolve_device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device())
    return f"{resolved} (auto)" if device.strip().lower() == "auto" else str(resolved)


def failed(
    run_plan: Plan, step: str | None, err: BaseException, stream: TextIO, started: float, published: bool
) -> None:
    """What failed, the error's one line, where the full log is, how to resume."""
    say_failure(stream, step or "the run", err, run_plan.log_file, started)
    if published:
        say(stream, f"the pruned model is published without this evaluation: {run_plan.out}")
    say(stream, "fix the cause and run the same command again: finished steps are kept")


def say_failure(stream: TextIO, step: str, err: BaseException, log_file: Path, started: float) -> None:
    """What failed after how long, the error's one ``ERROR:`` line, where its traceback is."""
    say(stream, f"FAILED after {clock_text(time.monotonic() - started)}: {step}")
    say(stream, f"ERROR: {describe(err)}")
    say(stream, f"--- the traceback and the full log: {log_file}")


def recovery_text(blocks: list[dict[str, Any]]) -> str:
    """One line on what recovery did: the blocks it improved and their held-out loss, summed over blocks."""
    improved = sum(1 for b in blocks if b["epochs_kept"])
    before, after = sum(b["loss_before"] for b in blocks), sum(b["loss_after"] for b in blocks)
    return (
        f"recovery: {improved} of {counted(len(blocks), 'block')} improved; held-out reconstruction loss, "
        "summed over "
        f"the blocks, {before:.4g} -> {after:.4g}"
        + (f" ({100 * (after / before - 1):+.1f} %)" if before > 0 else "")
    )


def distillation_text(record: dict[str, Any]) -> str:
    """One line on what distillation did: the tokens, the held-out KL before and at the weights kept."""
    before, best = record["heldout"][0], record["best"]
    rate = f", {record['tokens_per_second']:,.0f} tokens/s" if record.get("tokens_per_second") else ""
    return (
        f"distilled: {record['tokens']:,} tokens in {clock_text(record['seconds'])}{rate}; held-out KL "
        f"{before['kl']:.4g} -> {best['kl']:.4g} (the weights of step {best['step']})"
    )


def print_summary(
    run_plan: Plan,
    report: dict[str, Any],
    evaluation: dict[str, Any] | None,
    summary: Any,
    before: list[str],
    stream: TextIO,
    started: float,
) -> None:
    """The closing lines: what was written, the achieved sparsity, the evaluations, how to load it."""
    out, took = run_plan.out, clock_text(time.monotonic() - started)
    if not before:
        say(stream, f"unchanged (it already holds this model): {out} ({took})")
    elif before == ["new"]:
        say(stream, f"written: {out} ({took})")
    else:
        say(stream, f"written again: {out} ({took}); what was there had changed: {'; '.join(before)}")
    if run_plan.recipe.sparsity.structure.tokens:  # its own report: the tokens kept, the text's length
        from thanos.stages.vocab import summary_lines

        vocabulary = json.loads((run_plan.published_dir / "vocabulary.json").read_text(encoding="utf-8"))
        for line in summary_lines(vocabulary, out):
            say(stream, f"  {line}")
    elif compact := report.get("compact"):  # the neurons are gone, not zeros: the width says what was pruned
        original, kept = compact["parameters"]["original"], compact["parameters"]["kept"]
        say(stream, f"  {run_plan.label}")
        shape = shape_text(compact)
        say(
            stream,
            f"  compact: {shape}; {kept:,} of {original:,} parameters "
            f"({100 * (1 - kept / original):.1f} % fewer)",
        )
    elif summary is not None:  # None: a model left undescribed where it was assembled
        say(
            stream,
            f"  {run_plan.label}: {100 * summary.pruned_sparsity:.2f} % of the pruned weights are zero "
            f"({100 * summary.global_sparsity:.2f} % of all parameters)",
        )
    if recovery := report.get("recovery"):
        say(stream, f"  {recovery_text(recovery['blocks'])}")
    if distillation := report.get("distillation"):
        say(stream, f"  {distillation_text(distillation)}")
    for line in evaluation_lines(evaluation):
        say(stream, f"  {line}")
    say(stream, f'  load it: AutoModelForCausalLM.from_pretrained("{out}")')
    say(stream, f"  {disk_text(run_plan)}")


def evaluation_lines(evaluation: dict[str, Any] | None) -> list[str]:
    """The closing lines on the evaluations (``runner.evaluations``' results), each beside the dense
    model's."""
    if not evaluation:
        return []
    dense, lines = evaluation.get("dense", {}), []
    if "perplexity" in evaluation:
        lines += perplexity_lines(evaluation["perplexity"], dense.get("perplexity"))
    if "zeroshot" in evaluation:
        beside = (
            f" (the dense model {100 * dense['zeroshot']['mean_acc']:.2f} %)" if "zeroshot" in dense else ""
        )
        lines.append(f"zero-shot mean accuracy {100 * evaluation['zeroshot']['mean_acc']:.2f} %{beside}")
    return lines


def perplexity_lines(result: dict[str, Any], dense: dict[str, Any] | None) -> list[str]:
    """The closing lines on the perplexity (a ``perplexity.json``'s content) beside the dense model's: per
    token (per original token where the two tokenize the text differently), then the bits per byte."""
    from thanos.recipes.labels import bytes_text, shown_perplexity

    ppl, per = shown_perplexity(result, dense)
    beside = f"; the dense model {dense['ppl']:.2f}" if dense else ""
    lines = [f"perplexity {ppl:.2f}{per} ({result['dataset']}, seqlen {result['seqlen']}{beside})"]
    if (rate := bytes_text(result, dense)) is not None:
        lines.append(rate)
    return lines


def disk_text(run_plan: Plan) -> str:
    """What the run left on disk: ``--out`` and the working directory, and how to clean it."""
    out, work = path_bytes(run_plan.out), path_bytes(run_plan.workdir)
    return (
        f"disk: --out {size_text(out)}; workdir {size_text(work)} (--keep {run_plan.resources.keep}; "
        "`thanos workdirs` lists the working directories and deletes them)"
    )


CHECKPOINT_BYTES = 16  # a checkpoint per parameter: fp32 weights, AdamW's two moments, the best weights
WORK_STATES = {
    "new": "",
    "started": "",
    "resumes": "; it holds this run's last checkpoint: the run continues from it",
    "other": "; it holds the checkpoint of other inputs or options: deleted, the run starts over",
}


def announce_distill(prepared: Any, keep: str, log_file: Path, stream: TextIO) -> None:
    """What a ``thanos distill`` run will do (``prepared``: a ``thanos.stages.distill.distill.Prepared``),
    before it reads the models' weights: the student, the teacher, the text and the budget, where and in which
    dtype it computes, where its checkpoints go and what ``keep`` keeps of them, its log, its warnings."""
    import torch

    from thanos.models.checkpoint import stored_parameters

    kd, text = prepared.options, prepared.text
    say(stream, f"thanos distill: {prepared.student} -> {prepared.out}")
    say(stream, f"  teacher {prepared.teacher}")
    say(
        stream,
        f"  text {kd.source}: {kd.tokens:,} tokens in {kd.steps} steps of {kd.batch_size} x {kd.seqlen} "
        f"tokens (lr {kd.lr:g}, {kd.warmup_steps} warm-up step{'s' * (kd.warmup_steps != 1)}); "
        f"{text.heldout.shape[0]} windows held out",
    )
    processes = prepared.ranks.world
    split = f" | {processes} processes{', sharded' if prepared.sharded else ''}" if processes > 1 else ""
    threads = torch.get_num_threads()
    say(
        stream,
        f"  device {prepared.device}, computes in {str(prepared.dtype).removeprefix('torch.')} | {threads} "
        f"thread{'s' * (threads != 1)}{split}",
    )
    size = size_text(CHECKPOINT_BYTES * stored_parameters(Path(prepared.student)))
    after = "kept (--keep all)" if keep == "all" else "deleted once --out holds the model (--keep needed)"
    say(
        stream,
        f"  checkpoints {prepared.work}: every {kd.checkpoint_every} steps, {size} each; {after}"
        + WORK_STATES[prepared.work_state],
    )
    say(stream, f"  full log {log_file}")
    for warning in prepared.warnings:
        say(stream, f"  warning: {warning}")


def distilled_summary(
    out: Path, record: dict[str, Any], work: Path, keep: str, stream: TextIO, started: float
) -> None:
    """The closing lines of a ``thanos distill`` run: what was written, what distillation did, how to load
    and evaluate the model, what is left of the checkpoints."""
    say(stream, f"written: {out} ({clock_text(time.monotonic() - started)})")
    say(stream, f"  {distillation_text(record)}")
    say(stream, f'  load it: AutoModelForCausalLM.from_pretrained("{out}")')
    say(stream, f"  evaluate it: {evaluate_commands(str(out))}")
    if keep == "all":
        say(
            stream,
            f"  checkpoints kept (--keep all): {work}, {size_text(path_bytes(work))} (`thanos workdirs "
            "--delete` deletes them)",
        )
    else:
        say(stream, f"  checkpoints deleted (--keep needed): {work}")
