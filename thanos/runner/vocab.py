"""A ``vocab:N`` / ``vocab:p`` request of ``thanos prune-model``: the tokens chosen by the calibration text
(``thanos.stages.vocab``), the model written to ``out`` in one step (no working directory: no block is
pruned, the dense model scores the tokens in one pass over the text).

The text is the calibration source's documents (``c4``: its first ``C4_DOCUMENTS``); the dense model scores
the tokens on ``nsamples`` consecutive windows of ``seqlen`` tokens of it (default 256). Evaluations after
the write are not run for it yet (``thanos perplexity`` measures the written model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from thanos.errors import Option, OptionError
from thanos.runner.console import say
from thanos.runner.request import PruneRequest

C4_DOCUMENTS = 2000  # C4's documents that choose a vocabulary (about 1 M words)
DEFAULT_SEQLEN = 256


def prune_vocab(request: PruneRequest, stream: TextIO) -> dict[str, Any]:
    """Check the request, choose the tokens and write ``out``; the report (``vocabulary.json``'s content)
    with ``out`` added."""
    from thanos.data.calibration import load_source
    from thanos.stages.vocab import check_vocab_out, prune_vocabulary, summary

    model, out = Path(request.model), Path(request.output.out)
    if not model.is_dir():
        raise OptionError(Option("model", request.model), " is not a local directory; vocab:N needs one")
    if request.evaluation.evaluate:
        raise OptionError(
            Option("evaluate", str(request.evaluation.evaluate)),
            "is not run for vocab recipes yet; leave it out and measure the written model with thanos "
            "perplexity",
        )
    try:
        check_vocab_out(out, model)
    except ValueError as err:
        raise OptionError(Option("out", str(out)), str(err).split(" ", 2)[2]) from None
    calibration = request.calibration
    documents, _ = load_source(calibration.calibration, calibration.text_field)
    if str(calibration.calibration).lower() == "c4":
        documents = [documents[i] for i in range(min(C4_DOCUMENTS, len(documents)))]
    pattern = request.recipes[0].sparsity
    say(stream, f"{pattern}: the tokens chosen by {calibration.calibration} ({len(documents):,} documents)")
    if request.dry_run:
        say(stream, "dry run: everything above was checked; nothing was run or written")
        return {"out": str(out), "workdir": None}
    device = request.resources.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    seqlen = calibration.seqlen or DEFAULT_SEQLEN
    report = prune_vocabulary(
        model, out, pattern, documents, str(calibration.calibration), seqlen, calibration.nsamples, device
    )
    say(stream, summary(report, out))
    return report | {"out": str(out)}
