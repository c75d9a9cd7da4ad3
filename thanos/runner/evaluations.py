"""The evaluations ``thanos prune-model`` runs once the model is published: perplexity and zero-shot
accuracy of the pruned model, and of the dense model on the same data (computed once per model and data,
shared by every recipe: the number beside the pruned one). Each result is kept (``eval/<name>.json`` beside
the model in the working directory, ``dense/eval/`` for the dense one) while its model and options stay the
same; each model is loaded once for both evaluations."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.evaluation.perplexity import DEFAULT_BATCH_SIZE
from thanos.files.layout import DENSE
from thanos.files.ledger import Entry, Upstream, source_identity
from thanos.runner.workdirs import model_slug

ZEROSHOT_BATCH_SIZE = 16  # the workflow's default (workflow/schemas/config.schema.yaml)
NAMES = {"ppl": "perplexity", "zeroshot": "zeroshot"}  # --evaluate name: the file's and the card's
LABELS = {"ppl": "perplexity", "zeroshot": "zero-shot tasks"}


def dense_eval_dir(workdir: Path, model: str) -> Path:
    """Where a working directory keeps ``model``'s own evaluations (``results/<its name>/dense/eval``): the
    number beside every recipe's pruned model there, computed once."""
    return workdir / "results" / model_slug(model) / DENSE / "eval"


@dataclass(frozen=True)
class Evaluations:
    """The evaluations asked for (``kinds``: ``ppl``, ``zeroshot``) of the pruned model assembled in
    ``model_dir`` and published to ``published`` (loaded from there: the working directory may keep no
    weights; files in ``eval_dir``) and of the dense ``reference`` (files in ``dense_eval_dir``)."""

    model_dir: Path
    published: Path
    eval_dir: Path
    reference: str
    dense_eval_dir: Path
    kinds: tuple[str, ...]
    ppl_source: str
    tasks: list[str] | None
    device: str
    recipe: str  # the recipe's name, for the progress lines
    dtype: str = "auto"  # the dtype the models are run in (``thanos.stages.common.compute_dtype``)
    include_path: str | None = None  # a directory of local lm-eval task YAMLs
    ppl_seqlen: int | None = None  # the perplexity window (None: min(2048, the model's positions))

    @functools.cached_property
    def _runs_in(self) -> str:
        """The dtype the models are run in, ``dtype`` resolved (``auto`` depends on the machine): a result
        computed in another dtype, or before ``auto`` chose this one, is computed again."""
        from thanos.evaluation.loading import run_dtype

        return run_dtype(self.reference, self.device, self.dtype)

    @functools.cached_property
    def _dense_identity(self) -> Any:
        """The dense model's files (read once: for a hub id, resolving it asks the hub)."""
        from thanos.models import ModelHandle

        return ModelHandle.open(self.reference).fingerprint

    def _variants(self) -> list[tuple[str, str, Path, Any]]:
        """(name, model, eval directory, the model's identity) of the pruned and the dense model."""
        pruned = Upstream(self.model_dir / "pruning_report.json")  # its modification time: assembly sets it
        return [
            (self.recipe, str(self.published), self.eval_dir, pruned),
            ("dense", self.reference, self.dense_eval_dir, self._dense_identity),
        ]

    def _inputs(self, kind: str, identity: Any) -> dict[str, Any]:
        if kind == "ppl":
            inputs = {"model": identity, "source": source_identity(self.ppl_source), "dtype": self._runs_in}
            inputs["batch_size"] = DEFAULT_BATCH_SIZE
            return inputs | ({"seqlen": self.ppl_seqlen} if self.ppl_seqlen is not None else {})
        inputs = {"model": identity, "tasks": self.tasks, "dtype": self._runs_in}
        if self.include_path:  # edited task YAMLs evaluate again
            inputs["include_path"] = source_identity(self.include_path)
        return inputs

    def current(self) -> dict[str, Any] | None:
        """The results of every evaluation asked for, when each is current (the dense model's under
        ``dense``); else None."""
        variants = self._variants()
        files = [
            (v, d / f"{NAMES[k]}.json", self._inputs(k, i)) for v, _, d, i in variants for k in self.kinds
        ]
        if not self.kinds or not all(Entry.beside(file).current(inputs) for _, file, inputs in files):
            return None
        results: dict[str, Any] = {"dense": {}}
        for variant, file, _ in files:
            (results["dense"] if variant == "dense" else results)[file.stem] = json.loads(file.read_text())
        return results

    def run(self, steps: Any) -> dict[str, Any] | None:
        """Compute the evaluations that are not current (``steps``: the engine's ``Steps``); their results."""
        for variant, model, eval_dir, identity in self._variants():
            loaded: list[Any] = []
            for kind in self.kinds:
                out = eval_dir / f"{NAMES[kind]}.json"

                def compute(
                    kind: str = kind, out: Path = out, model: str = model, loaded: list = loaded
                ) -> None:
                    self._evaluate(kind, model, out, loaded)

                steps.run(f"{LABELS[kind]} ({variant})", out, self._inputs(kind, identity), compute)
        return self.current()

    def _evaluate(self, kind: str, model: str, out: Path, loaded: list[Any]) -> None:
        """One evaluation of ``model`` into ``out`` (``loaded``: the model once loaded, shared)."""
        from thanos.evaluation.loading import load_model
        from thanos.files.atomic import write_json

        if not loaded:
            loaded.append(load_model(model, device=self.device, dtype=self.dtype))
        if kind == "ppl":
            from thanos.evaluation.perplexity import evaluate_perplexity

            result = evaluate_perplexity(
                model, source=self.ppl_source, seqlen=self.ppl_seqlen, device=self.device, progress=False,
                loaded=loaded[0], seqlen_option="--ppl-seqlen",
            )  # fmt: skip
            write_json(out, result.to_dict())
        else:
            from thanos.evaluation.zeroshot import evaluate_zeroshot

            summary = evaluate_zeroshot(
                model, tasks=self.tasks, include_path=self.include_path, batch_size=ZEROSHOT_BATCH_SIZE,
                device=self.device, loaded=loaded[0],
            )  # fmt: skip
            write_json(out, summary)
