"""The texts a run reads, checked for content before its first step, so that a text too short for what
it is read for is refused before any block is pruned, not found after: the perplexity text (one window of
``--ppl-seqlen`` tokens at least) and the distillation's (more windows than it holds out). Each is read as
the step that needs it reads it (``thanos.evaluation.perplexity``, ``thanos.stages.distill.text``), with the
model's tokenizer, and only as far as the check needs. Hub sources (``wikitext2``, ``c4``, ``hf:NAME``)
are the hub's: ``thanos.runner.checks`` checks that the hub can be reached. (``thanos distill`` reads its
text before any model, ``thanos.stages.distill.text.load_text``, which refuses a text too short there.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thanos.errors import Option, OptionError
from thanos.recipes.training import Distillation, streamed_dataset
from thanos.runner.request import Evaluation

PREFIX = 16  # characters per token needed read at first: a longer text is counted only that far


def text_tokens(tokenizer: Any, text: str, needed: int) -> int:
    """The tokens of ``text`` as ``tokenizer(text)`` counts them (the perplexity's windows), counted on a
    prefix first: at least ``needed`` there, else the whole text's count."""
    prefix = text[: needed * PREFIX]
    count = len(tokenizer(prefix).input_ids)
    if count >= needed or len(prefix) == len(text):
        return count
    return len(tokenizer(text).input_ids)


def ppl_tokens(source: str, tokenizer: Any, seqlen: int) -> int:
    """The tokens the perplexity text ``source`` (a local file or directory) gives, counted up to one window
    of ``seqlen`` (an empty text: 0)."""
    from thanos.evaluation.perplexity import load_eval_text

    return text_tokens(tokenizer, load_eval_text(source).text, seqlen)


def distill_windows(options: Distillation, tokenizer: Any) -> int:
    """The windows of ``options.seqlen`` tokens the distillation's local text gives, counted up to one more
    than it holds out (as many as a run needs at least)."""
    from thanos.data.calibration import load_source
    from thanos.stages.distill.text import pack_windows

    documents, _ = load_source(options.source, options.text_field)
    return int(pack_windows(documents, tokenizer, options.seqlen, options.heldout + 1).shape[0])


def check_texts(model: str, evaluation: Evaluation, distill: Distillation | None, max_positions: int) -> None:
    """Refuse, naming the options, a local perplexity text (``evaluation.ppl_source`` when ``ppl`` is asked)
    shorter than one window (``ppl_seqlen``, else min(2048, ``max_positions``) tokens) and a local
    distillation text with no more windows than it holds out; ``model``: whose tokenizer reads them."""
    from thanos.evaluation.perplexity import DEFAULT_SEQLEN
    from thanos.models import load_tokenizer

    ppl = "ppl" in evaluation.kinds and _local(evaluation.ppl_source)
    if not ppl and (distill is None or not _local(distill.source)):
        return
    tokenizer = load_tokenizer(model)
    seqlen = evaluation.ppl_seqlen or min(DEFAULT_SEQLEN, max_positions)
    if ppl and (tokens := ppl_tokens(str(evaluation.ppl_source), tokenizer, seqlen)) < seqlen:
        fix = f"give a longer text, or {tokens} or less as " if tokens >= 2 else "give a longer text "
        raise OptionError(
            Option("ppl_source", str(evaluation.ppl_source)),
            f" has {tokens} tokens, fewer than one window of {seqlen} (",
            Option("ppl_seqlen"),
            f"); {fix}",
            *((Option("ppl_seqlen"),) if tokens >= 2 else ()),
        )
    if distill is not None and _local(distill.source):
        if (windows := distill_windows(distill, tokenizer)) <= distill.heldout:
            raise OptionError(
                Option("distill.source", distill.source),
                f" gives {windows} window(s) of {distill.seqlen} tokens, not more than the {distill.heldout} "
                "held out; give a longer text, a smaller ",
                Option("distill.seqlen"),
                " or a smaller ",
                Option("distill.heldout"),
            )


def _local(source: str | Path) -> bool:
    """A local file or directory (checked to exist by then), not a hub dataset."""
    return not streamed_dataset(str(source)) and Path(source).expanduser().exists()
