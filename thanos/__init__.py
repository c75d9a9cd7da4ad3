"""Thanos: block-wise LLM pruning (Ilin and Richtárik, arXiv:2504.05346), with Magnitude, Wanda and
SparseGPT baselines.

>>> from thanos import prune_layer
>>> result = prune_layer(W, H, "thanos", "2:4")
>>> from thanos import prune_model  # a whole model, every stage in this process
>>> report = prune_model("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "thanos", "2:4", out="tinyllama-2of4")

The names below are imported on first use, so that the torch-free modules (``thanos.pruning.methods``,
``thanos.recipes.recipe``, ``thanos.files.layout``) load without torch (e.g. when Snakemake parses the
workflow), and ``python -m thanos <command>`` does not load torch before it needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names __getattr__ provides, for type checkers and editors
    from thanos.pruning.hessian import HessianAccumulator  # noqa: F401
    from thanos.pruning.layer import METHODS, PruneResult, PruneStats, layer_objective, prune_layer  # noqa: F401
    from thanos.pruning.sparsity import Sparsity, parse_sparsity  # noqa: F401
    from thanos.recipes.recipe import Recipe  # noqa: F401
    from thanos.runner.api import prune_model  # noqa: F401

_HOMES = {
    "HessianAccumulator": "thanos.pruning.hessian",
    "METHODS": "thanos.pruning.layer",
    "PruneResult": "thanos.pruning.layer",
    "PruneStats": "thanos.pruning.layer",
    "layer_objective": "thanos.pruning.layer",
    "prune_layer": "thanos.pruning.layer",
    "prune_model": "thanos.runner.api",
    "Recipe": "thanos.recipes.recipe",
    "Sparsity": "thanos.pruning.sparsity",
    "parse_sparsity": "thanos.pruning.sparsity",
}
__all__ = sorted(_HOMES)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'thanos' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
