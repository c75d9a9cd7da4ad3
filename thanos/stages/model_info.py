"""``model-info`` stage: what the other stages read of a model without building it (``model_info.json``).

Its layout (model type, blocks, prunable layers and their Hessian groups, ``thanos.models.layout``: what
the prune, owl and compact stages read instead of building the model), its directory, and its input
fingerprint (name, size and mtime_ns of each model file). Refuses a checkpoint without a prunable layer's
weight, and reads every tensor once and refuses one holding NaN or Inf, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thanos.models import ModelHandle


def model_info(model: str | Path | ModelHandle, out: str | Path) -> dict[str, Any]:
    """Check ``model`` and write its ``model_info.json`` to ``out`` atomically; return it without the
    fingerprint."""
    from thanos.files.atomic import write_json
    from thanos.models import as_handle

    handle = as_handle(model)
    adapter, checkpoint = handle.adapter, handle.checkpoint
    info = adapter.layout.to_info() | {"path": str(handle.path)}
    fingerprint = handle.fingerprint
    adapter.check_checkpoint(checkpoint)
    checkpoint.check_finite()
    write_json(out, info | {"fingerprint": fingerprint})
    return info
