"""Thanos: block-wise LLM pruning (ICML 2025) with Magnitude, Wanda and SparseGPT baselines.

>>> from thanos import prune_layer
>>> result = prune_layer(W, H, "thanos", "2:4")
>>> from thanos import prune_model  # a whole model, through the Snakemake workflow
>>> report = prune_model("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "thanos", "2:4", out="tinyllama-2of4")
"""

from typing import Any

from thanos.hessian import HessianAccumulator
from thanos.prune import METHODS, PruneResult, PruneStats, layer_objective, prune_layer
from thanos.sparsity import Sparsity, parse_sparsity

__all__ = [
    "METHODS",
    "HessianAccumulator",
    "PruneResult",
    "PruneStats",
    "Sparsity",
    "layer_objective",
    "parse_sparsity",
    "prune_layer",
    "prune_model",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``prune_model`` is imported on first use: importing ``thanos`` does not import Snakemake."""
    if name == "prune_model":
        from thanos.one_recipe import prune_model

        return prune_model
    raise AttributeError(f"module 'thanos' has no attribute {name!r}")
