"""Where a size's search lives: ``--workdir``/search, else a directory under the working directory root
keyed by the model, the calibration and the recipe options (not the size: every size of those reads one
cost table there), and the line naming an earlier search of the same model that other options left behind."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from thanos.runner.request import PruneRequest
from thanos.runner.workdirs import default_root, model_slug


def searched(request: PruneRequest) -> PruneRequest:
    """The request as its search keys and records it: the model's directory and a local calibration source
    as absolute paths (``med``, ``./med/`` and ``/work/med`` are one model; each found another search
    directory and measured its whole cost table again)."""
    from thanos.runner.checks import model_reference

    calibration = request.calibration
    source = Path(calibration.calibration).expanduser()
    if source.exists():
        calibration = dataclasses.replace(calibration, calibration=str(source.resolve()))
    return dataclasses.replace(request, model=model_reference(request.model), calibration=calibration)


def search_directory(request: PruneRequest) -> Path:
    """The search's directory: ``--workdir``/search, else one under the working directory root keyed by
    the model, the calibration and the recipe options."""
    if request.resources.workdir:
        return Path(request.resources.workdir).expanduser().resolve() / "search"
    key = search_key(request)
    listed = [request.model, key["calibration"], key["options"]]
    name = hashlib.sha256(json.dumps(listed, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return default_root() / f"{model_slug(request.model)}-search-{name}"


def search_key(request: PruneRequest) -> dict[str, Any]:
    """What a search's default directory is keyed by, besides the model: the calibration and the recipe
    options (not ``vocab_text``: a vocabulary candidate's inputs name its text, the others serve any)."""
    options = dataclasses.asdict(dataclasses.replace(request.size.options, sparsity=""))  # type: ignore[union-attr]
    options.pop("vocab_text")
    return {"calibration": dataclasses.asdict(request.calibration), "options": options}


def other_search(request: PruneRequest, root: Path) -> str | None:
    """When ``root`` is a new default search directory: the line naming the latest other search of the same
    model under the working directory root, the option that differs and how to delete it; else None."""
    from thanos.files.ledger import difference
    from thanos.runner.disk import size_text
    from thanos.stages.describe.provenance import path_bytes

    if request.resources.workdir or root.exists():
        return None
    found = []
    for other in root.parent.glob(f"{model_slug(request.model)}-search-*"):
        try:
            record = json.loads((other / "workdir.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("model") == request.model and "search_key" in record:
            found.append((record.get("last_run", ""), other, record["search_key"]))
    if not found:
        return None
    _, other, recorded = max(found, key=lambda item: item[0])
    why = difference(recorded, search_key(request)) or "another key"
    size = size_text(path_bytes(other))
    return (
        f"a new search in {root.name}: {why} since the search in {other.name} ({size}; its candidates serve "
        f"only its options: `thanos workdirs --delete {other.name}` deletes it)"
    )
