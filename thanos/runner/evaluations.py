"""The evaluations ``thanos prune-model`` runs on the model it published: perplexity and zero-shot accuracy
of the assembled model, each kept (``eval/<name>.json`` beside the model in the working directory) while
the model and the evaluation's options stay the same, the model loaded once for both."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PPL_BATCH_SIZE = 8  # the workflow's defaults (workflow/schemas/config.schema.yaml)
ZEROSHOT_BATCH_SIZE = 16
NAMES = {"ppl": "perplexity", "zeroshot": "zeroshot"}  # --evaluate name: the file's and the card's


@dataclass(frozen=True)
class Evaluations:
    """The evaluations asked for (``kinds``: ``ppl``, ``zeroshot``) of the model in ``model_dir``;
    their files go to ``eval_dir``."""

    model_dir: Path
    eval_dir: Path
    kinds: tuple[str, ...]
    ppl_source: str
    tasks: list[str] | None
    device: str
    recipe: str  # the recipe's name, for the progress lines

    def _inputs(self, kind: str) -> dict[str, Any]:
        from thanos.stages.engine import source_identity
        from thanos.stages.outputs import mtime

        made = mtime(self.model_dir / "pruning_report.json")
        if kind == "ppl":
            return {"model": made, "source": source_identity(self.ppl_source)}
        return {"model": made, "tasks": self.tasks}

    def _file(self, kind: str) -> Path:
        return self.eval_dir / f"{NAMES[kind]}.json"

    def current(self) -> dict[str, Any] | None:
        """The results of every evaluation asked for, when each is current; else None."""
        from thanos.stages.engine import Steps

        if not self.kinds or not all(Steps.current(self._file(k), self._inputs(k)) for k in self.kinds):
            return None
        return {NAMES[k]: json.loads(self._file(k).read_text()) for k in self.kinds}

    def run(self, steps: Any) -> dict[str, Any] | None:
        """Compute the evaluations that are not current (``steps``: the engine's ``Steps``); their results."""
        loaded: list[Any] = []

        def model() -> Any:
            from thanos.evaluation.loading import load_model

            if not loaded:
                loaded.append(load_model(str(self.model_dir), device=self.device))
            return loaded[0]

        def perplexity(out: Path) -> None:
            from thanos.evaluation.perplexity import evaluate_perplexity
            from thanos.files.atomic import write_json

            result = evaluate_perplexity(
                str(self.model_dir), source=self.ppl_source, batch_size=PPL_BATCH_SIZE, device=self.device,
                progress=False, loaded=model(),
            )  # fmt: skip
            write_json(out, result.to_dict())

        def zeroshot(out: Path) -> None:
            from thanos.evaluation.zeroshot import evaluate_zeroshot
            from thanos.files.atomic import write_json

            summary = evaluate_zeroshot(
                str(self.model_dir), tasks=self.tasks, batch_size=ZEROSHOT_BATCH_SIZE, device=self.device,
                loaded=model(),
            )  # fmt: skip
            write_json(out, summary)

        compute = {"ppl": perplexity, "zeroshot": zeroshot}
        labels = {"ppl": "perplexity", "zeroshot": "zero-shot tasks"}
        for kind in self.kinds:
            out = self._file(kind)
            steps.run(f"{labels[kind]} ({self.recipe})", out, self._inputs(kind), lambda: compute[kind](out))  # noqa: B023
        return self.current()
