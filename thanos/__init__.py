"""Thanos: block-wise LLM pruning (ICML 2025) with Magnitude, Wanda and SparseGPT baselines.

>>> from thanos import prune_layer
>>> result = prune_layer(W, H, "thanos", "2:4")
"""

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
]
__version__ = "0.1.0"
