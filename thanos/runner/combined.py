"""Combined recipes: blocks, heads and MLP neurons removed in one call, ``--sparsity depth:4+neurons:0.3``.

The parts run one after the other, each a whole ``prune_model`` run on the model the previous part wrote
(its own working directory, calibration and stores, so that a second combination that starts the same way
reuses the first parts, and a rerun resumes at the part it stopped in), in this order whatever the order
written:

1. ``depth`` first: the blocks are scored on the dense model and removed before any width is pruned, so no
   width is pruned in a block that then goes, and every later part calibrates on the model it is part of;
2. ``heads`` (or ``kv_heads``) next, then ``neurons``: within a block the attention feeds the MLP, so the
   MLP's neurons are chosen, and corrected, on the inputs the pruned attention gives it.

The intermediate models are written under the working directory root (``combined/``, which ``thanos
workdirs`` lists and deletes like a working directory); the last part
writes ``out``, with the card, the report and the evaluations. The returned report lists every part.
``recover`` applies to the width parts (a depth part prunes no weight of the blocks it keeps).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thanos.pruning.sparsity import parse_sparsity

ORDER = {"depth": 0, "heads": 1, "kv_heads": 1, "neurons": 2}  # the order the parts run in
# while the last part runs: the whole recipe, the base model and the parts before it (what the last part's
# report and card record: ``thanos.runner.one_recipe`` reads it into the run's record)
COMBINED: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("combined", default=None)


def combined_parts(sparsity: Any) -> list[str] | None:
    """The parts of a combined pattern (``depth:4+neurons:0.3``) in the order they run; None for one
    pattern. Refused: a part that removes no structure (unstructured, n:m, structured), a kind twice."""
    if not isinstance(sparsity, str) or "+" not in sparsity:
        return None
    parts = [parse_sparsity(part) for part in sparsity.split("+")]
    for part in parts:
        if part.kind not in ORDER:
            raise ValueError(
                f"--sparsity {sparsity!r}: {part} cannot be combined; a combined recipe joins depth:K, "
                "heads:P (or kv_heads:P) and neurons:P with '+', e.g. depth:4+neurons:0.3"
            )
    ranks = [ORDER[part.kind] for part in parts]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"--sparsity {sparsity!r}: each of depth, heads and neurons at most once")
    return [str(part) for part in sorted(parts, key=lambda part: ORDER[part.kind])]


def prune_combined(run_one: Callable[..., dict[str, Any]], arguments: dict[str, Any]) -> dict[str, Any]:
    """Run every part of ``arguments['sparsity']`` with ``run_one`` (``prune_model``'s own function), each
    on the previous part's model; the last writes ``out`` and evaluates."""
    from thanos.runner.one_recipe import _print, model_reference, model_slug
    from thanos.runner.workdirs import default_root, record_run

    parts = combined_parts(arguments["sparsity"])
    assert parts is not None
    stream = arguments["stream"]
    reference = model_reference(arguments["model"])
    given = arguments.get("workdir")
    root = Path(given).expanduser().resolve() if given else default_root()
    calibration = [arguments[key] for key in ("calibration", "nsamples", "seqlen", "seed", "text_field")]
    _print(stream, f"combined recipe: {' then '.join(parts)}, each part on the model the previous one wrote")
    if not arguments.get("dry_run"):  # the intermediate models: listed and deleted by ``thanos workdirs``
        (root / "combined").mkdir(parents=True, exist_ok=True)
        calibration_record = {
            "source": str(arguments["calibration"]),
            "nsamples": arguments["nsamples"],
            "seqlen": arguments["seqlen"],
        }
        record_run(root / "combined", reference, calibration_record, "+".join(parts))
    model, steps = reference, []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key = json.dumps([reference, arguments["method"], parts[: i + 1], calibration], default=str)
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        name = "+".join(parts[: i + 1]).replace(":", "")
        step_out = root / "combined" / f"{model_slug(reference)}-{digest}" / name
        options = dict(arguments, model=model, sparsity=part)
        if part.startswith("depth"):  # no weight of the kept blocks is pruned: nothing to recover
            options["recover"] = None
        if given:
            options["workdir"] = Path(given) / f"part{i + 1}-{part.replace(':', '')}"
        if not last:
            options |= {"out": step_out, "evaluate": (), "overwrite": True}
        _print(stream, f"--- part {i + 1}/{len(parts)}: {part} on {model}")
        record = {"sparsity": "+".join(parts), "base_model": reference, "parts": list(steps)}
        token = COMBINED.set(record if last else None)
        try:
            report = run_one(**options)
        finally:
            COMBINED.reset(token)
        steps.append(
            {"sparsity": part, "model": str(model), "out": report["out"], "compact": report.get("compact")}
        )
        if arguments.get("dry_run") and not last:
            _print(stream, f"dry run: the next parts ({', '.join(parts[i + 1 :])}) run on this part's model")
            return report | {"parts": steps}
        model = report["out"]
    first, final = steps[0]["compact"] or {}, steps[-1]["compact"] or {}
    if first.get("parameters") and final.get("parameters"):
        before, after = first["parameters"]["original"], final["parameters"]["kept"]
        _print(
            stream,
            f"combined {'+'.join(parts)}: {after:,} of {before:,} parameters of {reference} "
            f"({100 * (1 - after / before):.1f} % fewer)",
        )
    return report | {"parts": steps}
