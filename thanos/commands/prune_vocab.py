"""``thanos prune-vocab``: a model directory written with a smaller vocabulary (``vocab:N`` keeps N tokens,
``vocab:p`` removes the fraction p), chosen by a text (``thanos.stages.vocab``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator

# its own errors (a tokenizer it cannot prune, a text too short) name the fix: one line, whatever stderr is
TRACEBACK = False

HELP = "write a model with a smaller vocabulary (vocab:N tokens kept, vocab:p removed) chosen by a text"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a Hugging Face model directory (BPE tokenizer.json)")
    parser.add_argument(
        "--sparsity",
        required=True,
        help="vocab:N (tokens kept, e.g. vocab:16000) or vocab:p (e.g. vocab:0.3)",
    )
    parser.add_argument(
        "--text",
        required=True,
        help="the text that chooses the tokens: a text/jsonl/parquet file or directory",
    )
    parser.add_argument("--text-field", default="text", help="jsonl/parquet field holding the text")
    parser.add_argument(
        "--out", required=True, help="the new model directory (a previous result is replaced)"
    )


def run(args: argparse.Namespace) -> None:
    from pathlib import Path

    from thanos.data.textdata import read_documents
    from thanos.errors import MissingOption, Option, OptionError
    from thanos.files.locks import exclusive_out
    from thanos.models import load_config
    from thanos.pruning.sparsity import parse_sparsity, sparsity_problem
    from thanos.runner.checks import check_vocab_model
    from thanos.runner.sources import check_text
    from thanos.stages.vocab import prune_vocabulary, summary, vocab_out_problem

    try:
        pattern = parse_sparsity(args.sparsity)
    except ValueError as err:
        problem = sparsity_problem(err, args.sparsity)
        raise OptionError(Option("sparsity", repr(args.sparsity)), problem) from None
    if pattern.kind != "vocab":
        raise ValueError(
            f"--sparsity {args.sparsity}: prune-vocab takes vocab:N or vocab:p; use thanos prune-model for "
            f"{pattern.kind}"
        )
    load_config(args.model)  # a directory without a readable config.json is refused, named
    check_vocab_model(args.model, pattern)  # a tokenizer that cannot lose tokens, a count it cannot keep
    text = Path(args.text).expanduser()
    if not text.exists():
        raise MissingOption(
            Option("text", str(args.text)), "no such file or directory; give the text whose tokens to keep"
        )
    check_text(text, "text", args.text, args.text_field)  # its files' types, encoding and first record
    out = Path(args.out)
    with exclusive_out(out):  # one writer of --out, from its check to the last write
        if (problem := vocab_out_problem(out, args.model)) is not None:
            raise ValueError(f"--out {out} {problem}")
        documents = read_documents(args.text, field=args.text_field)
        with _quiet_libraries():
            report = prune_vocabulary(args.model, out, pattern, documents, str(args.text))
    print(summary(report, out))


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """For the duration, unless debug logging is on (``-v``): transformers' progress bars off and the
    stage's INFO records kept off the terminal (the command prints what they say in its own lines)."""
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        yield
        return
    from transformers.utils import logging as transformers_logging

    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    logger = logging.getLogger("thanos.stages.vocab")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        if bars:
            transformers_logging.enable_progress_bar()
