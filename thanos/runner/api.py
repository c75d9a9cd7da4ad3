"""The public ``thanos.prune_model``: its keywords become one ``PruneRequest`` (``thanos.runner.request``),
which ``execute`` runs, as ``thanos prune-model`` does with its options. Bad input is refused in Python's
words (``sparsity='3:2': ...``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from thanos.errors import OptionError
from thanos.files.locks import exclusive_out
from thanos.recipes.recipe import Recipe
from thanos.runner.combined import prune_combined
from thanos.runner.one_recipe import prune_one
from thanos.runner.progress import Console
from thanos.runner.request import DEFAULT_NSAMPLES, PYTHON, PruneRequest, build_request


def prune_model(
    model: str | Path,
    method: str | Recipe,
    sparsity: str | float | None = None,
    *,
    out: str | Path,
    calibration: str | Path = "c4",
    alpha: float | None = None,
    blocksize: int | None = None,
    damp: float | None = None,
    nsamples: int = DEFAULT_NSAMPLES,
    seqlen: int | None = None,
    seed: int = 0,
    text_field: str = "text",
    workdir: str | Path | None = None,
    device: str = "auto",
    compute_dtype: str = "auto",
    evaluate: str | Sequence[str] = (),
    ppl_source: str | Path = "wikitext2",
    ppl_seqlen: int | None = None,
    tasks: Sequence[str] | None = None,
    include_path: str | Path | None = None,
    cores: int | None = None,
    exclude: Sequence[str] | None = None,
    compact: bool | None = None,
    block_map: bool | None = None,
    width_multiple: int | None = None,
    vocab_text: str | Path | None = None,
    axes: str | Sequence[str] | None = None,
    stream: TextIO | None = None,
    profile: str | None = None,
    owl_m: float | None = None,
    owl_lambda: float | None = None,
    overwrite: bool = False,
    recover: bool | dict[str, Any] | None = None,
    distill: dict[str, Any] | None = None,
    keep: str = "needed",
    disk_check: bool = True,
    dry_run: bool = False,
    table_only: bool = False,
) -> dict[str, Any]:
    """Prune ``model`` (a Hugging Face directory or hub id) with one recipe and write the pruned model,
    loadable with ``AutoModelForCausalLM.from_pretrained``, to ``out``; rerunning the same call resumes.

    ``method``: magnitude, wanda, sparsegpt or thanos, with ``sparsity``: 0.5, "2:4", "4:8",
    "structured:0.3", "neurons:0.3", "heads:0.33", "kv_heads:0.25", "depth:6", "vocab:0.3" ("vocab:16000":
    tokens kept), structures joined with "+" ("depth:4+neurons:0.3+vocab:0.3"), or "params:0.25" (the mix
    of ``axes``, default "depth,heads,neurons,vocab", that removes that fraction of the parameters with the
    least loss on held-out calibration windows: docs/structures.md; "params:0.15,0.25,0.35": several sizes,
    each written to ``out/params0.15`` and so on, with the quality-against-size curve in ``out/sizes.csv``
    and ``out/sizes.png``); or a ``thanos.Recipe`` (then no ``sparsity`` nor recipe keywords).
    The recipe's keywords (None: the method's default): ``alpha``, ``blocksize``, ``damp``, ``profile``
    ("owl", with ``owl_m`` and ``owl_lambda``), ``exclude`` (regular expressions of layers left dense),
    ``compact``, ``block_map`` (depth:k: each run of removed blocks replaced by a fitted linear map, the
    default), ``width_multiple`` (neurons:p: the kept width's multiple, default 32), ``vocab_text`` (vocab:
    the text whose tokens are kept, default the calibration's documents), ``recover`` (True or
    {epochs, lr, batch_size, holdout, target}), ``distill`` ({tokens,
    source, lr, batch_size, ...}: the pruned model distilled toward ``model`` on text, docs/distillation.md;
    ``out`` gets the distilled model). The calibration:
    ``calibration`` ("c4" or a local text/jsonl/parquet file or directory), ``nsamples`` windows of
    ``seqlen`` tokens (default min(2048, the model's positions)), ``seed``, ``text_field``. Where it runs:
    ``device``, ``compute_dtype``, ``cores``, ``workdir``, ``keep`` ("needed" or "all"), ``disk_check``.
    The evaluation: ``evaluate`` ("ppl" and/or "zeroshot"), ``ppl_source``, ``ppl_seqlen`` (the perplexity
    window, default min(2048, the model's positions)), ``tasks``, ``include_path``.
    ``overwrite`` replaces an ``out`` holding another result; ``dry_run`` checks everything and returns
    without running; ``table_only`` (params:P) measures the size's cost table and returns the mix it
    predicts for each size, writing no model. Each keyword is the same-named option of ``thanos
    prune-model`` (``--help`` says more; docs/library.md). Progress goes to ``stream`` (stderr).

    Returns the pruning report (``pruning_report.json``) with ``out``, ``workdir`` and ``evaluation``
    added (a dry run: ``out``, ``workdir`` and ``disk``; ``table_only``: ``out``, ``workdir`` and
    ``predicted``, by size; several sizes: ``out``, ``sizes``, each size's
    report by its request, and ``curve``, the rows of ``sizes.csv``). Bad input raises
    ``thanos.errors.OptionError`` (a ValueError) naming the keyword; a failed or interrupted step raises
    ``thanos.runner.one_recipe.RunFailed`` (finished steps are kept)."""
    options = dict(locals())  # every keyword, as given
    for name in ("model", "method", "sparsity", "stream"):
        del options[name]
    try:
        request = build_request(model, method, sparsity, options)
        return execute(request, stream if stream is not None else sys.stderr)
    except OptionError as err:
        raise err.worded(PYTHON) from None


def execute(request: PruneRequest, stream: TextIO) -> dict[str, Any]:
    """Run a request: one recipe (``thanos.runner.one_recipe``: the engine's steps, a vocabulary's too), or
    each part of a combined one on the previous part's model (``thanos.runner.combined``), or a size
    (``thanos.runner.size``), holding ``out``
    (``thanos.files.locks``: another process writing it is refused at once); a closed ``stream`` stops the
    lines, not the run."""
    console = Console(stream)
    # one writer of ``out`` from the check of what it holds to the last write (a dry run only checks)
    with exclusive_out(request.output.out, probe=request.dry_run or request.table_only):
        if request.size is not None and request.size.sizes:  # params:P1,P2,...: a model per size
            from thanos.runner.sizes import prune_sizes

            return prune_sizes(request, console, execute)
        if request.size is not None:
            from thanos.runner.size import prune_to_size

            return prune_to_size(request, console, execute)
        return prune_combined(request, console) if request.combined else prune_one(request, console)
