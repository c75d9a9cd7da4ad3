"""A ``vocab:N`` / ``vocab:p`` request of ``thanos prune-model``: the tokens chosen by a text
(``thanos.stages.vocab``), the model written to ``out`` in one step (no working directory: no block is
pruned, the dense model is only sliced).

The text is the recipe's ``vocab_text`` (``--vocab-text``), else the calibration source's documents, read
with ``--text-field`` (``c4``: its first ``C4_DOCUMENTS``).

What was written is recorded in the ledger (``thanos.files.ledger``) in a working directory, as every
recipe's steps are (``--workdir``, else the default one of the model and the calibration): a run whose model,
recipe and text are those ``out`` was written from, and whose weights are still there, writes nothing again.

``--evaluate ppl`` then scores the written and the dense model on ``--ppl-source`` (``runner.evaluations``:
each result kept in the working directory while its model and options stay the same, the dense model's
shared with every recipe there; copied to ``eval/perplexity.json`` and ``eval/dense/perplexity.json``
beside the model), shown per original token and in bits per byte (the same text becomes more tokens:
``thanos.evaluation.perplexity``); ``--evaluate zeroshot`` the same way (``eval/zeroshot.json``)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError
from thanos.files import digests
from thanos.files.ledger import Entry, model_identity
from thanos.files.locks import exclusive_workdir
from thanos.runner.checks import holds_another
from thanos.runner.console import evaluation_lines, say
from thanos.runner.request import PruneRequest
from thanos.runner.workdirs import default_workdir, model_slug
from thanos.stages.common import resolve_device
from thanos.stages.publish import weight_files

C4_DOCUMENTS = 2000  # C4's documents that choose a vocabulary (about 1 M words)
WRITTEN = ".vocabulary.inputs.json"  # the ledger's record of what ``out`` was written from


def prune_vocab(request: PruneRequest, stream: TextIO, dense: str | None = None) -> dict[str, Any]:
    """Check the request, choose the tokens and write ``out``; the report (``vocabulary.json``'s content)
    with ``out`` added. ``dense``: the model the evaluation compares with (default ``request.model``; the
    last part of a combined recipe: the model its first part read)."""
    from thanos.stages.vocab import prune_vocabulary, summary, vocab_out_problem, write_card

    model, out = Path(request.model), Path(request.output.out)
    check_vocab_model(request.model, request.recipes[0].sparsity)
    check_vocab(request)
    if (problem := vocab_out_problem(out, model)) is not None:
        raise OptionError(Option("out", str(out)), problem)
    text = request.recipes[0].vocab_text or request.calibration.calibration
    pattern = request.recipes[0].sparsity
    whole = request.part_of["sparsity"] if request.part_of is not None else str(pattern)
    if not request.output.overwrite:
        check_same_vocabulary(out, whole, str(pattern), str(text))
    documents = text_documents(text, request.calibration.text_field)
    say(stream, f"{pattern}: the tokens chosen by {text} ({len(documents):,} documents)")
    if request.dry_run:
        say(stream, "dry run: everything above was checked; nothing was run or written")
        return {"out": str(out), "workdir": None}
    device = str(resolve_device(request.resources.device))
    workdir = _workdir(request)
    recipe_dir = workdir / "results" / model_slug(request.model) / request.recipes[0].name
    with exclusive_workdir(workdir), quiet_libraries():
        alone = request.recipes[0].to_dict() if request.part_of is None else None
        entry, inputs = _written(out, recipe_dir, model, whole, alone, documents)
        if entry.current(inputs | {"weights": weight_files(out)}, _complete):
            report = json.loads((out / "vocabulary.json").read_text(encoding="utf-8"))
            say(
                stream,
                f"nothing to do: {out} holds {whole}, written by an earlier run from this model and text",
            )
        else:
            entry.discard()
            report = prune_vocabulary(model, out, pattern, documents, str(text), whole, alone)
            entry.write(inputs | {"weights": weight_files(out)})
            say(stream, summary(report, out))
        if request.evaluation.kinds:
            evaluation = _evaluate(
                request, out, device, dense or request.model, (workdir, recipe_dir), stream
            )
            write_card(out, report, evaluation)
            digests.record_again(out)
            for line in evaluation_lines(evaluation):
                say(stream, f"  {line}")
    return report | {"out": str(out)}


def _workdir(request: PruneRequest) -> Path:
    """Where the vocabulary's record and evaluations are kept: ``--workdir``, else the default one of the
    model and the calibration."""
    if request.resources.workdir:
        return Path(request.resources.workdir).expanduser().resolve()
    model = str(Path(request.model).expanduser().resolve())  # the same model given as another path finds it
    return default_workdir(model, dataclasses.asdict(request.calibration))


def _written(
    out: Path, recipe_dir: Path, model: Path, whole: str, alone: Any, documents: list[str]
) -> tuple[Entry, dict[str, Any]]:
    """The ledger's entry of ``out`` as this vocabulary's output (its record in ``recipe_dir``) and what it
    is written from: the model's files, the recipe, the documents that choose the tokens."""
    text = hashlib.sha256(json.dumps(documents).encode()).hexdigest()
    inputs = {"model": model_identity(model), "recipe": {"whole": whole, "alone": alone}, "text": text}
    return Entry(out, recipe_dir / WRITTEN), {**inputs, "out": str(out)}


def _complete(out: Path) -> bool:
    return (out / "vocabulary.json").is_file() and bool(weight_files(out))


def _evaluate(
    request: PruneRequest, out: Path, device: str, dense: str, where: tuple[Path, Path], stream: TextIO
) -> dict[str, Any]:
    """The written model's and ``dense``'s evaluations (``runner.evaluations``: kept in the working
    directory while their models and options stay the same), copied beside the model (``out/eval``)."""
    from thanos.files.atomic import write_json
    from thanos.runner.evaluations import Evaluations, dense_eval_dir
    from thanos.stages.engine import Steps

    evaluation, (workdir, recipe_dir) = request.evaluation, where
    evaluations = Evaluations(
        out, out, recipe_dir / "eval", dense, dense_eval_dir(workdir, dense),
        evaluation.kinds, str(evaluation.ppl_source), evaluation.tasks, device, request.recipes[0].name,
        request.resources.compute_dtype, evaluation.include_path, evaluation.ppl_seqlen,
        identity=weight_files(out),
    )  # fmt: skip
    results = evaluations.current()
    if results is None:
        from thanos.runner.progress import StepProgress

        with StepProgress(stream) as progress:  # each evaluation's step, as a pruning run shows it
            results = evaluations.run(Steps(on_event=progress.on_event))
    for name in (n for n in results if n != "dense"):  # perplexity, zeroshot
        write_json(out / "eval" / f"{name}.json", results[name])
        write_json(out / "eval" / "dense" / f"{name}.json", results["dense"][name])
    return results


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """For the duration, unless debug logging is on (``-v``): transformers' progress bars off and the INFO
    records of the model loading and the evaluation kept off the terminal, as a pruning run's display keeps
    them (what they say, the run says in its own lines)."""
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        yield
        return
    from transformers.utils import logging as transformers_logging

    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    loggers = [
        logging.getLogger(name)
        for name in ("thanos.evaluation", "thanos.stages.vocab", "thanos.stages.engine")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        if bars:
            transformers_logging.enable_progress_bar()


def text_documents(text: str, text_field: str) -> list[str]:
    """The documents of a text that chooses tokens (``c4``: its first ``C4_DOCUMENTS``)."""
    from thanos.data.calibration import load_source

    documents, _ = load_source(text, text_field)
    count = min(C4_DOCUMENTS, len(documents)) if text.lower() == "c4" else len(documents)
    return [documents[i] for i in range(count)]


def check_vocab_text(text: str | Path) -> None:
    """Refuse a ``vocab_text`` that is neither ``c4`` nor an existing path, before anything runs."""
    if str(text).lower() != "c4" and not Path(text).exists():
        raise OptionError(
            Option("vocab_text", text), "does not exist; give a text/jsonl/parquet file or directory, or c4"
        )


def check_same_vocabulary(out: Path, recipe: str, part: str, text: str) -> None:
    """Refuse an ``out`` holding the vocabulary of another ``recipe`` (whose last part is ``part``) or
    ``text`` (replaced only with ``--overwrite``, as another recipe's model is); this recipe's own is
    written again. A result of an earlier version records no recipe: its part is compared."""
    try:
        held = json.loads((out / "vocabulary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    holds = (held.get("recipe") or held.get("sparsity"), held.get("text"))
    if holds != (recipe if "recipe" in held else part, text):
        what = f"pruned vocabulary ({holds[0]} chosen by {holds[1]})"
        raise holds_another(out, what, f"{recipe} chosen by {text}")


def check_vocab_model(model: str, pattern: Any) -> None:
    """Refuse, before anything runs, a vocab ``pattern`` the model cannot take: not a local directory, a
    tokenizer that cannot lose tokens, a count that removes none or keeps fewer than the tokens every
    vocabulary keeps."""
    from thanos.models.vocabulary_files import check_vocab_pattern

    if not Path(model).is_dir():
        raise OptionError(
            Option("model", model),
            f" is not a local directory; {pattern} rewrites its tokenizer files: download it first (`hf "
            f"download {model} --local-dir DIR`) and give that directory",
        )
    try:
        check_vocab_pattern(model, pattern)
    except ValueError as err:
        raise OptionError(Option("sparsity", str(pattern)), str(err).removeprefix("vocab: ")) from None


def check_vocab(request: PruneRequest) -> None:
    """Refuse, before anything runs, a missing text (the vocabulary's, or the one scored)."""
    from thanos.evaluation.perplexity import WIKITEXT2

    if request.recipes[-1].vocab_text is not None:
        check_vocab_text(request.recipes[-1].vocab_text)
    evaluation = request.evaluation
    source = str(evaluation.ppl_source)
    if "ppl" in evaluation.kinds and source != WIKITEXT2 and not Path(source).exists():
        raise OptionError(Option("ppl_source", source), "does not exist; give the text to score")
