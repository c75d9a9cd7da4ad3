"""``model-info`` stage: what the other stages read of a model without building it (``model_info.json``).

Its layout (model type, blocks, prunable layers and their Hessian groups, ``thanos.models.layout``: what
the prune, owl and compact stages read instead of building the model), its directory, and its input
fingerprint (name, size and mtime_ns of each model file). Refuses a checkpoint without a prunable layer's
weight, and reads every tensor once and refuses one holding NaN or Inf, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_info(model: str | Path, out: str | Path) -> dict[str, Any]:
    """Check ``model`` and write its ``model_info.json`` to ``out`` atomically; return it without the
    fingerprint."""
    from thanos.files.atomic import write_json
    from thanos.files.fingerprint import model_fingerprint
    from thanos.models import open_model

    model_dir, adapter, checkpoint = open_model(model)
    info = adapter.layout.to_info() | {"path": str(model_dir)}
    fingerprint = model_fingerprint(model_dir)
    adapter.check_checkpoint(checkpoint)
    checkpoint.check_finite()
    write_json(out, info | {"fingerprint": fingerprint})
    return info
